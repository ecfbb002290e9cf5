package issuer

import (
	"errors"
	"net/http"
	"strings"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// introspect is RFC 7662 token introspection for the Company's own
// backends, authenticated with one of its API keys. Inactive, unknown,
// revoked and expired tokens all answer {"active": false}; a failure to
// tell, such as the database's, is an error, never an answer.
func (s *Server) introspect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	ok, err := s.introspectionAllowed(r, c)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="poppyhost-company"`)
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeUnauthorized, "a Company API key of this Company is required (Authorization: Bearer ...)"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenForm)
	err = r.ParseForm()
	if err != nil && slowForm(w, r, err) {
		return
	}
	if err != nil || r.PostForm.Get("token") == "" {
		writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHint("A form of at most 64 KiB with token is required (RFC 7662 §2.1)."))
		return
	}
	token := r.PostForm.Get("token")
	w.Header().Set("Cache-Control", "no-store")
	now := s.now()
	claims, err := ParseAccessToken(ctx, s.keys, c, token, now)
	var rfc *fosite.RFC6749Error
	switch {
	case err == nil:
		active, err := s.store.AccessTokenActive(ctx, c.ID, Signature(token), now)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		if active {
			out := map[string]any{
				"active": true, "token_type": "Bearer", "client_id": claims.ClientID, "scope": claims.Scope,
				"sub": claims.Subject, "aud": claims.Audience, "iss": claims.Issuer,
				"exp": claims.Expires, "iat": claims.IssuedAt, "jti": claims.JTI,
			}
			if jkt := claims.JKT(); jkt != "" {
				// RFC 9449 §6.2: a bound token's key, so that a resource
				// server checks the proof.
				out["token_type"], out["cnf"] = "DPoP", map[string]string{"jkt": jkt}
			}
			httpx.WriteJSON(w, http.StatusOK, out)
			return
		}
	case errors.Is(err, signing.ErrInvalid), errors.As(err, &rfc):
		// Not one of our access tokens, or expired: maybe a refresh token.
	default:
		httpx.WriteError(w, r, err)
		return
	}
	if strings.Count(token, ".") == 1 {
		req, err := s.store.GetRefreshTokenSession(ctx, s.codes.RefreshTokenSignature(ctx, token), nil)
		switch {
		case err == nil:
			sess, _ := req.GetSession().(*Session)
			// The expiry is checked on our clock; fosite's check in
			// ValidateRefreshToken reads the wall clock.
			if sess != nil && now.Before(sess.GetExpiresAt(fosite.RefreshToken)) &&
				s.codes.ValidateRefreshToken(ctx, req, token) == nil {
				httpx.WriteJSON(w, http.StatusOK, map[string]any{
					"active": true, "token_type": "refresh_token", "client_id": req.GetClient().GetID(),
					"scope": strings.Join(req.GetGrantedScopes(), " "), "iss": s.urls.Issuer(c),
					"sub": sess.GetSubject(), "exp": sess.GetExpiresAt(fosite.RefreshToken).Unix(),
					"iat": req.GetRequestedAt().Unix(),
				})
				return
			}
		case errors.Is(err, fosite.ErrNotFound), errors.Is(err, fosite.ErrInactiveToken):
		default:
			httpx.WriteError(w, r, err)
			return
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"active": false})
}

// introspectionAllowed reports whether r carries an API key of c
// (Authorization: Bearer).
func (s *Server) introspectionAllowed(r *http.Request, c *tenant.Company) (bool, error) {
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	key = strings.TrimSpace(key)
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		return false, nil
	}
	owner, err := s.apiKey(r.Context(), key)
	if errors.Is(err, tenant.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return owner != nil && owner.ID == c.ID, nil
}
