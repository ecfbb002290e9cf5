package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// AgentOptions configure an AgentHandler.
type AgentOptions struct {
	// Tokens validates a request's access token, if any (spec 8.2, 8.11).
	Tokens *bearer.Validator
	// Middleware runs before every route, in order: the platform's check
	// that the Company offers conversations and its Session check
	// (sessions.Manager.Require), which the handlers rely on.
	Middleware []func(http.Handler) http.Handler
}

// AgentHandler serves the Personal Agent side of the conversation
// endpoint (spec 8.2).
type AgentHandler struct {
	reader
	tokens     *bearer.Validator
	middleware []func(http.Handler) http.Handler
}

// NewAgentHandler returns an AgentHandler.
func NewAgentHandler(store *Store, hub *Hub, opts AgentOptions) *AgentHandler {
	return &AgentHandler{reader: newReader(store, hub), tokens: opts.Tokens, middleware: opts.Middleware}
}

// Public mounts the routes of spec 8.2 at /poppy/conversations under
// /t/{slug}, behind the constructor's middleware.
func (h *AgentHandler) Public(r chi.Router) {
	r.Route("/poppy/conversations", func(r chi.Router) {
		r.Use(ParkStreams)
		// A message records its Session JWT's jti in its own
		// transaction: one commit per message, not two.
		r.With(sessions.DeferReplay).With(h.middleware...).Post("/{id}/messages", h.handle(settled(h.send)))
		r.Group(func(r chi.Router) {
			r.Use(h.middleware...)
			r.Post("/", h.handle(h.start))
			r.Get("/{id}/events", h.handle(h.events))
			r.Post("/{id}/handoff", h.handle(h.act(http.StatusAccepted, h.store.Handoff)))
			r.Post("/{id}/close", h.handle(h.act(http.StatusOK, h.store.Close)))
		})
	})
}

// settled is a route that records its Session JWT's jti itself
// (sessions.DeferReplay): when it fails before its transaction recorded
// the jti, the jti is recorded then, and a replay is refused as such
// whatever else was wrong with it, as the Session check would have.
func settled(route agentRoute) agentRoute {
	return func(w http.ResponseWriter, r *http.Request) error {
		err := route(w, r)
		if serr := sessions.Settle(r.Context()); serr != nil && err != nil {
			return serr
		}
		return err
	}
}

// agentRoute is a route of the Personal Agent side: it answers, or
// returns the error to answer with, having written nothing.
type agentRoute func(w http.ResponseWriter, r *http.Request) error

// handle answers a route's error the Personal Agent side's way (refusal).
func (h *AgentHandler) handle(route agentRoute) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := route(w, r); err != nil {
			bearer.WriteError(w, r, h.refusal(r, err))
		}
	}
}

// refusal is err after the Personal Agent side's two rules: a
// conversation that used an account asks for a token with a challenge
// (spec 8.11), and every bad body is invalid_request (8.13).
func (h *AgentHandler) refusal(r *http.Request, err error) error {
	var he *httpx.Error
	switch {
	case errors.Is(err, errSignInNeeded):
		c := tenant.FromContext(r.Context())
		return &bearer.Challenge{Description: err.Error(), ResourceMetadata: h.tokens.MetadataURL(c, bearer.Resource{})}
	case errors.As(err, &he) && (he.Code == httpx.CodeRequestTooLarge || he.Code == httpx.CodeUnsupportedMediaType):
		return &httpx.Error{Code: httpx.CodeInvalidRequest, Description: he.Description}
	}
	return err
}

// owner authorizes the request's access token, if any, and returns who it
// speaks for.
func (h *AgentHandler) owner(r *http.Request) (Owner, error) {
	sess := sessions.FromContext(r.Context())
	g, err := h.tokens.Authorize(r.Context(), r, bearer.Resource{})
	if err != nil {
		return Owner{}, err
	}
	o := Owner{ClientID: sess.ClientID, UserID: sess.UserID, Verified: origin.Facts(sess, g)}
	declareOperations(o.Verified, operations.Declared(sess, r.Header.Values(operations.ExtensionsHeader)))
	if g != nil {
		o.AccountID = g.AccountID
	}
	return o, nil
}

func policy(c *tenant.Company) Policy {
	return Policy{HasAgent: c.Settings.Conversations.AgentWebhook != ""}
}

// extensionsOf says which extensions the Company lists, for dropping
// extension content it does not (spec 8.4).
func extensionsOf(c *tenant.Company) func(string) bool {
	return func(name string) bool { _, ok := c.Settings.Extensions[name]; return ok }
}

// writeRead answers with a read, adding the challenge of an authorization
// event to the response's headers (spec 8.11).
func (h *AgentHandler) writeRead(w http.ResponseWriter, r *http.Request, status int, rd *Read) {
	for _, e := range rd.Events {
		if e.Type != EventAuthorization {
			continue
		}
		if scope, _ := e.Body["scope"].(string); scope != "" {
			ch := bearer.Challenge{Code: httpx.CodeInsufficientScope, Scopes: strings.Fields(scope),
				ResourceMetadata: h.tokens.MetadataURL(tenant.FromContext(r.Context()), bearer.Resource{})}
			ch.SetHeader(w, r)
		}
	}
	writeReadJSON(w, status, rd)
}

// reply answers a POST: the state, or with wait a read (spec 8.3).
func (h *AgentHandler) reply(w http.ResponseWriter, r *http.Request, status int, c *Conversation, p readParams) error {
	if p.waited {
		// The cursor was checked before the message was accepted; only
		// pruning since then can fail it.
		if err := checkCursor(c, p); err != nil {
			return err
		}
		// A retried message's c has its original reply's state: read the
		// conversation again.
		rd, err := h.read(r.Context(), c, false, p)
		if err != nil {
			return err
		}
		h.writeRead(w, r, status, rd)
		return nil
	}
	httpx.WriteJSON(w, status, replyOf(c))
	return nil
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
func (h *AgentHandler) postMessage(w http.ResponseWriter, r *http.Request, req any, valid func() (*Message, error), status int,
	do func(ctx context.Context, co *tenant.Company, o Owner, check precheck) (*Conversation, error)) error {
	o, err := h.owner(r)
	if err != nil {
		return err
	}
	if err := decodeBody(w, r, req, false, false); err != nil {
		return err
	}
	m, err := valid()
	if err == nil {
		err = checkMessage(r, m)
	}
	if err != nil {
		return err
	}
	p, err := h.parseRead(r)
	if err != nil {
		return err
	}
	p.sse = false
	c, err := do(r.Context(), tenant.FromContext(r.Context()), o, postCheck(p))
	if err != nil {
		return err
	}
	return h.reply(w, r, status, c, p)
}

func (h *AgentHandler) start(w http.ResponseWriter, r *http.Request) error {
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
	return h.postMessage(w, r, &req, valid, http.StatusCreated,
		func(ctx context.Context, co *tenant.Company, o Owner, check precheck) (*Conversation, error) {
			return h.store.start(ctx, co.ID, o, req, policy(co), check)
		})
}

func (h *AgentHandler) send(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Message *Message `json:"message"`
	}
	valid := func() (*Message, error) {
		if req.Message == nil {
			return nil, invalid("message is required (spec 8.3)")
		}
		return req.Message, nil
	}
	return h.postMessage(w, r, &req, valid, http.StatusAccepted,
		func(ctx context.Context, co *tenant.Company, o Owner, check precheck) (*Conversation, error) {
			return h.store.send(ctx, co.ID, o, chi.URLParam(r, "id"), req.Message, policy(co), check, sessions.ReplayFrom(ctx))
		})
}

// act answers handoff and close: their {} body, whose unknown members are
// ignored (spec 3.3), then do on the conversation in the path, then its
// state with status.
func (h *AgentHandler) act(status int, do func(ctx context.Context, companyID int64, o Owner, id string) (*Conversation, error)) agentRoute {
	return func(w http.ResponseWriter, r *http.Request) error {
		o, err := h.owner(r)
		if err != nil {
			return err
		}
		var body map[string]json.RawMessage
		if err := decodeBody(w, r, &body, false, false); err != nil {
			return err
		}
		c, err := do(r.Context(), tenant.FromContext(r.Context()).ID, o, chi.URLParam(r, "id"))
		if err != nil {
			return err
		}
		httpx.WriteJSON(w, status, Reply{Status: c.Status, Responder: c.Responder})
		return nil
	}
}

func (h *AgentHandler) events(w http.ResponseWriter, r *http.Request) error {
	o, err := h.owner(r)
	if err != nil {
		return err
	}
	c, err := h.store.Get(r.Context(), tenant.FromContext(r.Context()).ID, chi.URLParam(r, "id"))
	if err == nil {
		err = o.owns(c)
	}
	if err != nil {
		return err
	}
	return h.serveEvents(w, r, c, h.writeRead)
}
