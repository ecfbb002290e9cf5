package conversations

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Company side's routes: /company/v1/conversations, which the Company
// Agent, or a person on the Company's staff, acts through with a Company
// API key (docs/company-agent.md).

// Listing limits of the Company API.
const (
	defaultListLimit = 50
	maxListLimit     = 100
)

// CompanyHandler serves the Company API's conversation routes.
type CompanyHandler struct {
	// reader reads events as the Personal Agent side does (cursor, wait,
	// server-sent events), without access tokens.
	reader
	delivery *Delivery
}

// NewCompanyHandler returns the Company API handler. delivery rotates the
// webhook secret; nil leaves that route out.
func NewCompanyHandler(store *Store, hub *Hub, delivery *Delivery) *CompanyHandler {
	return &CompanyHandler{reader: newReader(store, hub), delivery: delivery}
}

// CompanyAPI mounts the routes at /conversations under /company/v1,
// which requires a Company API key (tenant.RequireAPIKey).
func (h *CompanyHandler) CompanyAPI(r chi.Router) {
	r.Route("/conversations", func(r chi.Router) {
		r.Use(ParkStreams)
		r.Get("/", h.list)
		if h.delivery != nil {
			r.Post("/webhook-secret", h.rotateSecret)
		}
		r.Route("/{id}", func(r chi.Router) {
			// A conversation's traffic is kept in the conversation, not
			// in the audit log; rotating the webhook secret is audited.
			r.Use(audit.Exempt)
			r.Get("/", h.get)
			r.Get("/events", h.events)
			r.Post("/messages", h.message)
			r.Post("/deltas", h.delta)
			r.Post("/status", h.status)
			r.Post("/join", h.join)
			r.Post("/handoff-unavailable", h.handoffUnavailable)
			r.Post("/hand-back", h.handBack)
			r.Post("/user-requested", h.userRequested)
			r.Post("/authorization", h.authorization)
			r.Post("/close", h.close)
		})
	})
}

func companyOf(r *http.Request) *tenant.Company { return tenant.FromContext(r.Context()) }

// found is a lookup's error, or not_found when it found nothing.
func found[T any](v *T, err error) error {
	if err == nil && v == nil {
		return notFound()
	}
	return err
}

// companyAction is what a Company API change does to the conversation
// in the path, once its body is read.
type companyAction func(ctx context.Context, co *tenant.Company, id string) (*Posted, error)

// act answers a Company API change: it reads the body into req (an empty
// body is accepted when optional), runs do and answers with status. A
// retry that added nothing answers 200; an action with nothing to say,
// 204.
func (h *CompanyHandler) act(w http.ResponseWriter, r *http.Request, req any, optional bool, status int, do companyAction) {
	if err := decodeBody(w, r, req, true, optional); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	p, err := do(r.Context(), companyOf(r), chi.URLParam(r, "id"))
	switch {
	case err != nil:
		httpx.WriteError(w, r, err)
	case p == nil:
		w.WriteHeader(http.StatusNoContent)
	case p.replayed:
		httpx.WriteJSON(w, http.StatusOK, p)
	default:
		httpx.WriteJSON(w, status, p)
	}
}

func (h *CompanyHandler) list(w http.ResponseWriter, r *http.Request) {
	limit, err := httpx.QueryInt(r, "limit", defaultListLimit, 1, maxListLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	f := ListFilter{Status: r.URL.Query().Get("status"), Before: r.URL.Query().Get("before"), Limit: int(limit)}
	switch f.Status {
	case "", StatusWorking, StatusIdle, StatusQueued, StatusClosed:
	default:
		httpx.WriteError(w, r, invalid("status must be working, idle, queued or closed"))
		return
	}
	views, err := h.store.CompanyList(r.Context(), companyOf(r).ID, f)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := struct {
		Conversations []*ConversationView `json:"conversations"`
		Next          string              `json:"next,omitempty"`
	}{Conversations: views}
	if len(views) == f.Limit {
		out.Next = views[len(views)-1].ID
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

func (h *CompanyHandler) get(w http.ResponseWriter, r *http.Request) {
	v, err := h.store.CompanyGet(r.Context(), companyOf(r).ID, chi.URLParam(r, "id"))
	if err = found(v, err); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// events reads events as the Personal Agent does (spec 8.5, 8.6): cursor,
// wait, Last-Event-ID and server-sent events with text deltas.
func (h *CompanyHandler) events(w http.ResponseWriter, r *http.Request) {
	c, err := h.store.Get(r.Context(), companyOf(r).ID, chi.URLParam(r, "id"))
	if err = found(c, err); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	err = h.serveEvents(w, r, c, func(w http.ResponseWriter, _ *http.Request, status int, rd *Read) {
		writeReadJSON(w, status, rd)
	})
	if err != nil {
		httpx.WriteError(w, r, err)
	}
}

func (h *CompanyHandler) message(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Message *CompanyMessage `json:"message"`
		Status  string          `json:"status"`
	}
	h.act(w, r, &req, false, http.StatusCreated, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		if req.Message == nil {
			return nil, invalid("message is required")
		}
		return h.store.CompanyPost(ctx, co, id, req.Message, req.Status)
	})
}

func (h *CompanyHandler) delta(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MessageID string `json:"message_id"`
		Text      string `json:"text"`
	}
	h.act(w, r, &req, false, http.StatusNoContent, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return nil, h.store.CompanyDelta(ctx, co.ID, id, req.MessageID, req.Text)
	})
}

func (h *CompanyHandler) status(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Status string `json:"status"`
	}
	h.act(w, r, &req, false, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyStatus(ctx, co.ID, id, req.Status)
	})
}

func (h *CompanyHandler) join(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Author *Author `json:"author"`
		Text   *string `json:"text"`
	}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyJoin(ctx, co.ID, id, req.Author, req.Text)
	})
}

func (h *CompanyHandler) handoffUnavailable(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Text string `json:"text"`
	}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyHandoffUnavailable(ctx, co, id, req.Text)
	})
}

func (h *CompanyHandler) handBack(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyHandBack(ctx, co.ID, id)
	})
}

func (h *CompanyHandler) userRequested(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Reason string `json:"reason"`
	}
	h.act(w, r, &req, false, http.StatusCreated, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyUserRequested(ctx, co.ID, id, req.Reason)
	})
}

func (h *CompanyHandler) authorization(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Scope string `json:"scope"`
	}
	h.act(w, r, &req, false, http.StatusCreated, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyAuthorization(ctx, co, id, req.Scope)
	})
}

func (h *CompanyHandler) close(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyClose(ctx, co.ID, id)
	})
}

func (h *CompanyHandler) rotateSecret(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decodeBody(w, r, &req, true, true); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	secret, createdAt, err := h.delivery.RotateSecret(r.Context(), companyOf(r).ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusCreated, map[string]any{
		"secret": secret, "created_at": createdAt.UTC(),
		"previous_valid_until": createdAt.Add(previousSecretGrace).UTC(),
	})
}
