package operations

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Handler serves a Company's operations to the Company API and the admin
// API: audits, and the resolution of outcomes left unknown.
type Handler struct {
	store *Store
	now   func() time.Time
}

// NewHandler returns a Handler on store; now is the clock [time.Now].
func NewHandler(store *Store, now func() time.Time) *Handler {
	if now == nil {
		now = time.Now
	}
	return &Handler{store: store, now: now}
}

// CompanyAPI mounts the operations routes under /company/v1
// (httpx.CompanyAPIRoutes): GET /operations, newest first, paged by
// ?after={operation_id} and narrowed by ParseFilter's parameters; GET /operations/{id}, one with every revision's
// terms; and POST /operations/{id}/resolve, the Company's word on an
// unknown outcome.
func (h *Handler) CompanyAPI(r chi.Router) { h.routes(r) }

// Admin mounts the same routes as CompanyAPI under
// /admin/v1/companies/{slug} (httpx.AdminRoutes).
func (h *Handler) Admin(r chi.Router) { h.routes(r) }

func (h *Handler) routes(r chi.Router) {
	r.Get("/operations", h.serveList)
	r.Get("/operations/{id}", h.serveGet)
	r.Post("/operations/{id}/resolve", h.serveResolve)
}

func (h *Handler) serveList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	limit, err := httpx.QueryInt(r, "limit", 50, 1, 200)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	after := r.URL.Query().Get("after")
	if after != "" && !sessions.ValidID(after) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "after must be an operation_id"))
		return
	}
	f, err := ParseFilter(r.URL.Query())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	list, err := h.store.Search(ctx, tenant.FromContext(ctx).ID, f, after, int(limit))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	page := struct {
		Operations []*Record `json:"operations"`
		Next       *string   `json:"next"`
	}{Operations: list}
	if page.Operations == nil {
		page.Operations = []*Record{}
	}
	if len(list) == int(limit) {
		page.Next = &list[len(list)-1].OperationID
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, page)
}

// record returns the operation the path names, or writes 404.
func (h *Handler) record(w http.ResponseWriter, r *http.Request) (*Record, bool) {
	ctx, id := r.Context(), chi.URLParam(r, "id")
	if !sessions.ValidID(id) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeNotFound, "the Company has no operation %q", id))
		return nil, false
	}
	rec, err := h.store.Get(ctx, tenant.FromContext(ctx).ID, id)
	if errors.Is(err, ErrNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeNotFound, "the Company has no operation %q", id))
		return nil, false
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return nil, false
	}
	return rec, true
}

func (h *Handler) serveGet(w http.ResponseWriter, r *http.Request) {
	if rec, ok := h.record(w, r); ok {
		w.Header().Set("Cache-Control", "no-store")
		httpx.WriteJSON(w, http.StatusOK, rec)
	}
}

// maxResolveBody bounds a resolution: a few short fields and the answer
// retries get.
const maxResolveBody = 256 << 10

// serveResolve records the Company's resolution of an operation whose
// outcome is unknown (docs/operations-extension.md, "Unknown outcomes"):
// {"performed": true|false, "by": "...", "note": "...", "response":
// {"status": 200, "content_type": "...", "body": ...}}, checked and
// recorded by Store.ResolveUnknown.
func (h *Handler) serveResolve(w http.ResponseWriter, r *http.Request) {
	var body ResolveRequest
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxResolveBody, Strict: true}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	rec, err := h.store.ResolveUnknown(ctx, tenant.FromContext(ctx).ID, chi.URLParam(r, "id"), &body, h.now())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, rec)
}
