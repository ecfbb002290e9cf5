package operations

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Mount mounts GET /operations on r, which has the Company in its context
// (the admin API's /companies/{slug} and /company/v1): the Company's
// operations for audits, newest first, paged by ?after={operation_id}.
func (s *Store) Mount(r chi.Router) {
	r.Get("/operations", s.serveList)
}

func (s *Store) serveList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	limit, err := httpx.QueryInt(r, "limit", 50, 1, 200)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	after := r.URL.Query().Get("after")
	list, err := s.List(ctx, tenant.FromContext(ctx).ID, after, int(limit))
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
