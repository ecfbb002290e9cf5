package issuer_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Dynamic Client Registration (RFC 7591) for MCP clients without a client
// metadata document, where the Company allows it. Helpers are prefixed rg.

// rgRegister posts a registration and returns the answer.
func rgRegister(t *testing.T, s *stormline, body string) *peers.Response {
	t.Helper()
	return s.env.Do(t, http.MethodPost, s.issuer+"/oauth/register", body, "Content-Type", "application/json")
}

const rgInspector = `{"client_name":"Inspector","redirect_uris":["http://localhost:6274/oauth/callback"],
	"grant_types":["authorization_code","refresh_token"],"response_types":["code"],"token_endpoint_auth_method":"none"}`

func TestMCPClientRegistration(t *testing.T) {
	t.Parallel()
	s := setup(t)
	// Off by default: no such endpoint.
	require.Equal(t, http.StatusNotFound, rgRegister(t, s, rgInspector).Status)
	azPatch(t, s.env, "stormline", map[string]any{"mcp": map[string]any{"dynamic_registration": true}})

	resp := rgRegister(t, s, rgInspector)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	reg := resp.JSON(t)
	id := reg["client_id"].(string)
	require.True(t, strings.HasPrefix(id, "mcpc_"), id)
	require.Equal(t, "none", reg["token_endpoint_auth_method"])
	require.Equal(t, []any{"http://localhost:6274/oauth/callback"}, reg["redirect_uris"])
	require.Equal(t, "Inspector", reg["client_name"])
	require.NotContains(t, reg, "client_secret")

	// Refused metadata, RFC 7591 §3.2.2.
	for body, code := range map[string]string{
		`{"redirect_uris":["http://evil.example/cb"]}`:                                                "invalid_redirect_uri",
		`{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"client_secret_post"}`: "invalid_client_metadata",
	} {
		resp := rgRegister(t, s, body)
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
		require.Equal(t, code, resp.JSON(t)["error"])
	}

	// Sign-in as the registered client: marked unverified on the consent
	// page, tokens for the MCP server only.
	redirect := "http://localhost:6274/oauth/callback"
	verifier := oauth2.GenerateVerifier()
	q := url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect}, "scope": {"orders:read"},
		"state": {azState}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"}, "resource": {s.issuer + "/mcp"}}
	b := s.env.Browser(t)
	consent := azLogin(t, b, b.Get(azURL(s, q)))
	require.Contains(t, consent.Body, "registered itself")
	require.Contains(t, consent.Body, "This is not a Personal Agent")
	code := azApprove(t, s, b, consent, redirect, []string{"orders:read"})
	resp = mcToken(t, s, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect},
		"client_id": {id}, "code_verifier": {verifier}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, []any{s.issuer + "/mcp"}, azClaims(t, resp.JSON(t)["access_token"].(string))["aud"])
	// Used, the registration lasts as long as its refresh token could.
	require.Greater(t, rgExpires(t, s, id), time.Now().Add(29*24*time.Hour))

	// Limited by address: five a minute.
	limited := false
	for range 6 {
		if rgRegister(t, s, rgInspector).Status == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	require.True(t, limited)

	// Another Company does not know the registration.
	s.env.CreateCompany(t, map[string]any{"slug": "harbor",
		"organization": map[string]any{"name": "Harbor", "domain": "harbor.test"},
		"auth":         map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}},
		"mcp":          map[string]any{"dynamic_registration": true}})
	hq := url.Values{}
	for k, v := range q {
		hq[k] = v
	}
	hq.Set("resource", s.env.PublicURL("/t/harbor/mcp"))
	page := s.env.Browser(t).Get(s.env.PublicURL("/t/harbor/oauth/authorize?") + hq.Encode())
	azErrorPage(t, page, http.StatusBadRequest)
	require.Contains(t, page.Body, "register again")

	// Turned off, registered clients are refused too.
	azPatch(t, s.env, "stormline", map[string]any{"mcp": map[string]any{"dynamic_registration": false}})
	resp = mcToken(t, s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {id}})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_client", resp.JSON(t)["error"])
}

// rgExpires is when registration id expires.
func rgExpires(t *testing.T, s *stormline, id string) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, s.env.Pool.QueryRow(context.Background(),
		`SELECT expires_at FROM mcp_client_registrations WHERE client_id = $1`, id).Scan(&at))
	return at
}

// TestMCPClientRegistrationExpires: a registration unused for a day
// expires, is refused, and the sweep deletes it.
func TestMCPClientRegistrationExpires(t *testing.T) {
	t.Parallel()
	s := setup(t)
	azPatch(t, s.env, "stormline", map[string]any{"mcp": map[string]any{"dynamic_registration": true}})
	resp := rgRegister(t, s, rgInspector)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	id := resp.JSON(t)["client_id"].(string)
	// Hostile bodies: too large, not JSON; nothing is stored.
	big := `{"redirect_uris":["http://127.0.0.1/cb"],"client_name":"` + strings.Repeat("x", 9<<10) + `"}`
	resp = rgRegister(t, s, big)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_client_metadata", resp.JSON(t)["error"])
	resp = s.env.Do(t, http.MethodPost, s.issuer+"/oauth/register", "redirect_uris=http://127.0.0.1/cb",
		"Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	var n int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM mcp_client_registrations`).Scan(&n))
	require.Equal(t, 1, n)
	exp := rgExpires(t, s, id)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), exp, time.Minute, "unused, it lasts a day")
	// A token request that issues nothing does not keep it.
	resp = mcToken(t, s, url.Values{"grant_type": {"authorization_code"}, "code": {"bogus"},
		"redirect_uri": {"http://localhost:6274/oauth/callback"}, "client_id": {id}, "code_verifier": {oauth2.GenerateVerifier()}})
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Equal(t, exp, rgExpires(t, s, id), "a failed token request leaves the registration as it was")
	// client_ids with the prefix but not a registration's form are refused
	// without a lookup: text PostgreSQL would refuse never reaches it.
	for _, bad := range []string{"mcpc_\x00" + strings.Repeat("A", 31), "mcpc_\xff", "mcpc_", "mcpc_" + strings.Repeat("!", 32)} {
		resp := mcToken(t, s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {bad}})
		require.Equal(t, http.StatusUnauthorized, resp.Status, "%q: %s", bad, resp.Body)
		require.Equal(t, "invalid_client", resp.JSON(t)["error"])
		q := url.Values{"response_type": {"code"}, "client_id": {bad}, "redirect_uri": {"http://localhost:6274/oauth/callback"},
			"state": {azState}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())},
			"code_challenge_method": {"S256"}, "resource": {s.issuer + "/mcp"}}
		page := s.env.Browser(t).Get(azURL(s, q))
		require.Less(t, page.Status, 500, "%q", bad)
	}

	_, err := s.env.Pool.Exec(context.Background(),
		`UPDATE mcp_client_registrations SET expires_at = now() - interval '1 second' WHERE client_id = $1`, id)
	require.NoError(t, err)
	q := url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {"http://localhost:6274/oauth/callback"},
		"state": {azState}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())},
		"code_challenge_method": {"S256"}, "resource": {s.issuer + "/mcp"}}
	page := s.env.Browser(t).Get(azURL(s, q))
	azErrorPage(t, page, http.StatusBadRequest)
	require.Contains(t, page.Body, "register again")

	deleted, err := s.env.Issuer.Store().DeleteExpiredRegistrations(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(1), deleted)
}

// TestMCPClientPrivateUseRedirect: a client registered with a private-use
// scheme redirect URI (RFC 8252 §7.1), which has no host, signs in with
// it; another private-use URI is refused.
func TestMCPClientPrivateUseRedirect(t *testing.T) {
	t.Parallel()
	s := setup(t)
	azPatch(t, s.env, "stormline", map[string]any{"mcp": map[string]any{"dynamic_registration": true}})
	resp := rgRegister(t, s, `{"client_name":"Desk","redirect_uris":["com.example.desk:/oauth"],"token_endpoint_auth_method":"none"}`)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	id := resp.JSON(t)["client_id"].(string)
	query := func(redirect string) url.Values {
		return url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect}, "scope": {"orders:read"},
			"state": {azState}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())},
			"code_challenge_method": {"S256"}, "resource": {s.issuer + "/mcp"}}
	}
	b := s.env.Browser(t)
	page := b.Get(azURL(s, query("com.example.desk:/oauth")))
	require.Equal(t, http.StatusOK, page.Status, "%s", page.Body)
	consent := azLogin(t, b, page)
	require.Contains(t, consent.Body, "registered itself")
	azErrorPage(t, s.env.Browser(t).Get(azURL(s, query("com.example.desk:/other"))), http.StatusBadRequest)
}
