package issuer

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// introspect is RFC 7662 token introspection for the Company's own
// backends, authenticated with one of its API keys. Inactive, unknown,
// revoked and expired tokens all answer {"active": false}.
func (s *Server) introspect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	owner, err := s.apiKey(ctx, strings.TrimSpace(key))
	if !strings.EqualFold(scheme, "Bearer") || err != nil || owner == nil || owner.ID != c.ID {
		w.Header().Set("WWW-Authenticate", `Bearer realm="poppyhost-company"`)
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeUnauthorized, "a Company API key of this Company is required (Authorization: Bearer ...)"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenForm)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("token") == "" {
		writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHint("A form with token is required (RFC 7662 §2.1)."))
		return
	}
	token := r.PostForm.Get("token")
	w.Header().Set("Cache-Control", "no-store")
	now := s.now()
	if claims, err := ParseAccessToken(ctx, s.keys, c, token, now); err == nil {
		active, err := s.store.AccessTokenActive(ctx, c.ID, Signature(token), now)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		if active {
			httpx.WriteJSON(w, http.StatusOK, map[string]any{
				"active": true, "token_type": "Bearer", "client_id": claims.ClientID, "scope": claims.Scope,
				"sub": claims.Subject, "aud": claims.Audience, "iss": claims.Issuer,
				"exp": claims.Expires, "iat": claims.IssuedAt, "jti": claims.JTI,
			})
			return
		}
	}
	if strings.Count(token, ".") == 1 {
		req, err := s.store.GetRefreshTokenSession(ctx, s.codes.RefreshTokenSignature(ctx, token), nil)
		if err == nil && s.codes.ValidateRefreshToken(ctx, req, token) == nil {
			sess, _ := req.GetSession().(*Session)
			body := map[string]any{
				"active": true, "token_type": "refresh_token", "client_id": req.GetClient().GetID(),
				"scope": strings.Join(req.GetGrantedScopes(), " "), "iss": s.urls.Issuer(c),
				"iat": req.GetRequestedAt().Unix(),
			}
			if sess != nil {
				body["sub"] = strconv.FormatInt(sess.AccountID, 10)
				body["exp"] = sess.GetExpiresAt(fosite.RefreshToken).Unix()
			}
			httpx.WriteJSON(w, http.StatusOK, body)
			return
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"active": false})
}
