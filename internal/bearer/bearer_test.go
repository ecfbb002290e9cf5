package bearer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// These tests run Validate and Authorize on fake keys and token store, so
// every branch is reached without a database; TestBearerWithRealTokens in
// internal/platform runs them on tokens the issuer grants.

var unitNow = time.Unix(1_800_000_000, 0)

// fakeKeys "verifies" a token by looking its payload up.
type fakeKeys struct {
	payloads map[string]any
	err      error
}

func (k *fakeKeys) Sign(context.Context, int64, string, []byte) (string, error) {
	return "", errors.New("not used")
}

func (k *fakeKeys) Secret(context.Context, int64) ([]byte, error) { return nil, errors.New("not used") }

func (k *fakeKeys) RotatedSecrets(context.Context, int64) ([][]byte, error) {
	return nil, errors.New("not used")
}

func (k *fakeKeys) Verify(_ context.Context, _ int64, typ, token string) ([]byte, error) {
	if k.err != nil {
		return nil, k.err
	}
	p, ok := k.payloads[token]
	if !ok || typ != issuer.AccessTokenType {
		return nil, fmt.Errorf("%w: unknown", signing.ErrInvalid)
	}
	return json.Marshal(p)
}

// fakeTokens says every token but the revoked ones is active.
type fakeTokens struct {
	revoked map[string]bool
	err     error
}

func (f *fakeTokens) AccessTokenActive(_ context.Context, _ int64, sig string, _ time.Time) (bool, error) {
	return !f.revoked[sig], f.err
}

type noSessions struct{}

func (noSessions) BindAccount(context.Context, int64, string, string, int64) (bool, error) {
	return false, errors.New("no Session in these tests")
}

var (
	unitURLs = tenant.URLs{Public: &url.URL{Scheme: "https", Host: "poppyhost.test"}}
	acme     = &tenant.Company{ID: 7, Slug: "acme", Settings: tenant.Settings{
		Organization: tenant.Organization{Name: "Acme", Domain: "acme.test"},
		Domains:      []string{"shop.acme.test"},
		Auth:         tenant.Auth{Issuer: true},
	}}
	acmeIssuer = "https://poppyhost.test/t/acme"
	acmeMCP    = bearer.Resource{ID: acmeIssuer + "/mcp"}
)

const (
	domainMetadata = "https://acme.test/.well-known/oauth-protected-resource"
	mcpMetadata    = "https://poppyhost.test/.well-known/oauth-protected-resource/t/acme/mcp"
)

// claims are valid access token claims for acme; mutate changes them.
func claims(mutate func(m map[string]any)) map[string]any {
	m := map[string]any{
		"iss": acmeIssuer, "sub": "42", "aud": []string{"https://acme.test", "https://shop.acme.test"},
		"client_id": "https://agent.test/agent.json", "scope": "orders:read addresses",
		"jti": "j", "iat": unitNow.Add(-time.Minute).Unix(), "exp": unitNow.Add(time.Minute).Unix(),
	}
	if mutate != nil {
		mutate(m)
	}
	return m
}

// tok is a fake access token whose JWS signature is sig.
func tok(sig string) string { return "h.p." + sig }

func newUnitValidator(keys *fakeKeys, tokens *fakeTokens) *bearer.Validator {
	clock := func() time.Time { return unitNow }
	proofs := dpop.New(&dpoptest.Replays{}, dpop.Options{Now: clock, Nonces: dpop.NewNonces(unitSecrets, 0, clock)})
	return bearer.New(keys, tokens, noSessions{}, proofs, unitURLs, func() time.Time { return unitNow })
}

// unitSecrets is every Company's secret in the unit tests.
func unitSecrets(context.Context, int64) ([]byte, error) {
	return []byte("0123456789abcdef0123456789abcdef"), nil
}

func requireChallenge(t *testing.T, err error, code, metadata string) *bearer.Challenge {
	t.Helper()
	var ch *bearer.Challenge
	require.ErrorAs(t, err, &ch)
	require.Equal(t, code, ch.Code, "%v", err)
	require.Equal(t, metadata, ch.ResourceMetadata)
	return ch
}

func TestValidate(t *testing.T) {
	t.Parallel()
	keys := &fakeKeys{payloads: map[string]any{
		tok("good"):      claims(nil),
		tok("revoked"):   claims(nil),
		tok("expired"):   claims(func(m map[string]any) { m["exp"] = unitNow.Unix() }),
		tok("other-iss"): claims(func(m map[string]any) { m["iss"] = "https://poppyhost.test/t/other" }),
		tok("mcp"):       claims(func(m map[string]any) { m["aud"] = []string{acmeIssuer + "/mcp"} }),
		tok("shop"):      claims(func(m map[string]any) { m["aud"] = []string{"https://shop.acme.test"} }),
		tok("no-sub"):    claims(func(m map[string]any) { m["sub"] = "" }),
		tok("no-aud"):    claims(func(m map[string]any) { delete(m, "aud") }),
	}}
	v := newUnitValidator(keys, &fakeTokens{revoked: map[string]bool{"revoked": true}})
	ctx := context.Background()

	g, err := v.Validate(ctx, acme, bearer.Resource{}, tok("good"))
	require.NoError(t, err)
	require.Equal(t, &bearer.Grant{ClientID: "https://agent.test/agent.json", AccountID: 42,
		Scopes: []string{"orders:read", "addresses"}, Audience: []string{"https://acme.test", "https://shop.acme.test"},
		Expires: unitNow.Add(time.Minute)}, g)
	require.True(t, g.Has("orders:read", "addresses"))
	require.True(t, g.Has())
	require.False(t, g.Has("orders:read", "orders:write"))

	// A token for one of the Company's other domains is a default token
	// (spec 4.5), valid at the default service.
	_, err = v.Validate(ctx, acme, bearer.Resource{}, tok("shop"))
	require.NoError(t, err)
	g, err = v.Validate(ctx, acme, acmeMCP, tok("mcp"))
	require.NoError(t, err)
	require.Equal(t, []string{acmeIssuer + "/mcp"}, g.Audience)

	for _, tt := range []struct {
		name     string
		res      bearer.Resource
		token    string
		metadata string
	}{
		{"garbage", bearer.Resource{}, "garbage", domainMetadata},
		{"expired", bearer.Resource{}, tok("expired"), domainMetadata},
		{"revoked", bearer.Resource{}, tok("revoked"), domainMetadata},
		{"another issuer", bearer.Resource{}, tok("other-iss"), domainMetadata},
		{"MCP token at the default service", bearer.Resource{}, tok("mcp"), domainMetadata},
		{"default token at MCP", acmeMCP, tok("good"), mcpMetadata},
		{"no aud", bearer.Resource{}, tok("no-aud"), domainMetadata},
		{"no account", bearer.Resource{}, tok("no-sub"), domainMetadata},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Validate(ctx, acme, tt.res, tt.token)
			requireChallenge(t, err, httpx.CodeInvalidToken, tt.metadata)
		})
	}

	// A Company without an issuer accepts no token.
	noIssuer := *acme
	noIssuer.Settings.Auth.Issuer = false
	_, err = v.Validate(ctx, &noIssuer, bearer.Resource{}, tok("good"))
	requireChallenge(t, err, httpx.CodeInvalidToken, domainMetadata)
}

func TestValidateFailuresAreNotInvalidToken(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	keys := &fakeKeys{payloads: map[string]any{tok("good"): claims(nil)}}

	// A token store that cannot answer is an error, not a revoked token.
	_, err := newUnitValidator(keys, &fakeTokens{err: down}).Validate(context.Background(), acme, bearer.Resource{}, tok("good"))
	require.ErrorIs(t, err, down)
	require.NotErrorAs(t, err, new(*bearer.Challenge))

	// Nor are keys that cannot be loaded.
	keys.err = down
	_, err = newUnitValidator(keys, &fakeTokens{}).Validate(context.Background(), acme, bearer.Resource{}, tok("good"))
	require.ErrorIs(t, err, down)
	require.NotErrorAs(t, err, new(*bearer.Challenge))
}

func TestAuthorizeWithoutSession(t *testing.T) {
	t.Parallel()
	keys := &fakeKeys{payloads: map[string]any{tok("good"): claims(nil)}}
	v := newUnitValidator(keys, &fakeTokens{})
	ctx := tenant.WithCompany(context.Background(), acme)
	req := func(auth string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://acme.test/orders", nil).WithContext(ctx)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}

	// Signed out and nothing needed: no grant, no error.
	g, err := v.Authorize(ctx, req(""), bearer.Resource{})
	require.NoError(t, err)
	require.Nil(t, g)

	// Signed out where account access is needed: a challenge without an
	// error code (RFC 6750 §3.1).
	_, err = v.Authorize(ctx, req(""), bearer.Resource{}, "orders:read")
	ch := requireChallenge(t, err, "", domainMetadata)
	require.Equal(t, `Bearer realm="poppyhost", scope="orders:read", resource_metadata="`+domainMetadata+`"`, ch.Header())
	_, err = v.Authorize(ctx, req("Basic dXNlcjpwYXNz"), bearer.Resource{}, "orders:read")
	requireChallenge(t, err, "", domainMetadata)

	g, err = v.Authorize(ctx, req("Bearer "+tok("good")), bearer.Resource{}, "orders:read")
	require.NoError(t, err)
	require.EqualValues(t, 42, g.AccountID)

	_, err = v.Authorize(ctx, req("Bearer "+tok("good")), bearer.Resource{}, "orders:read", "orders:write")
	ch = requireChallenge(t, err, httpx.CodeInsufficientScope, domainMetadata)
	require.Equal(t, []string{"orders:read", "orders:write"}, ch.Scopes)

	_, err = v.Authorize(ctx, req("Bearer nonsense"), bearer.Resource{})
	requireChallenge(t, err, httpx.CodeInvalidToken, domainMetadata)
}

func TestChallengeHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ch   bearer.Challenge
		want string
	}{
		{
			name: "no token",
			ch:   bearer.Challenge{Description: "sign in", Scopes: []string{"a", "b"}, ResourceMetadata: domainMetadata},
			want: `Bearer realm="poppyhost", scope="a b", resource_metadata="` + domainMetadata + `"`,
		},
		{
			name: "invalid token",
			ch:   bearer.Challenge{Code: "invalid_token", Description: "revoked", ResourceMetadata: mcpMetadata},
			want: `Bearer realm="poppyhost", error="invalid_token", error_description="revoked", resource_metadata="` + mcpMetadata + `"`,
		},
		{
			name: "insufficient scope",
			ch:   bearer.Challenge{Code: "insufficient_scope", Scopes: []string{"orders:write"}},
			want: `Bearer realm="poppyhost", error="insufficient_scope", scope="orders:write"`,
		},
		{
			name: "description outside RFC 6750's characters",
			ch:   bearer.Challenge{Code: "invalid_token", Description: "a \"quoted\" \\ café\r\nline"},
			want: `Bearer realm="poppyhost", error="invalid_token", error_description="a 'quoted' ' caf'''line"`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.ch.Header())
		})
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		err    error
		status int
		code   string
		header string
	}{
		{"no token", &bearer.Challenge{Scopes: []string{"a"}}, http.StatusUnauthorized, "unauthorized", `Bearer realm="poppyhost", scope="a"`},
		{"invalid token", &bearer.Challenge{Code: "invalid_token"}, http.StatusUnauthorized, "invalid_token", `Bearer realm="poppyhost", error="invalid_token"`},
		{"wrapped", fmt.Errorf("x: %w", &bearer.Challenge{Code: "insufficient_scope"}), http.StatusForbidden, "insufficient_scope", `Bearer realm="poppyhost", error="insufficient_scope"`},
		{"Session error", httpx.Errorf(httpx.CodeSessionEnded, "ended"), http.StatusBadRequest, "session_ended", ""},
		{"failure", errors.New("db down"), http.StatusInternalServerError, "internal_error", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			bearer.WriteError(w, httptest.NewRequest(http.MethodGet, "/", nil), tt.err)
			require.Equal(t, tt.status, w.Code)
			require.Equal(t, tt.header, w.Header().Get("WWW-Authenticate"))
			var body struct {
				Error string `json:"error"`
			}
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			require.Equal(t, tt.code, body.Error)
			require.NotContains(t, w.Body.String(), "db down")
		})
	}

	// httpx.WriteError alone gets the status and code right, if not the
	// header.
	w := httptest.NewRecorder()
	httpx.WriteError(w, httptest.NewRequest(http.MethodGet, "/", nil), &bearer.Challenge{Code: "insufficient_scope"})
	require.Equal(t, http.StatusForbidden, w.Code)
}

func TestMetadataURL(t *testing.T) {
	t.Parallel()
	v := newUnitValidator(&fakeKeys{}, &fakeTokens{})
	require.Equal(t, domainMetadata, v.MetadataURL(acme, bearer.Resource{}))
	require.Equal(t, mcpMetadata, v.MetadataURL(acme, acmeMCP))
	require.Equal(t, "https://mcp.acme.test/.well-known/oauth-protected-resource",
		v.MetadataURL(acme, bearer.Resource{ID: "https://mcp.acme.test"}))
	require.Equal(t, "https://mcp.acme.test/.well-known/oauth-protected-resource",
		v.MetadataURL(acme, bearer.Resource{ID: "https://mcp.acme.test/"}))
}
