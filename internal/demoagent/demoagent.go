// Package demoagent is the small, rule-based Company Agent of dev mode's
// demo Company, Stormline Outfitters. It is an ordinary client of the
// platform: an http.Handler serving the agent webhook
// (docs/company-agent.md sections 2 to 5) that answers through the
// Company API (section 6) with an API key, so the README demo can hold a
// conversation, hand off to a person and see user_requested (spec 8.9,
// 8.10, 8.11).
//
// Each delivery is checked with the webhook secret (Standard Webhooks,
// section 3) and dropped when its webhook-id was handled already. A
// Personal Agent message is answered by the first rule whose words it
// contains (whole words, any case, a plural "s" allowed):
//
//  1. "specialist": posts user_requested, asking to talk with the User;
//  2. "person", "human", "agent": nothing; the Personal Agent asks for a
//     person with a handoff;
//  3. "return": the return policy;
//  4. "exchange", "jacket": offers the insulated jacket in exchange, with
//     data {"replacement_sku": "stormline-insulated-m", "price_difference": 70};
//  5. "order": without orders:read in the delivery's Poppy-Verified facts
//     (signed out: account ""), posts an authorization need for
//     orders:read; with it, the status of a made-up order;
//  6. anything else: a short help text.
//
// A state event with status queued (a handoff) makes "Alex", a person,
// join after JoinDelay and say hello. Other events are acknowledged.
//
// Answers are posted before the delivery is acknowledged (a failure
// answers 502, and the platform retries), with message IDs made from the
// event ID, so a retried delivery does not post a message twice. The
// agent reads Poppy-Verified without checking its signature against the
// Company's key set (section 4): it is a demo on the platform's own
// machine, and the delivery itself is signed. A real Company Agent checks
// it.
package demoagent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/poppyhost/poppyhost/internal/conversations"
)

// The texts and data the rules answer with.
const (
	ReturnPolicy = "You can return unworn Stormline gear within 60 days for a full refund. " +
		"Start a return from your orders page or at any Stormline store; return shipping is free."
	ExchangeOffer = "We can exchange your jacket for the Stormline Insulated Jacket in medium. " +
		"It costs $70 more than yours; shall I set up the exchange?"
	OrderStatus = "Your latest order, SO-1042 (Stormline Rain Shell, size S), was delivered on Monday."
	HelpText    = "I'm Stormline's assistant. I can help with returns, exchanges (say \"jacket\") and your orders. " +
		"To talk with someone from our team, ask for a person."
	UserRequestedReason = "A Stormline specialist would like to talk with you about your gear."
	HelloText           = "Hi, I'm Alex from the Stormline team. I've read the conversation so far; how can I help?"
	// OrdersScope is the scope the order rule needs.
	OrdersScope = "orders:read"
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
	// Client reaches BaseURL over HTTPS.
	Client *http.Client
	// JoinDelay is how long Alex takes to join a handoff; default 2s.
	JoinDelay time.Duration
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock [time.Now], for the timestamp check.
	Now func() time.Time
}

// Agent is the demo Company Agent. Close it to stop pending joins.
type Agent struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	seen map[string]bool
}

const maxSeen = 10000

// New returns the agent.
func New(o Options) *Agent {
	if o.JoinDelay <= 0 {
		o.JoinDelay = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.BaseURL = strings.TrimSuffix(o.BaseURL, "/")
	a := &Agent{o: o, seen: map[string]bool{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	return a
}

// Close stops pending joins and waits for them.
func (a *Agent) Close() {
	a.cancel()
	a.wg.Wait()
}

// delivery is the part of the webhook body the agent reads.
type delivery struct {
	Data struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
		Event struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Status  string `json:"status"`
			Message *struct {
				Text string `json:"text"`
			} `json:"message"`
		} `json:"event"`
	} `json:"data"`
}

// facts are the Poppy-Verified claims the agent uses.
type facts struct {
	ConversationID string   `json:"conversation_id"`
	EventID        string   `json:"event_id"`
	Account        string   `json:"account"`
	Scopes         []string `json:"scopes"`
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
	f := readFacts(r.Header.Get("Poppy-Verified"), d.Data.Conversation.ID, d.Data.Event.ID)
	if err := a.handle(r.Context(), &d, f); err != nil {
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
func (a *Agent) handle(ctx context.Context, d *delivery, f facts) error {
	conv, ev := d.Data.Conversation.ID, d.Data.Event
	switch {
	case ev.Type == "state" && ev.Status == "queued":
		a.joinLater(conv)
		return nil
	case ev.Type != "message" || ev.Message == nil:
		return nil
	}
	words := wordsOf(ev.Message.Text)
	reply := func(text string, data any) error {
		msg := map[string]any{
			"id":     "stormline-" + ev.ID,
			"author": map[string]any{"type": "agent", "name": "Stormline assistant"},
			"text":   text,
		}
		if data != nil {
			msg["data"] = data
		}
		return a.post(ctx, conv, "/messages", map[string]any{"message": msg})
	}
	switch {
	case words.has("specialist"):
		return a.post(ctx, conv, "/user-requested", map[string]any{"reason": UserRequestedReason})
	case words.has("person", "human", "agent"):
		return nil
	case words.has("return"):
		return reply(ReturnPolicy, nil)
	case words.has("exchange", "jacket"):
		return reply(ExchangeOffer, ExchangeData)
	case words.has("order"):
		if f.Account == "" || !slices.Contains(f.Scopes, OrdersScope) {
			return a.post(ctx, conv, "/authorization", map[string]any{"scope": OrdersScope})
		}
		return reply(OrderStatus, nil)
	default:
		return reply(HelpText, nil)
	}
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

// readFacts reads Poppy-Verified's claims, unchecked (see the package
// comment), and keeps them only when they are the delivery's own.
func readFacts(token, conv, event string) facts {
	var f facts
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return facts{}
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(raw, &f) != nil || f.ConversationID != conv || f.EventID != event {
		return facts{}
	}
	return f
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
