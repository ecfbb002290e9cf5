package issuer_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// MCP clients that are not Personal Agents (spec 7, "Other MCP clients"):
// public clients with a client metadata document, signing in with MCP's
// authorization for the Company's MCP server only. One rule each;
// helpers are prefixed mc.

const mcRedirect = "http://127.0.0.1/callback"

// mcClient starts a public client's metadata document on desk.test.
func mcClient(t *testing.T, s *stormline) *peers.Agent {
	t.Helper()
	desk := s.env.StartAgent(t, "desk.test")
	desk.SetMetadata(map[string]any{
		"client_id":                  desk.ClientID,
		"client_name":                "Desk Assistant",
		"client_uri":                 desk.URL("/"),
		"redirect_uris":              []string{mcRedirect},
		"token_endpoint_auth_method": "none",
	})
	return desk
}

// mcParams is a valid authorization request of the public client desk for
// the MCP server; mutate breaks one rule.
func mcParams(s *stormline, desk *peers.Agent, verifier string, mutate func(q url.Values)) url.Values {
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {desk.ClientID},
		"redirect_uri":          {mcRedirect},
		"scope":                 {"orders:read"},
		"state":                 {azState},
		"code_challenge":        {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"},
		"resource":              {s.issuer + "/mcp"},
	}
	if mutate != nil {
		mutate(q)
	}
	return q
}

// mcCode signs ada in for desk and returns the code.
func mcCode(t *testing.T, s *stormline, desk *peers.Agent, verifier string) string {
	t.Helper()
	b := s.env.Browser(t)
	consent := azLogin(t, b, b.Get(azURL(s, mcParams(s, desk, verifier, nil))))
	require.Contains(t, consent.Body, "This is not a Personal Agent")
	return azApprove(t, s, b, consent, mcRedirect, []string{"orders:read"})
}

// mcToken posts a token request and returns the status and body.
func mcToken(t *testing.T, s *stormline, form url.Values, headers ...string) *peers.Response {
	t.Helper()
	return s.env.Do(t, http.MethodPost, s.issuer+"/oauth/token", form.Encode(),
		append([]string{"Content-Type", "application/x-www-form-urlencoded"}, headers...)...)
}

func TestMCPClientSignIn(t *testing.T) {
	t.Parallel()
	s := setup(t)
	desk := mcClient(t, s)
	verifier := oauth2.GenerateVerifier()
	code := mcCode(t, s, desk, verifier)
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {mcRedirect},
		"client_id": {desk.ClientID}, "code_verifier": {verifier}}

	// Credentials in a Basic header are refused before the code is used.
	resp := mcToken(t, s, form, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(desk.ClientID)+":")))
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_client", resp.JSON(t)["error"])

	resp = mcToken(t, s, form)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	tok := resp.JSON(t)
	require.Equal(t, "Bearer", tok["token_type"])
	require.NotEmpty(t, tok["refresh_token"])
	claims := azClaims(t, tok["access_token"].(string))
	require.Equal(t, []any{s.issuer + "/mcp"}, claims["aud"])
	require.Equal(t, desk.ClientID, claims["client_id"])

	// Refresh rotates; a resource other than the MCP server is refused.
	refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)},
		"client_id": {desk.ClientID}}
	other := url.Values{"resource": {"https://stormline.test"}}
	for k, v := range refresh {
		other[k] = v
	}
	resp = mcToken(t, s, other)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_target", resp.JSON(t)["error"])
	resp = mcToken(t, s, refresh)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.NotEqual(t, tok["refresh_token"], resp.JSON(t)["refresh_token"])

	// Revocation takes the public client by its client_id (RFC 7009).
	rotated := resp.JSON(t)["refresh_token"].(string)
	resp = s.env.Do(t, http.MethodPost, s.issuer+"/oauth/revoke", url.Values{"token": {rotated},
		"token_type_hint": {"refresh_token"}, "client_id": {desk.ClientID}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	refresh.Set("refresh_token", rotated)
	resp = mcToken(t, s, refresh)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_grant", resp.JSON(t)["error"])

	// Without an assertion a Personal Agent is still refused as before.
	resp = mcToken(t, s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {s.agent.ClientID}})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_client", resp.JSON(t)["error"])
}

func TestMCPClientAuthorizeRules(t *testing.T) {
	t.Parallel()
	s := setup(t)
	desk := mcClient(t, s)
	for name, tt := range map[string]struct {
		mutate func(q url.Values)
		err    string
	}{
		"no resource":         {func(q url.Values) { q.Del("resource") }, "invalid_target"},
		"the domain resource": {func(q url.Values) { q.Set("resource", "https://stormline.test") }, "invalid_target"},
		"no PKCE":             {func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, "invalid_request"},
		"plain PKCE":          {func(q url.Values) { q.Set("code_challenge_method", "plain") }, "invalid_request"},
		"unknown scope":       {func(q url.Values) { q.Set("scope", "orders:read admin") }, "invalid_scope"},
	} {
		t.Run(name, func(t *testing.T) {
			b := s.env.Browser(t)
			page := b.Get(azURL(s, mcParams(s, desk, oauth2.GenerateVerifier(), tt.mutate)))
			azErrorRedirect(t, s, page, mcRedirect, tt.err, azState)
		})
	}
	azNothingStored(t, s.env, "stormline")

	t.Run("unregistered redirect_uri", func(t *testing.T) {
		page := s.env.Browser(t).Get(azURL(s, mcParams(s, desk, oauth2.GenerateVerifier(), func(q url.Values) {
			q.Set("redirect_uri", "https://evil.test/cb")
		})))
		azErrorPage(t, page, http.StatusBadRequest)
	})

	t.Run("no scope asked", func(t *testing.T) {
		// The MCP server's metadata may list none: the client asks for
		// none, and approving grants none without declining.
		verifier := oauth2.GenerateVerifier()
		b := s.env.Browser(t)
		consent := azLogin(t, b, b.Get(azURL(s, mcParams(s, desk, verifier, func(q url.Values) { q.Del("scope") }))))
		code := azApprove(t, s, b, consent, mcRedirect, nil)
		resp := mcToken(t, s, url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {mcRedirect}, "client_id": {desk.ClientID}, "code_verifier": {verifier}})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Empty(t, azClaims(t, resp.JSON(t)["access_token"].(string))["scope"])
	})

	t.Run("device sign-in", func(t *testing.T) {
		resp := s.env.Do(t, http.MethodPost, s.issuer+"/oauth/device_authorization",
			url.Values{"client_id": {desk.ClientID}, "scope": {"orders:read"}}.Encode(),
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
		require.Equal(t, "unauthorized_client", resp.JSON(t)["error"])
	})

	t.Run("turned off", func(t *testing.T) {
		azPatch(t, s.env, "stormline", map[string]any{"mcp": map[string]any{"other_clients": false}})
		defer azPatch(t, s.env, "stormline", map[string]any{"mcp": map[string]any{"other_clients": nil}})
		page := s.env.Browser(t).Get(azURL(s, mcParams(s, desk, oauth2.GenerateVerifier(), nil)))
		azErrorPage(t, page, http.StatusBadRequest)
		require.Contains(t, page.Body, "invalid_client")
	})
}
