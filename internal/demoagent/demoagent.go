package demoagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The texts and data the rules answer with.
const (
	ReturnPolicy = "You can return unworn Stormline gear within 60 days for a full refund. " +
		"Start a return from your orders page or at any Stormline store; return shipping is free."
	ExchangeOffer = "We can exchange your jacket for the Stormline Insulated Jacket in medium. " +
		"It costs $70 more than yours; shall I set up the exchange?"
	ExchangeProposed = "I can exchange your Stormline Jacket for the insulated version in medium for $70 more. " +
		"I'll do it once you approve."
	ExchangeDone     = "Done: your exchange is booked. The Stormline Insulated Jacket (M) ships as soon as your jacket is on its way back."
	ExchangeDeclined = "I haven't made the exchange."
	ExchangeGoing    = "The exchange is going through; I'll confirm here once it's done."
	ExchangeNewTerms = "The terms changed before I could make the exchange, so nothing was done. Ask me again for the current offer."
	ExchangeNotDone  = "That approval doesn't match an exchange I can make now, so nothing was done."
	ExchangeSignIn   = "Sign in to the account the exchange is for to approve it; nothing was done."
	ExchangeFailed   = "I couldn't make the exchange"
	OrderStatus      = "Your latest order, ord_7Hk2 (the Stormline Jacket (M) and Trail Socks), was delivered last week."
	HelpText         = "I'm Stormline's assistant. I can help with returns, exchanges (say \"jacket\") and your orders. " +
		"To talk with someone from our team, ask for a person."
	UserRequestedReason = "A Stormline specialist would like to talk with you about your gear."
	HelloText           = "Hi, I'm Alex from the Stormline team. I've read the conversation so far; how can I help?"
	// OrdersScope is the scope the order rule needs.
	OrdersScope = "orders:read"
	// WriteScope is the scope the exchange needs besides OrdersScope.
	WriteScope = "orders:write"
)

// ExchangeData is the data of the exchange offer.
var ExchangeData = map[string]any{"replacement_sku": "stormline-insulated-m", "price_difference": 70}

// Alex is the person who takes handoffs.
var Alex = map[string]any{"type": "human", "id": "alex", "name": "Alex"}

// Options configure an Agent.
type Options struct {
	// Secret is the webhook secret (whsec_...).
	Secret string
	// APIKey is the Company API key (phk_...).
	APIKey string
	// BaseURL is the platform's public URL; the Company API is under
	// {BaseURL}/company/v1.
	BaseURL string
	// Client reaches BaseURL and JWKSURL over HTTPS.
	Client *http.Client
	// JoinDelay is how long Alex takes to join a handoff; default 2s.
	JoinDelay time.Duration
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock [time.Now], for the timestamp check and
	// Poppy-Verified's expiry.
	Now func() time.Time
	// OrdersAPI is the name the shop's orders API is registered under
	// ["orders"]; exchanges proposed in conversations are performed there.
	OrdersAPI string
	// JWKSURL is the Company's key set, {issuer}/oauth/jwks.json, which
	// signs Poppy-Verified. Required.
	JWKSURL string
	// Issuer is the Company's identifier, Poppy-Verified's iss. Required.
	Issuer string
	// WebhookURL is the agent webhook's URL as the Company configured it,
	// Poppy-Verified's aud. Required.
	WebhookURL string
}

// Agent is the demo Company Agent. Close it to stop pending joins.
type Agent struct {
	o      Options
	keys   *demoshop.KeySet
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	seen map[string]bool
}

const maxSeen = 10000

// New returns the agent.
func New(o Options) (*Agent, error) {
	if !strings.HasPrefix(o.JWKSURL, "https://") || o.Issuer == "" || o.WebhookURL == "" {
		return nil, errors.New("demoagent: JWKSURL (https), Issuer and WebhookURL are required")
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.JoinDelay <= 0 {
		o.JoinDelay = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OrdersAPI == "" {
		o.OrdersAPI = "orders"
	}
	o.BaseURL = strings.TrimSuffix(o.BaseURL, "/")
	a := &Agent{o: o, seen: map[string]bool{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	keys, err := demoshop.NewKeySet(a.ctx, o.JWKSURL, o.Client, o.Now)
	if err != nil {
		a.cancel()
		return nil, err
	}
	a.keys = keys
	return a, nil
}

// Close stops pending joins and the key set's refreshes, and waits for the
// joins.
func (a *Agent) Close() {
	a.cancel()
	a.wg.Wait()
}

// delivery is the part of the webhook body the agent reads.
type delivery struct {
	Type string `json:"type"`
	Data struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
		Event struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Status  string `json:"status"`
			Message *struct {
				Text       string `json:"text"`
				Extensions struct {
					Operations struct {
						Approval json.RawMessage `json:"approval"`
					} `json:"operations"`
				} `json:"extensions"`
			} `json:"message"`
		} `json:"event"`
		// Operation is the outcome of a conversation.operation delivery.
		Operation *outcome `json:"operation"`
	} `json:"data"`
}

// outcome is what became of an approval (docs/operations-extension.md,
// "Conversations").
type outcome struct {
	OperationID string `json:"operation_id"`
	Revision    string `json:"revision"`
	Status      string `json:"status"`
	EventID     string `json:"event_id"`
	Response    *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
	Decline *struct {
		Reason      string          `json:"reason"`
		Alternative json.RawMessage `json:"alternative"`
	} `json:"decline"`
}

// ServeHTTP handles one webhook delivery.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if err := Verify(a.o.Secret, r.Header, body, a.o.Now()); err != nil {
		a.o.Logger.Warn("demo agent: refused a delivery", slog.Any("err", err))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	hookID := r.Header.Get("webhook-id")
	a.mu.Lock()
	repeat := a.seen[hookID]
	a.mu.Unlock()
	if repeat {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var d delivery
	if err := json.Unmarshal(body, &d); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	c, status, err := a.checkVerified(r, &d)
	if err != nil {
		a.o.Logger.Warn("demo agent: refused a delivery's Poppy-Verified", slog.String("webhook_id", hookID),
			slog.Any("err", err))
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		w.WriteHeader(status)
		return
	}
	if d.Type == "conversation.operation" && d.Data.Operation != nil {
		err = a.told(r.Context(), d.Data.Conversation.ID, d.Data.Operation)
	} else {
		err = a.handle(r.Context(), &d, c)
	}
	if err != nil {
		// Not acknowledged: the platform retries (section 5).
		a.o.Logger.Warn("demo agent: answering", slog.String("webhook_id", hookID), slog.Any("err", err))
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	a.mu.Lock()
	if len(a.seen) >= maxSeen {
		clear(a.seen)
	}
	a.seen[hookID] = true
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// handle applies the rules of the package comment to one event.
func (a *Agent) handle(ctx context.Context, d *delivery, f *verified.Claims) error {
	conv, ev := d.Data.Conversation.ID, d.Data.Event
	switch {
	case ev.Type == "state" && ev.Status == "queued":
		a.joinLater(conv)
		return nil
	case ev.Type != "message" || ev.Message == nil:
		return nil
	case len(ev.Message.Extensions.Operations.Approval) > 0:
		// Its text approves nothing, whatever it says; the outcome
		// follows as a conversation.operation delivery.
		return nil
	}
	words := wordsOf(ev.Message.Text)
	reply := func(text string, data any) error {
		return a.say(ctx, conv, "stormline-"+ev.ID, text, "data", data)
	}
	switch {
	case words.has("specialist"):
		return a.post(ctx, conv, "/user-requested", map[string]any{"reason": UserRequestedReason})
	case words.has("person", "human", "agent"):
		return nil
	case words.has("return"):
		return reply(ReturnPolicy, nil)
	case words.has("exchange", "jacket"):
		switch {
		case f.Account == "" || !slices.Contains(f.Scopes, OrdersScope) || !slices.Contains(f.Scopes, WriteScope):
			return a.post(ctx, conv, "/authorization", map[string]any{"scope": OrdersScope + " " + WriteScope})
		case f.Extensions["operations"] != "3":
			return reply(ExchangeOffer, ExchangeData)
		}
		return a.say(ctx, conv, "stormline-"+ev.ID, ExchangeProposed, "extensions",
			map[string]any{"operations": map[string]any{"proposal": a.jacketProposal(orderIn(ev.Message.Text))}})
	case words.has("order"):
		if f.Account == "" || !slices.Contains(f.Scopes, OrdersScope) {
			return a.post(ctx, conv, "/authorization", map[string]any{"scope": OrdersScope})
		}
		return reply(OrderStatus, nil)
	default:
		return reply(HelpText, nil)
	}
}

// orderID finds an order's ID in a message.
var orderID = regexp.MustCompile(`\bord_[A-Za-z0-9]{1,32}\b`)

// orderIn is the order a message names, the first one, or the spec's
// jacket order when it names none.
func orderIn(text string) string {
	if id := orderID.FindString(text); id != "" {
		return id
	}
	return demoshop.JacketOrderID
}

// jacketProposal is the spec's jacket exchange on the order as the shop
// proposes it, with the orders API request that performs it. The agent
// does not look the order up: the shop answers the performed request with
// 404 when the account has no such order, and the agent says so.
func (a *Agent) jacketProposal(order string) map[string]any {
	p, _ := demoshop.ExchangeProposal(order, demoshop.JacketItemID, demoshop.JacketSKU, demoshop.InsulatedJacketSKU)
	return map[string]any{"action_key": p.ActionKey, "terms": p.Terms, "summary": p.Summary, "expires_in": p.ExpiresIn,
		"perform": map[string]any{"api": a.o.OrdersAPI, "method": http.MethodPost,
			"path": "/orders/" + order + "/exchanges",
			"body": map[string]any{"item_id": demoshop.JacketItemID, "replacement_sku": demoshop.InsulatedJacketSKU}}}
}

// told says in conv how an approved operation went. The message ID is
// the outcome's, so a retried delivery posts nothing twice.
func (a *Agent) told(ctx context.Context, conv string, oc *outcome) error {
	id := "stormline-op-" + oc.OperationID + "-" + oc.Revision + "-" + oc.Status
	switch oc.Status {
	case "performed":
		if oc.Response != nil && oc.Response.Status/100 == 2 {
			return a.say(ctx, conv, id, ExchangeDone, "", nil)
		}
		text := ExchangeFailed + "."
		if oc.Response != nil {
			var e struct {
				Description string `json:"error_description"`
			}
			if json.Unmarshal(oc.Response.Body, &e) == nil && e.Description != "" {
				text = ExchangeFailed + ": " + e.Description + "."
			}
		}
		return a.say(ctx, conv, id, text, "", nil)
	case "declined":
		declined := map[string]any{"operation_id": oc.OperationID, "revision": oc.Revision}
		text := ExchangeDeclined
		if oc.Decline != nil {
			if oc.Decline.Reason != "" {
				declined["reason"] = oc.Decline.Reason
				text += " " + oc.Decline.Reason
			}
			if len(oc.Decline.Alternative) > 0 {
				declined["alternative"] = oc.Decline.Alternative
			}
		}
		return a.say(ctx, conv, id, text, "extensions", map[string]any{"operations": map[string]any{"declined": declined}})
	case "performing":
		return a.say(ctx, conv, id, ExchangeGoing, "", nil)
	case "new_terms":
		return a.say(ctx, conv, id, ExchangeNewTerms, "", nil)
	case "needs_account":
		return a.say(ctx, conv, id, ExchangeSignIn, "", nil)
	default:
		return a.say(ctx, conv, id, ExchangeNotDone, "", nil)
	}
}

// say posts a message of the assistant with ID id, and member (data or
// extensions) set to value when it is not nil.
func (a *Agent) say(ctx context.Context, conv, id, text, member string, value any) error {
	msg := map[string]any{
		"id":     id,
		"author": map[string]any{"type": "agent", "name": "Stormline assistant"},
		"text":   text,
	}
	if value != nil {
		msg[member] = value
	}
	return a.post(ctx, conv, "/messages", map[string]any{"message": msg})
}

// joinLater makes Alex join conv after JoinDelay, unless the agent closes.
func (a *Agent) joinLater(conv string) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTimer(a.o.JoinDelay)
		defer t.Stop()
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
		defer cancel()
		if err := a.post(ctx, conv, "/join", map[string]any{"author": Alex, "text": HelloText}); err != nil {
			a.o.Logger.Warn("demo agent: joining a handoff", slog.String("conversation_id", conv), slog.Any("err", err))
		}
	}()
}

// post calls the Company API at /company/v1/conversations/{conv}{path}.
func (a *Agent) post(ctx context.Context, conv, path string, body any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	u := a.o.BaseURL + "/company/v1/conversations/" + url.PathEscape(conv) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.o.APIKey)
	resp, err := a.o.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, msg)
	}
	return nil
}

// Verify checks a delivery's Standard Webhooks signature as
// docs/company-agent.md section 3 shows, with the platform's own verifier.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := conversations.DecodeWebhookSecret(secret)
	if err != nil {
		return err
	}
	return conversations.VerifyWebhook(key, h, body, now, conversations.WebhookTolerance)
}

// words is the set of a message's lowercase words.
type words map[string]bool

func wordsOf(text string) words {
	w := words{}
	for _, s := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) }) {
		w[s] = true
	}
	return w
}

// has reports whether any keyword, or its plural in s, is a word.
func (w words) has(keywords ...string) bool {
	for _, k := range keywords {
		if w[k] || w[k+"s"] {
			return true
		}
	}
	return false
}
