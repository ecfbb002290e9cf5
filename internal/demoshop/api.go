package demoshop

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// The orders API under {base}/api (docs/gateway.md): JSON in and out,
// errors as {"error", "error_description"}.
func (s *Shop) mountAPI() {
	s.mux.HandleFunc("GET /openapi.json", s.serveOpenAPI)
	s.mux.HandleFunc("GET /api/orders", s.api(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		if p := needScope(c, ScopeRead); p != nil {
			writeJSON(w, "application/json", p.status, p.body())
			return
		}
		writeJSON(w, "application/json", http.StatusOK, map[string]any{"orders": s.Orders(c.Account)})
	}))
	s.mux.HandleFunc("GET /api/orders/{id}", s.api(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		if p := needScope(c, ScopeRead); p != nil {
			writeJSON(w, "application/json", p.status, p.body())
			return
		}
		if o := s.findOrder(c.Account, r.PathValue("id")); o != nil {
			writeJSON(w, "application/json", http.StatusOK, o)
			return
		}
		writeJSON(w, "application/json", http.StatusNotFound, problemBody("not_found", "no such order on this account"))
	}))
	s.mux.HandleFunc("POST /api/demo-orders", s.api(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		if p := needScope(c, ScopeWrite); p != nil {
			writeJSON(w, "application/json", p.status, p.body())
			return
		}
		o, ok := s.FreshOrder(c.Account)
		if !ok {
			writeJSON(w, "application/json", http.StatusNotFound, problemBody("not_found", "this account has no demo orders"))
			return
		}
		writeJSON(w, "application/json", http.StatusCreated, o)
	}))
	s.mux.HandleFunc("POST /api/orders/{id}/exchanges", s.api(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		var body struct {
			ItemID         string `json:"item_id"`
			ReplacementSKU string `json:"replacement_sku"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		if body.ItemID == "" || body.ReplacementSKU == "" {
			writeJSON(w, "application/json", http.StatusBadRequest, problemBody("invalid_request", "item_id and replacement_sku are required"))
			return
		}
		s.writeOutcome(w, r, s.exchange(c, r.Header.Get("Idempotency-Key"), r.PathValue("id"), body.ItemID, body.ReplacementSKU),
			http.StatusCreated)
	}))
	s.mux.HandleFunc("POST /api/orders/{id}/returns", s.api(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		var body struct {
			ItemID string `json:"item_id"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		if body.ItemID == "" {
			writeJSON(w, "application/json", http.StatusBadRequest, problemBody("invalid_request", "item_id is required"))
			return
		}
		s.writeOutcome(w, r, s.returnItem(c, r.Header.Get("Idempotency-Key"), r.PathValue("id"), body.ItemID), http.StatusCreated)
	}))
	s.mux.HandleFunc("PUT /api/orders/{id}/shipping-address", s.api(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		var addr Address
		if !readJSON(w, r, &addr) {
			return
		}
		order, p := s.setAddress(c, r.PathValue("id"), addr)
		if p != nil {
			writeJSON(w, "application/json", p.status, p.body())
			return
		}
		writeJSON(w, "application/json", http.StatusOK, order)
	}))
}

// api verifies Poppy-Verified for the API's origin before h.
func (s *Shop) api(h func(http.ResponseWriter, *http.Request, *verified.Claims)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c := s.claims(w, r, s.APIOrigin()); c != nil {
			s.mu.Lock()
			s.last = &c.Facts
			s.mu.Unlock()
			h(w, r, c)
		}
	}
}

// readJSON decodes a JSON object body into v (unknown members ignored),
// answering 400 or 413 when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	err := json.NewDecoder(r.Body).Decode(v)
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		writeJSON(w, "application/json", http.StatusRequestEntityTooLarge, problemBody("request_too_large", "the body is too large"))
		return false
	}
	if err != nil {
		writeJSON(w, "application/json", http.StatusBadRequest, problemBody("invalid_request", "the body must be a JSON object"))
		return false
	}
	return true
}

// writeOutcome answers an action as JSON: a refusal, a proposal, a
// decline, or what was performed with status done.
func (s *Shop) writeOutcome(w http.ResponseWriter, r *http.Request, out outcome, done int) {
	switch {
	case out.problem != nil:
		writeJSON(w, "application/json", out.problem.status, out.problem.body())
	case out.proposal != nil:
		writeJSON(w, "application/poppy-proposal+json", http.StatusForbidden, out.proposal)
	case out.decline != nil:
		writeJSON(w, "application/poppy-decline+json", http.StatusForbidden, out.decline)
	default:
		if out.stall {
			hold(r.Context())
		}
		writeJSON(w, "application/json", done, out.result)
	}
}
