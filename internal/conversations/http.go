package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Handler serves the Personal Agent side of the conversation endpoint.
type Handler struct {
	store  *Store
	hub    *Hub
	tokens *bearer.Validator
	// WaitCap bounds wait and a stream's life [30s, 5m].
	waitCap   time.Duration
	streamCap time.Duration
	keepAlive time.Duration
}

// NewHandler returns a Handler.
func NewHandler(store *Store, hub *Hub, tokens *bearer.Validator) *Handler {
	return &Handler{store: store, hub: hub, tokens: tokens, waitCap: defaultWaitCap,
		streamCap: 5 * time.Minute, keepAlive: 15 * time.Second}
}

// Mount mounts the routes of spec 8.2 on r, which already verifies the
// Session header (sessions.Manager.Require) and knows the Company.
func (h *Handler) Mount(r chi.Router) {
	r.Post("/", h.start)
	r.Post("/{id}/messages", h.send)
	r.Get("/{id}/events", h.events)
	r.Post("/{id}/handoff", h.act(http.StatusAccepted, h.store.Handoff))
	r.Post("/{id}/close", h.act(http.StatusOK, h.store.Close))
}

// owner authorizes the request's access token, if any, and returns who it
// speaks for; on failure it has answered.
func (h *Handler) owner(w http.ResponseWriter, r *http.Request) (Owner, bool) {
	sess := sessions.FromContext(r.Context())
	g, err := h.tokens.Authorize(r.Context(), r, bearer.Resource{})
	if err != nil {
		bearer.WriteError(w, r, err)
		return Owner{}, false
	}
	o := Owner{ClientID: sess.ClientID, UserID: sess.UserID, Verified: origin.Facts(sess, g)}
	declareOperations(o.Verified, operations.Declared(sess, r.Header.Values(operations.ExtensionsHeader)))
	if g != nil {
		o.AccountID = g.AccountID
	}
	return o, true
}

func policy(c *tenant.Company) Policy {
	return Policy{HasAgent: c.Settings.Conversations.AgentWebhook != ""}
}

// extensionsOf says which extensions the Company lists, for dropping
// extension content it does not (spec 8.4).
func extensionsOf(c *tenant.Company) func(string) bool {
	return func(name string) bool { _, ok := c.Settings.Extensions[name]; return ok }
}

// fail answers err with httpx.WriteError after the Personal Agent side's
// two rules: a conversation that used an account asks for a token with a
// challenge (spec 8.11), and every bad body is invalid_request (8.13).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpx.Error
	switch {
	case errors.Is(err, errSignInNeeded):
		c := tenant.FromContext(r.Context())
		(&bearer.Challenge{Description: err.Error(), ResourceMetadata: h.tokens.MetadataURL(c, bearer.Resource{})}).Write(w, r)
	case errors.As(err, &he) && (he.Code == httpx.CodeRequestTooLarge || he.Code == httpx.CodeUnsupportedMediaType):
		// Every bad body is invalid_request here (spec 8.13).
		httpx.WriteError(w, r, &httpx.Error{Code: httpx.CodeInvalidRequest, Description: he.Description})
	default:
		httpx.WriteError(w, r, err)
	}
}

// readParams are cursor and wait (spec 8.5), with Last-Event-ID winning
// over cursor (8.6).
type readParams struct {
	after int64
	// cursor is the request's cursor as given, returned when no event is.
	cursor string
	wait   time.Duration
	// waited: the request has wait, which makes a POST answer with a
	// read (spec 8.3).
	waited bool
	sse    bool
}

// parseWait reads wait: digits only, and a larger wait than the cap is
// held for the cap, not refused (spec 8.5).
func parseWait(s string, limit time.Duration) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	s = strings.TrimLeft(s, "0")
	n, err := strconv.ParseInt(s, 10, 64)
	if s == "" {
		n, err = 0, nil
	}
	if err != nil || n > int64(limit/time.Second) {
		// Too many digits for int64 is also just long.
		return limit, true
	}
	return time.Duration(n) * time.Second, true
}

func (h *Handler) parseRead(r *http.Request) (readParams, error) {
	var p readParams
	q := r.URL.Query()
	if len(q["cursor"]) > 1 || len(q["wait"]) > 1 {
		return p, invalid("send cursor and wait at most once")
	}
	p.cursor = q.Get("cursor")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p.cursor = id
	}
	if p.cursor != "" {
		seq, ok := parseEventID(p.cursor)
		if !ok {
			return p, invalid("cursor is not an event ID of this conversation")
		}
		p.after = seq
	}
	if ws, ok := q["wait"]; ok {
		if p.wait, ok = parseWait(ws[0], h.waitCap); !ok {
			return p, invalid("wait must be a whole number of seconds, 0 or more (spec 8.5)")
		}
		p.waited = true
	}
	p.sse = acceptsStream(r)
	return p, nil
}

func acceptsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// Read is a read of a conversation's events (spec 8.5).
type Read struct {
	ConversationID string  `json:"conversation_id"`
	Events         []Event `json:"events"`
	Cursor         string  `json:"cursor"`
	HasMore        bool    `json:"has_more"`
	Status         string  `json:"status"`
	Responder      string  `json:"responder"`
}

// checkCursor validates a cursor against the conversation: one of its
// event IDs, not pruned (cursor_expired).
func checkCursor(c *Conversation, p readParams) error {
	switch {
	case p.after > c.LastSeq:
		return invalid("cursor is not an event ID of this conversation")
	case p.after > 0 && p.after < c.FirstSeq-1:
		return httpx.Errorf(httpx.CodeCursorExpired, "the events after this cursor are no longer kept; read from the beginning")
	}
	return nil
}

// read returns the events after p, waiting up to p.wait for one. The
// waiter is registered before the first read, so an event committed after
// that read wakes it.
func (h *Handler) read(ctx context.Context, c *Conversation, p readParams) (*Read, error) {
	w := h.hub.Watch(c.CompanyID, c.ID)
	defer w.Stop()
	deadline := time.NewTimer(p.wait)
	defer deadline.Stop()
	for {
		cur, events, more, err := h.store.snapshot(ctx, c.CompanyID, c.ID, p.after, maxEventsPerRead)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, notFound()
		}
		if len(events) > 0 || p.wait == 0 {
			return readOf(cur, p, events, more), nil
		}
		select {
		case <-w.C:
		case <-deadline.C:
			return readOf(cur, p, nil, false), nil
		case <-h.hub.draining:
			return readOf(cur, p, nil, false), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func readOf(c *Conversation, p readParams, events []Event, more bool) *Read {
	rd := &Read{ConversationID: c.ID, Events: events, Cursor: p.cursor, HasMore: more, Status: c.Status, Responder: c.Responder}
	if rd.Events == nil {
		rd.Events = []Event{}
	}
	if len(events) > 0 {
		rd.Cursor = eventID(events[len(events)-1].Seq)
	}
	return rd
}

// writeRead answers with a read, adding the challenge of an authorization
// event to the response's headers (spec 8.11).
func (h *Handler) writeRead(w http.ResponseWriter, r *http.Request, status int, rd *Read) {
	for _, e := range rd.Events {
		if e.Type != EventAuthorization {
			continue
		}
		if scope, _ := e.Body["scope"].(string); scope != "" {
			ch := bearer.Challenge{Code: httpx.CodeInsufficientScope, Scopes: strings.Fields(scope),
				ResourceMetadata: h.tokens.MetadataURL(tenant.FromContext(r.Context()), bearer.Resource{})}
			w.Header().Set("WWW-Authenticate", ch.Header())
		}
	}
	httpx.WriteJSON(w, status, rd)
}

// reply answers a POST: the state, or with wait a read (spec 8.3).
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, status int, c *Conversation, p readParams) {
	if p.waited {
		// The cursor was checked before the message was accepted; only
		// pruning since then can fail it.
		if err := checkCursor(c, p); err != nil {
			h.fail(w, r, err)
			return
		}
		rd, err := h.read(r.Context(), c, p)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.writeRead(w, r, status, rd)
		return
	}
	httpx.WriteJSON(w, status, replyOf(c))
}

// postCheck refuses a POST's cursor before the POST changes anything: with
// wait, the reply is a read from it (spec 8.3), so it must be one of the
// conversation's events, and a new conversation has none yet.
func postCheck(p readParams) precheck {
	if !p.waited || p.cursor == "" {
		return nil
	}
	return func(c *Conversation) error {
		if c == nil {
			return invalid("cursor is not an event ID of this conversation")
		}
		return checkCursor(c, p)
	}
}

func checkMessage(r *http.Request, m *Message) error {
	if m == nil {
		return nil
	}
	if raw, _ := json.Marshal(m); len(raw) > maxMessageBytes {
		return invalid("the message is larger than %d bytes", maxMessageBytes)
	}
	return checkAgentMessage(m, extensionsOf(tenant.FromContext(r.Context())))
}

// postMessage answers a POST that carries a message (spec 8.3): it reads
// the body into req, checks it with valid and the message m returns, reads
// cursor and wait, and has do accept the message; the answer is the state,
// or with wait a read, with status.
func (h *Handler) postMessage(w http.ResponseWriter, r *http.Request, req any, valid func() (*Message, error), status int,
	do func(ctx context.Context, co *tenant.Company, o Owner, check precheck) (*Conversation, error)) {
	o, ok := h.owner(w, r)
	if !ok {
		return
	}
	if err := decodeBody(w, r, req, false, false); err != nil {
		h.fail(w, r, err)
		return
	}
	m, err := valid()
	if err == nil {
		err = checkMessage(r, m)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := h.parseRead(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p.sse = false
	c, err := do(r.Context(), tenant.FromContext(r.Context()), o, postCheck(p))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.reply(w, r, status, c, p)
}

func (h *Handler) start(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	valid := func() (*Message, error) {
		if req.ParentID != "" && !validID(req.ParentID) {
			return nil, notFound()
		}
		if req.AcceptedEventID != "" && !validID(req.AcceptedEventID) {
			return nil, invalid("user_requested_event_id must be an event ID (spec 8.2)")
		}
		return req.Message, nil
	}
	h.postMessage(w, r, &req, valid, http.StatusCreated,
		func(ctx context.Context, co *tenant.Company, o Owner, check precheck) (*Conversation, error) {
			return h.store.start(ctx, co.ID, o, req, policy(co), check)
		})
}

func (h *Handler) send(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Message *Message `json:"message"`
	}
	valid := func() (*Message, error) {
		if req.Message == nil {
			return nil, invalid("message is required (spec 8.3)")
		}
		return req.Message, nil
	}
	h.postMessage(w, r, &req, valid, http.StatusAccepted,
		func(ctx context.Context, co *tenant.Company, o Owner, check precheck) (*Conversation, error) {
			return h.store.send(ctx, co.ID, o, chi.URLParam(r, "id"), req.Message, policy(co), check)
		})
}

// act answers handoff and close: their {} body, whose unknown members are
// ignored (spec 3.3), then do on the conversation in the path, then its
// state with status.
func (h *Handler) act(status int, do func(ctx context.Context, companyID int64, o Owner, id string) (*Conversation, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o, ok := h.owner(w, r)
		var body map[string]json.RawMessage
		if !ok {
			return
		}
		if err := decodeBody(w, r, &body, false, false); err != nil {
			h.fail(w, r, err)
			return
		}
		c, err := do(r.Context(), tenant.FromContext(r.Context()).ID, o, chi.URLParam(r, "id"))
		if err != nil {
			h.fail(w, r, err)
			return
		}
		httpx.WriteJSON(w, status, Reply{Status: c.Status, Responder: c.Responder})
	}
}

func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	o, ok := h.owner(w, r)
	if !ok {
		return
	}
	co := tenant.FromContext(r.Context())
	c, err := h.store.Get(r.Context(), co.ID, chi.URLParam(r, "id"))
	if err == nil {
		err = o.owns(c)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.serveEvents(w, r, c, h.fail, h.writeRead)
}

// serveEvents answers a read of c for either side (spec 8.5, 8.6): a
// stream when asked for, else events as JSON, waiting up to wait. fail
// writes the side's errors, write its reads.
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request, c *Conversation,
	fail func(http.ResponseWriter, *http.Request, error), write func(http.ResponseWriter, *http.Request, int, *Read)) {
	p, err := h.parseRead(r)
	if err == nil {
		err = checkCursor(c, p)
	}
	if err != nil {
		fail(w, r, err)
		return
	}
	if p.sse {
		h.stream(w, r, c, p)
		return
	}
	rd, err := h.read(r.Context(), c, p)
	if err != nil {
		fail(w, r, err)
		return
	}
	write(w, r, http.StatusOK, rd)
}
