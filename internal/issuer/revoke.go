package issuer

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ory/fosite"
)

// revoke is the revocation endpoint (RFC 7009, spec 4.6). Revoking a
// refresh token revokes its grant: every refresh token rotated from it and
// every access token issued under it.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenForm)
	if err := r.ParseForm(); err != nil {
		if slowForm(w, r, err) {
			return
		}
		writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHint("The body must be a form of at most 64 KiB."))
		return
	}
	for k, v := range r.PostForm {
		if len(v) > 1 {
			writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHintf("%s must not be repeated (RFC 6749 §3.2).", k))
			return
		}
	}
	if r.PostForm.Get("token") == "" {
		writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHint("token is required (RFC 7009 §2.1)."))
		return
	}
	err := s.provider.NewRevocationRequest(r.Context(), r)
	switch {
	case err == nil:
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		s.metrics.revocations.Inc()
	case errors.Is(err, fosite.ErrUnauthorizedClient):
		writeOAuthError(w, r, fosite.ErrUnauthorizedClient.WithHint("The token was not issued to this client (RFC 7009 §2.1)."))
	default:
		writeOAuthError(w, r, err)
	}
}

// writeOAuthError writes err as an OAuth error body (RFC 6749 §5.2).
func writeOAuthError(w http.ResponseWriter, r *http.Request, err error) {
	logFailure(r, err)
	rfc := fosite.ErrorToRFC6749Error(err)
	body := map[string]string{"error": rfc.ErrorField}
	if d := rfc.GetDescription(); d != "" {
		body["error_description"] = d
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	status := rfc.CodeField
	if status == 0 {
		status = http.StatusBadRequest
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
