package browserjoin

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Facts are the web session's facts for Poppy-Verified: its Session, and
// its account and scopes while it acts for one.
func (w *WebSession) Facts() *verified.Facts {
	f := &verified.Facts{ClientID: w.ClientID, SID: w.SID, UserID: w.UserID, AgentID: w.AgentID,
		Scopes: append([]string{}, w.Scopes...), Extensions: w.Extensions}
	if w.AccountID != 0 {
		f.Account = strconv.FormatInt(w.AccountID, 10)
	}
	return f
}

// CompanyAPI mounts the Company API of a website that serves itself
// (docs/website.md) under /company/v1 (httpx.CompanyAPIRoutes): what a
// Session cookie acts for, and signing a browser out.
func (h *Handler) CompanyAPI(r chi.Router) {
	// Introspection reads, though it is a POST: not audited.
	r.With(audit.Exempt).Post("/web-sessions/introspect", h.introspect)
	r.Post("/web-sessions/end", h.end)
}

type cookieBody struct {
	Cookie string `json:"cookie"`
}

// introspection answers /web-sessions/introspect.
type introspection struct {
	Active bool `json:"active"`
	*verified.Facts
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (h *Handler) readCookie(w http.ResponseWriter, r *http.Request) (string, bool) {
	var body cookieBody
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxForm, Strict: true}); err != nil {
		httpx.WriteError(w, r, err)
		return "", false
	}
	if body.Cookie == "" {
		httpx.WriteError(w, r, httpx.Invalid(httpx.FieldError{Field: "cookie", Message: "is required: the value of the Session cookie"}))
		return "", false
	}
	return body.Cookie, true
}

func (h *Handler) introspect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	token, ok := h.readCookie(w, r)
	if !ok {
		return
	}
	ws, err := h.LookupToken(ctx, tenant.FromContext(ctx), token)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if ws == nil {
		httpx.WriteJSON(w, http.StatusOK, introspection{})
		return
	}
	httpx.WriteJSON(w, http.StatusOK, introspection{Active: true, Facts: ws.Facts(), ExpiresAt: &ws.ExpiresAt})
}

func (h *Handler) end(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	token, ok := h.readCookie(w, r)
	if !ok {
		return
	}
	if _, err := h.End(ctx, tenant.FromContext(ctx), token); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
