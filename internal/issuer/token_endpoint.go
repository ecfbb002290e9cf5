package issuer

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// maxTokenForm bounds token, device and revocation request bodies.
const maxTokenForm = 64 << 10

var errInvalidTarget = &fosite.RFC6749Error{ErrorField: "invalid_target", CodeField: http.StatusBadRequest,
	DescriptionField: "The resource is not a service of this Company (RFC 8707)."}

// DefaultAudience is the aud of a token for no particular service: every
// domain of the Company, where it is valid at every service but those with
// their own resource (spec 4.5).
func DefaultAudience(c *tenant.Company) []string {
	var aud []string
	for _, d := range c.Settings.AllDomains() {
		aud = append(aud, "https://"+d)
	}
	return aud
}

// audience maps a resource indicator (RFC 8707) to an access token's aud.
func audience(c *tenant.Company, urls tenant.URLs, resource string) ([]string, error) {
	switch {
	case resource == "":
		return DefaultAudience(c), nil
	case resource == urls.MCPResource(c):
		return []string{resource}, nil
	case slices.Contains(DefaultAudience(c), resource):
		return DefaultAudience(c), nil
	}
	return nil, errInvalidTarget
}

// offersGrant reports whether c lets clientID start sign-in with grant.
func offersGrant(c *tenant.Company, clientID, grant string) bool {
	return slices.Contains(c.Settings.Auth.OfferedGrantTypes(), grant) &&
		c.Settings.Agents.SignInAllowed(clientID, grant)
}

// slowForm answers a form whose body came too slowly (httpx.PaceBodies)
// with 408 request_timeout and reports whether it did: the request never
// arrived whole, so it gets no OAuth error.
func slowForm(w http.ResponseWriter, r *http.Request, err error) bool {
	if !httpx.BodyTimedOut(r) {
		return false
	}
	httpx.WriteError(w, r, err)
	return true
}

// token is the token endpoint (spec 4.4, 4.7; RFC 6749 §3.2).
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenForm)
	if err := r.ParseForm(); err != nil {
		if slowForm(w, r, err) {
			return
		}
		s.tokenError(w, r, nil, fosite.ErrInvalidRequest.WithHint("The body must be a form of at most 64 KiB."))
		return
	}
	for k, v := range r.PostForm {
		if len(v) > 1 {
			s.tokenError(w, r, nil, fosite.ErrInvalidRequest.WithHintf("%s must not be repeated (RFC 6749 §3.2).", k))
			return
		}
	}
	proof, err := s.checkProof(w, r, c)
	if err != nil {
		s.tokenError(w, r, nil, err)
		return
	}
	// A refresh's client assertion has its jti recorded in the round
	// trip that reads the refresh token (clientauth.Defer, Store.get);
	// one that reached no read is recorded here, before anything else
	// happens. Either way a replayed one ends the request.
	var jti *clientauth.Deferred
	if r.PostForm.Get("grant_type") == tenant.GrantRefreshToken {
		ctx, jti = clientauth.Defer(ctx)
	}
	ar, err := s.provider.NewAccessRequest(ctx, r, &Session{})
	if jtiErr := jti.Record(ctx); jtiErr != nil {
		err = clientAuthError(jtiErr)
	}
	if err != nil {
		s.tokenError(w, r, ar, err)
		return
	}
	grant := ar.GetGrantTypes()[0]
	if grant != tenant.GrantRefreshToken && !offersGrant(c, ar.GetClient().GetID(), grant) {
		// A sign-in refused after it started ends here; refresh tokens
		// issued earlier keep working (spec 3.2).
		s.tokenError(w, r, ar, fosite.ErrUnauthorizedClient.WithHint("This Company does not offer this Personal Agent this sign-in type."))
		return
	}
	sess, ok := ar.GetSession().(*Session)
	if !ok {
		s.tokenError(w, r, ar, fosite.ErrServerError.WithHint("unexpected session"))
		return
	}
	resource := r.PostForm.Get("resource")
	switch mcp := s.urls.MCPResource(c); {
	case resource == "":
		resource = sess.Resource
	case sess.Resource == mcp && resource != mcp:
		// A sign-in for one service never yields tokens for others
		// (RFC 8707 §2.2); one for the Company's domain covers them all.
		s.tokenError(w, r, ar, errInvalidTarget.WithHintf("This grant is for %s only.", mcp))
		return
	}
	if ar.GetClient().IsPublic() && resource != s.urls.MCPResource(c) {
		// Tokens of clients that are not Personal Agents are for the MCP
		// server only (spec 7); their grants never hold another resource.
		s.tokenError(w, r, ar, errInvalidTarget.WithHintf("This client's tokens are for %s only.", s.urls.MCPResource(c)))
		return
	}
	if sess.Audience, err = audience(c, s.urls, resource); err != nil {
		s.tokenError(w, r, ar, err)
		return
	}
	if err := s.bindDPoP(r, c, sess, proof); err != nil {
		s.tokenError(w, r, ar, err)
		return
	}
	if grant == tenant.GrantRefreshToken {
		if err := narrowScopes(ar, sess, r.PostForm.Get("scope")); err != nil {
			s.tokenError(w, r, ar, err)
			return
		}
	}
	// The access token lasts exactly the Company's lifetime from now, by
	// our clock: fosite rounds the expiry to the second and truncates
	// expires_in, which then could be a second short (spec 4.7).
	lifetime := AccessTokenLifetime(c)
	sess.SetExpiresAt(fosite.AccessToken, s.now().Add(lifetime))
	resp, err := s.provider.NewAccessResponse(ctx, ar)
	if err != nil {
		s.tokenError(w, r, ar, err)
		return
	}
	if id := ar.GetClient().GetID(); isRegistered(id) {
		// Tokens were issued: the registration lasts as long as they
		// could. Failing that, the tokens stand; the next refresh tries
		// again.
		if err := s.keepUsed(ctx, id); err != nil {
			httpx.Logger(ctx).WarnContext(ctx, "issuer: keeping a client registration", slog.Any("err", err))
		}
	}
	// scope is left out only when granted equals requested (spec 4.7); a
	// refresh that narrowed the scopes says so, as this access token has
	// fewer than the refresh token (spec 4.4).
	full := ar.GetRequestedScopes()
	if grant == tenant.GrantRefreshToken {
		full = sess.RefreshScopes
	}
	if sameScopes(ar.GetGrantedScopes(), full) {
		if ext, ok := resp.(*fosite.AccessResponse); ok {
			delete(ext.Extra, "scope")
		}
	}
	if sess.Bind {
		resp.SetTokenType("DPoP")
	} else {
		resp.SetTokenType("Bearer")
	}
	resp.SetExpiresIn(lifetime)
	s.provider.WriteAccessResponse(ctx, w, ar, resp)
	s.metrics.granted(grant)
}

// narrowScopes applies a refresh request's scope (spec 4.4): a subset of
// the grant's scopes for this access token, while the refresh token keeps
// them all.
func narrowScopes(ar fosite.AccessRequester, sess *Session, scope string) error {
	if len(sess.RefreshScopes) == 0 {
		sess.RefreshScopes = slices.Clone([]string(ar.GetGrantedScopes()))
	}
	if scope == "" {
		ar.SetRequestedScopes(ar.GetGrantedScopes())
		return nil
	}
	asked := strings.Fields(scope)
	for _, sc := range asked {
		if !slices.Contains(sess.RefreshScopes, sc) {
			return fosite.ErrInvalidScope.WithHintf("The refresh token does not cover scope %q; ask the User to sign in again.", sc)
		}
	}
	req, ok := ar.(*fosite.AccessRequest)
	if !ok {
		return fosite.ErrServerError.WithHint("unexpected request type")
	}
	req.GrantedScope = fosite.Arguments(slices.Compact(slices.Sorted(slices.Values(asked))))
	req.SetRequestedScopes(asked)
	return nil
}

func sameScopes(a, b []string) bool {
	x := slices.Compact(slices.Sorted(slices.Values(a)))
	y := slices.Compact(slices.Sorted(slices.Values(b)))
	return slices.Equal(x, y)
}

// tokenError writes an OAuth error response. A code or refresh token that
// a concurrent request used first is invalid_grant, not a server error:
// fosite wraps our errCodeUsed and errRefreshUsed, and its own
// ErrInvalidatedAuthorizeCode, met when the other exchange commits between
// its two reads of the code, in server_error.
func (s *Server) tokenError(w http.ResponseWriter, r *http.Request, ar fosite.AccessRequester, err error) {
	var ce *clientauth.Error
	switch {
	case errors.As(err, &ce):
		// Also a replayed jti, found as the refresh token was read.
		err = clientAuthError(ce)
	case errors.Is(err, errCodeUsed), errors.Is(err, fosite.ErrInvalidatedAuthorizeCode):
		err = fosite.ErrInvalidGrant.WithHint("The authorization code was already used.")
	case errors.Is(err, errRefreshUsed):
		err = fosite.ErrInvalidGrant.WithHint("The refresh token was already used.")
	}
	s.metrics.refused(r, err)
	logFailure(r, err)
	if ar == nil {
		ar = fosite.NewAccessRequest(&Session{})
	}
	s.provider.WriteAccessError(r.Context(), w, ar, err)
}
