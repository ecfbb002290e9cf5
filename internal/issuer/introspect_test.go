package issuer_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// apiKey creates a Company API key for slug and returns its secret.
func (s *tokenRig) apiKey(t *testing.T, slug string) string {
	t.Helper()
	resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	var k struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &k))
	require.NotEmpty(t, k.Key)
	return k.Key
}

// introspectAt asks the introspection endpoint at iss about token with an
// API key (RFC 7662).
func (s *tokenRig) introspectAt(t *testing.T, iss, key, token string) *peers.Response {
	t.Helper()
	return s.postForm(t, iss+"/oauth/introspect", url.Values{"token": {token}}, "Authorization", "Bearer "+key)
}

// introspect asks stormline about token and returns the answer, which must
// be a 200.
func (s *tokenRig) introspect(t *testing.T, key, token string) map[string]any {
	t.Helper()
	resp := s.introspectAt(t, s.issuer, key, token)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	return resp.JSON(t)
}

// accountID is ada's account ID at slug, the sub of her tokens.
func (s *tokenRig) accountID(t *testing.T, slug string) string {
	t.Helper()
	var id int64
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT a.id FROM accounts a
		JOIN companies c ON c.id = a.company_id WHERE c.slug = $1 AND a.username = $2`, slug, testUser).Scan(&id))
	return strconv.FormatInt(id, 10)
}

// issuerAt is the issuer's endpoints on the test database with its clock
// at now, to see tokens expire.
func (s *tokenRig) issuerAt(t *testing.T, now time.Time) http.Handler {
	t.Helper()
	resolver := agentid.NewResolver(safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: s.env.CA.Pool(),
		Resolver: s.env.Hosts}), agentid.Options{})
	srv := issuer.New(issuer.Options{
		Pool: s.env.Pool, Keys: signing.NewKeys(s.env.Pool, signing.Options{}), Resolver: resolver,
		Replays: clientauth.NewPGReplays(s.env.Pool), Accounts: s.env.Platform.Accounts, URLs: s.env.URLs,
		CompanyForAPIKey: s.env.Platform.Tenants.CompanyForAPIKey, Now: func() time.Time { return now },
	})
	r := chi.NewRouter()
	r.Route("/t/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(s.env.Platform.Tenants))
		srv.Public(r)
	})
	return r
}

func TestIntrospectActive(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read", "orders:write")
	sub := s.accountID(t, "stormline")

	got := s.introspect(t, key, tok.AccessToken)
	require.Equal(t, true, got["active"])
	require.Equal(t, "Bearer", got["token_type"])
	require.Equal(t, s.agent.ClientID, got["client_id"])
	require.Equal(t, "orders:read orders:write", got["scope"])
	require.Equal(t, sub, got["sub"])
	require.Equal(t, []any{"https://stormline.test"}, got["aud"])
	require.Equal(t, s.issuer, got["iss"])
	exp, ok := got["exp"].(float64)
	require.True(t, ok, "exp is a number: %v", got)
	require.InDelta(t, float64(tok.Expiry.Unix()), exp, 5)
	require.NotEmpty(t, got["jti"])

	got = s.introspect(t, key, tok.RefreshToken)
	require.Equal(t, true, got["active"])
	require.Equal(t, "refresh_token", got["token_type"])
	require.Equal(t, s.agent.ClientID, got["client_id"])
	require.Equal(t, "orders:read orders:write", got["scope"])
	require.Equal(t, sub, got["sub"])
	require.Equal(t, s.issuer, got["iss"])
	exp, ok = got["exp"].(float64)
	require.True(t, ok, "exp is a number: %v", got)
	require.InDelta(t, float64(time.Now().Add(issuer.DefaultRefreshTokenLifetime).Unix()), exp, 60)
}

func TestIntrospectInactive(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	revoked := s.signedIn(t, "orders:read")
	require.Equal(t, http.StatusOK, s.revoke(t, revoked.RefreshToken).Status)
	live := s.signedIn(t, "orders:read")
	// A refresh rotates the refresh token; the grant's earlier access
	// tokens live on until they expire (TestRefreshKeepsEarlierAccessTokens).
	rotated, err := s.refresh(live.RefreshToken)
	require.NoError(t, err)

	harborTok := s.at(t, addCompanyLike(t, s.env, "harbor")).signedIn(t, "orders:read")

	for name, token := range map[string]string{
		"revoked access token":      revoked.AccessToken,
		"revoked refresh token":     revoked.RefreshToken,
		"rotated refresh token":     live.RefreshToken,
		"unknown":                   "not-a-token",
		"unknown refresh-shaped":    "abc.def",
		"unknown JWT-shaped":        "a.b.c",
		"another Company's access":  harborTok.AccessToken,
		"another Company's refresh": harborTok.RefreshToken,
		"access token, bad sig":     rotated.AccessToken[:len(rotated.AccessToken)-4] + "AAAA",
		"refresh token, bad hmac":   rotated.RefreshToken[:len(rotated.RefreshToken)-4] + "AAAA",
	} {
		require.Equal(t, map[string]any{"active": false}, s.introspect(t, key, token), name)
	}
	require.Equal(t, true, s.introspect(t, key, rotated.AccessToken)["active"])
	require.Equal(t, true, s.introspect(t, key, rotated.RefreshToken)["active"])
}

func TestIntrospectExpired(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read")

	ask := func(now time.Time, token string) map[string]any {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, s.issuer+"/oauth/introspect",
			strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		s.issuerAt(t, now).ServeHTTP(w, req)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var got map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
		return got
	}
	soon := time.Now().Add(time.Minute)
	require.Equal(t, true, ask(soon, tok.AccessToken)["active"])
	require.Equal(t, true, ask(soon, tok.RefreshToken)["active"])

	pastAccess := time.Now().Add(issuer.DefaultAccessTokenLifetime + time.Minute)
	require.Equal(t, map[string]any{"active": false}, ask(pastAccess, tok.AccessToken))
	require.Equal(t, true, ask(pastAccess, tok.RefreshToken)["active"])

	pastRefresh := time.Now().Add(issuer.DefaultRefreshTokenLifetime + time.Minute)
	require.Equal(t, map[string]any{"active": false}, ask(pastRefresh, tok.RefreshToken))
}

func TestIntrospectRefused(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	addCompanyLike(t, s.env, "harbor")
	harborKey := s.apiKey(t, "harbor")
	tok := s.signedIn(t, "orders:read")

	// Only stormline's own API keys may ask (RFC 7662 §2.1).
	for name, auth := range map[string]string{
		"no key":                "",
		"wrong key":             "Bearer " + key + "x",
		"not a key":             "Bearer nonsense",
		"another Company's key": "Bearer " + harborKey,
		"Basic scheme":          "Basic " + key,
		"the access token":      "Bearer " + tok.AccessToken,
	} {
		t.Run(name, func(t *testing.T) {
			var headers []string
			if auth != "" {
				headers = []string{"Authorization", auth}
			}
			resp := s.postForm(t, s.issuer+"/oauth/introspect", url.Values{"token": {tok.AccessToken}}, headers...)
			require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
			require.Contains(t, resp.Header.Get("WWW-Authenticate"), `Bearer realm=`)
			require.NotContains(t, string(resp.Body), "active")
		})
	}

	// harbor's key works at harbor, where stormline's token is unknown.
	resp := s.introspectAt(t, s.env.PublicURL("/t/harbor"), harborKey, tok.AccessToken)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"active": false}, resp.JSON(t))

	requireOAuthErrorBody(t, s.postForm(t, s.issuer+"/oauth/introspect", url.Values{}, "Authorization", "Bearer "+key),
		http.StatusBadRequest, "invalid_request")
	requireOAuthErrorBody(t, s.postForm(t, s.issuer+"/oauth/introspect", url.Values{"token": {strings.Repeat("x", 64<<10)}},
		"Authorization", "Bearer "+key), http.StatusBadRequest, "invalid_request")
}
