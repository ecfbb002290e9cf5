package bearer

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TokenStore says whether an access token is still active
// (issuer.Store).
type TokenStore interface {
	AccessTokenActive(ctx context.Context, companyID int64, signature string, now time.Time) (bool, error)
}

// SessionAccounts binds a Session to the account of its first access
// token (sessions.Store).
type SessionAccounts interface {
	BindAccount(ctx context.Context, companyID int64, clientID, sid string, accountID int64) (bool, error)
}

// Grant is what a valid access token allows.
type Grant struct {
	ClientID  string
	AccountID int64
	Scopes    []string
	Audience  []string
	Expires   time.Time
	// JKT is the thumbprint of the key a DPoP-bound token is bound to, or
	// "" for a Bearer token.
	JKT string
}

// Has reports whether the grant carries every scope.
func (g *Grant) Has(scopes ...string) bool {
	for _, s := range scopes {
		if !slices.Contains(g.Scopes, s) {
			return false
		}
	}
	return true
}

// Validator validates access tokens for every Company.
type Validator struct {
	keys     issuer.Keys
	tokens   TokenStore
	sessions SessionAccounts
	proofs   *dpop.Verifier
	urls     tenant.URLs
	now      func() time.Time
	// cached and count are the verified tokens and their metric
	// (CacheTokens), or nil.
	cached *notify.Cache[tokenKey, *verifiedToken]
	count  func(notify.Result)
}

// New returns a Validator checking DPoP proofs with proofs.
func New(keys issuer.Keys, tokens TokenStore, sessions SessionAccounts, proofs *dpop.Verifier, urls tenant.URLs,
	now func() time.Time) *Validator {
	if now == nil {
		now = time.Now
	}
	return &Validator{keys: keys, tokens: tokens, sessions: sessions, proofs: proofs, urls: urls, now: now}
}

// Resource is a service that accepts access tokens. ID "" is the
// Company's default service: its domains, where the default token works
// (spec 4.5). A service with its own resource, such as the hosted MCP
// server, accepts only tokens issued for it.
type Resource struct {
	ID string
	// BearerOnly is a service that does not accept DPoP (spec 7, such as
	// an MCP server with mcp.bearer_tokens): its challenges offer Bearer
	// only.
	BearerOnly bool
}

// MetadataURL is the resource's protected resource metadata (RFC 9728
// §3.1), sent in challenges so an agent with stale metadata learns about
// it.
func (v *Validator) MetadataURL(c *tenant.Company, res Resource) string {
	if res.ID == "" {
		return "https://" + c.Settings.Organization.Domain + "/.well-known/oauth-protected-resource"
	}
	u, err := url.Parse(res.ID)
	if err != nil {
		return ""
	}
	path := u.EscapedPath()
	if path == "/" {
		// RFC 9728 §3.1: a slash right after the host is dropped.
		path = ""
	}
	return u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + path
}

// Challenge is a refused access token, written by WriteError with a
// WWW-Authenticate header. It unwraps to the *httpx.Error of its body, so
// httpx.WriteError alone still answers with the right status and code.
type Challenge struct {
	// Code is invalid_token, insufficient_scope, or "" when no token was
	// sent (RFC 6750 §3.1: no error code then).
	Code             string
	Description      string
	Scopes           []string
	ResourceMetadata string
	// BearerOnly leaves the DPoP challenge out, for a resource that does
	// not accept DPoP (Resource.BearerOnly).
	BearerOnly bool
	// Nonce, with Code use_dpop_nonce, is the server nonce the client
	// must put in its next proof, sent in the DPoP-Nonce header (RFC 9449
	// §9).
	Nonce string
	// dpopScheme says the request used the DPoP scheme: the error goes in
	// the DPoP challenge (RFC 9449 §7.1).
	dpopScheme bool
	// dpopOffered adds the DPoP challenge after the Bearer one, for a
	// Company whose resources accept both schemes (spec 7).
	dpopOffered bool
}

func (c *Challenge) Error() string { return "bearer: " + c.code() + ": " + c.Description }

// Unwrap is the challenge's JSON body.
func (c *Challenge) Unwrap() error { return &httpx.Error{Code: c.code(), Description: c.Description} }

// code is the body's error code: a request without a token gets
// unauthorized, since RFC 6750 §3.1 leaves the challenge without one.
func (c *Challenge) code() string {
	if c.Code == "" {
		return httpx.CodeUnauthorized
	}
	return c.Code
}

// Header is the WWW-Authenticate value (RFC 6750 §3, RFC 9728 §5.1): a
// Bearer challenge and, where the Company accepts DPoP, a DPoP challenge
// with algs (RFC 9449 §7.1). The error goes in the challenge of the
// scheme the request used.
func (c *Challenge) Header() string {
	h := "Bearer " + c.params(!c.dpopScheme, "")
	if c.dpopScheme || c.dpopOffered {
		h += ", DPoP " + c.params(c.dpopScheme, `algs="`+strings.Join(dpop.Algs, " ")+`"`)
	}
	return h
}

// params are one challenge's parameters, with the error when withError.
func (c *Challenge) params(withError bool, extra string) string {
	params := []string{`realm="poppyhost"`}
	if c.Code != "" && withError {
		params = append(params, `error="`+c.Code+`"`)
		if c.Description != "" {
			params = append(params, `error_description="`+quoteSafe(c.Description)+`"`)
		}
	}
	if len(c.Scopes) > 0 {
		params = append(params, `scope="`+strings.Join(c.Scopes, " ")+`"`)
	}
	if c.ResourceMetadata != "" {
		params = append(params, `resource_metadata="`+c.ResourceMetadata+`"`)
	}
	if extra != "" {
		params = append(params, extra)
	}
	return strings.Join(params, ", ")
}

// quoteSafe keeps a description within RFC 6750's allowed characters.
func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return '\''
		}
		return r
	}, s)
}

// SetHeader sets the WWW-Authenticate header of the answer to r, with a
// DPoP challenge when r used the DPoP scheme or its Company binds tokens.
func (c *Challenge) SetHeader(w http.ResponseWriter, r *http.Request) {
	if scheme, _ := credentials(r); scheme == "DPoP" && !c.BearerOnly {
		c.dpopScheme = true
	}
	if co := tenant.FromContext(r.Context()); co != nil && co.Settings.Auth.BindsTokens() && !c.BearerOnly {
		c.dpopOffered = true
	}
	w.Header().Set("WWW-Authenticate", c.Header())
	if c.Nonce != "" {
		w.Header().Set(dpop.NonceHeader, c.Nonce)
	}
}

// Write answers the request with the challenge.
func (c *Challenge) Write(w http.ResponseWriter, r *http.Request) {
	c.SetHeader(w, r)
	httpx.WriteError(w, r, c.Unwrap())
}

// Validate checks token for Company c at res: our signature, not expired,
// not revoked, issued for res. Failures are *Challenge values; failures to
// tell, such as the database's, are returned as they are, so that a
// Personal Agent is never told a good token is invalid.
func (v *Validator) Validate(ctx context.Context, c *tenant.Company, res Resource, token string) (*Grant, error) {
	invalid := func(desc string) error {
		return &Challenge{Code: httpx.CodeInvalidToken, Description: desc, ResourceMetadata: v.MetadataURL(c, res),
			BearerOnly: res.BearerOnly}
	}
	if !c.Settings.Auth.Issuer {
		return nil, invalid("this Company has no issuer, so it accepts no access tokens")
	}
	now := v.now()
	verified, err := v.verify(ctx, c, token, now, invalid)
	if err != nil {
		return nil, err
	}
	claims := verified.claims
	if !now.Before(time.Unix(claims.Expires, 0)) {
		return nil, invalid("the access token is not valid here or has expired")
	}
	if claims.Issuer != v.urls.Issuer(c) {
		return nil, invalid("the access token was issued by another issuer")
	}
	want := issuer.DefaultAudience(c)
	if res.ID != "" {
		want = []string{res.ID}
	}
	if !slices.ContainsFunc(claims.Audience, func(a string) bool { return slices.Contains(want, a) }) {
		return nil, invalid("the access token was not issued for this service (spec 4.5); request one with its resource")
	}
	account, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil {
		return nil, invalid("the access token has no account")
	}
	return &Grant{ClientID: claims.ClientID, AccountID: account, Scopes: strings.Fields(claims.Scope),
		Audience: claims.Audience, Expires: time.Unix(claims.Expires, 0), JKT: claims.JKT()}, nil
}

// verify checks token's signature and that it was neither revoked nor
// expired when read, or finds it in the cache of tokens that passed (a
// hit must be the very token; expiry is checked by the caller on every
// use). Refusals come from invalid and are never kept.
func (v *Validator) verify(ctx context.Context, c *tenant.Company, token string, now time.Time,
	invalid func(string) error) (*verifiedToken, error) {
	load := func() (*verifiedToken, error) {
		claims, err := issuer.ParseAccessToken(ctx, v.keys, c, token, now)
		var rfc *fosite.RFC6749Error
		switch {
		case errors.Is(err, signing.ErrInvalid), errors.As(err, &rfc):
			return nil, invalid("the access token is not valid here or has expired")
		case err != nil:
			return nil, err
		}
		active, err := v.tokens.AccessTokenActive(ctx, c.ID, issuer.Signature(token), now)
		if err != nil {
			return nil, err
		}
		if !active {
			return nil, invalid("the access token has been revoked")
		}
		return &verifiedToken{hash: tokenHash(token), claims: claims}, nil
	}
	if v.cached == nil {
		return load()
	}
	t, res, err := v.cached.Get(tokenKey{companyID: c.ID, sig: issuer.SignatureHash(token)}, load)
	if err != nil {
		return nil, err
	}
	v.count(res)
	if t.hash != tokenHash(token) {
		// Another token with this one's signature: not what was verified.
		return nil, invalid("the access token is not valid here or has expired")
	}
	return t, nil
}

// credentials returns the scheme and token of r's Authorization header:
// scheme is "Bearer" or "DPoP" (RFC 9449 §7.1), or "" without a token.
func credentials(r *http.Request) (scheme, token string) {
	token = sessions.AccessToken(r)
	if token == "" {
		return "", ""
	}
	scheme, _, _ = strings.Cut(r.Header.Get("Authorization"), " ")
	if strings.EqualFold(scheme, "DPoP") {
		return "DPoP", token
	}
	return "Bearer", token
}

// checkBinding enforces a token's DPoP binding (RFC 9449 §7): the DPoP
// scheme needs a bound token, a valid proof with ath, and the proof's key
// the one the token is bound to; a bound token is refused with the Bearer
// scheme.
func (v *Validator) checkBinding(ctx context.Context, r *http.Request, c *tenant.Company, res Resource, scheme, token string, g *Grant) error {
	refuse := func(code, desc string) *Challenge {
		return &Challenge{Code: code, Description: desc, ResourceMetadata: v.MetadataURL(c, res), BearerOnly: res.BearerOnly}
	}
	if scheme != "DPoP" {
		if g.JKT != "" {
			return refuse(httpx.CodeInvalidToken, "the access token is DPoP-bound: send it with the DPoP scheme and a DPoP proof (RFC 9449 §7.1)")
		}
		return nil
	}
	if g.JKT == "" {
		return refuse(httpx.CodeInvalidToken, "the access token is not DPoP-bound; send it with the Bearer scheme")
	}
	proof, err := dpop.FromRequest(r)
	if err == nil {
		var p *dpop.Proof
		p, err = v.proofs.Verify(ctx, proof, dpop.Request{CompanyID: c.ID, Method: r.Method,
			URL: &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath}, AccessToken: token,
			Nonce: c.Settings.Auth.DPoPNonce})
		if err == nil && p.JKT != g.JKT {
			return refuse(httpx.CodeInvalidToken, "the DPoP proof's key is not the key the access token is bound to")
		}
	}
	if perr := (*dpop.Error)(nil); errors.As(err, &perr) {
		if perr.Nonce != "" {
			ch := refuse(httpx.CodeUseDPoPNonce, perr.Description)
			ch.Nonce = perr.Nonce
			return ch
		}
		return refuse(httpx.CodeInvalidDPoPProof, perr.Description)
	}
	return err
}

type ctxKey struct{}

// FromContext returns the request's validated grant, or nil when it is
// signed out.
func FromContext(ctx context.Context) *Grant {
	g, _ := ctx.Value(ctxKey{}).(*Grant)
	return g
}

// Authorize validates the request's access token, when it has one, for
// its Session (spec 5.3 step 3: the token must be issued to the Session's
// client_id), then continues the Session (sessions.Continue), and checks its
// account (5.4: a Session keeps the account it first used;
// another one ends it), and requires scopes when any are given. It
// returns the grant, nil for a signed-out request that needs no scopes, or
// an error to write with WriteError.
func (v *Validator) Authorize(ctx context.Context, r *http.Request, res Resource, scopes ...string) (*Grant, error) {
	c := tenant.FromContext(ctx)
	scheme, token := credentials(r)
	if token == "" {
		if len(scopes) == 0 {
			return nil, nil
		}
		return nil, &Challenge{Description: "this needs account access: sign in and send an access token",
			Scopes: scopes, ResourceMetadata: v.MetadataURL(c, res), BearerOnly: res.BearerOnly}
	}
	g, err := v.Validate(ctx, c, res, token)
	if err != nil {
		return nil, err
	}
	if err := v.checkBinding(ctx, r, c, res, scheme, token, g); err != nil {
		return nil, err
	}
	if sess := sessions.FromContext(ctx); sess != nil {
		if g.ClientID != sess.ClientID {
			return nil, httpx.Errorf(httpx.CodeInvalidSession, "the access token was issued to another client_id than the Session's (spec 5.3)")
		}
		// Every check of spec 5.3 has passed: only now does the Session
		// start or go on, so a refused token fixes no User to its sid.
		if err := sessions.Continue(ctx); err != nil {
			return nil, err
		}
		same := sess.AccountID == g.AccountID
		if sess.AccountID == 0 {
			// A concurrent first request may have bound another account.
			if same, err = v.sessions.BindAccount(ctx, c.ID, sess.ClientID, sess.SID, g.AccountID); err != nil {
				return nil, err
			}
			if same {
				sess.AccountID = g.AccountID
			}
		}
		if !same {
			return nil, httpx.Errorf(httpx.CodeSessionEnded, "this Session acted for another account; start a new Session for this one (spec 5.4)")
		}
	}
	var missing []string
	for _, s := range scopes {
		if !slices.Contains(g.Scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return nil, &Challenge{Code: httpx.CodeInsufficientScope, Description: "the access token lacks scopes this needs",
			Scopes: scopes, ResourceMetadata: v.MetadataURL(c, res), BearerOnly: res.BearerOnly}
	}
	return g, nil
}

// WriteError writes an error from Authorize.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	if ch := (*Challenge)(nil); errors.As(err, &ch) {
		ch.Write(w, r)
		return
	}
	httpx.WriteError(w, r, err)
}

// Require is middleware for a resource endpoint: Authorize, then the
// grant (or nil) in the context. It runs after sessions.Manager.Require.
func (v *Validator) Require(res Resource, scopes ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g, err := v.Authorize(r.Context(), r, res, scopes...)
			if err != nil {
				WriteError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, g)))
		})
	}
}
