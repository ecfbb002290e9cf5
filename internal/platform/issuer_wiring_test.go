package platform_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit"
)

// TestIssuerWiring: the issuer's sign-in endpoints answer only for the
// grant types a Company offers (tenant.Auth.OfferedGrantTypes): with
// sign-in disabled neither Direct nor Device Sign-In starts (404, as if
// they did not exist, spec 3.2), while the token endpoint still answers
// for refresh tokens issued before; with one grant type, the other's
// endpoints are absent.
func TestIssuerWiring(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "stormline",
		"organization": map[string]any{"name": "Stormline Outfitters", "domain": "stormline.test"},
		"auth":         map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}}})
	agent := env.StartAgent(t, "agent.test")
	issuer := env.PublicURL("/t/stormline")
	authURL := issuer + "/oauth/authorize?" + url.Values{
		"response_type": {"code"}, "client_id": {agent.ClientID}, "redirect_uri": {agent.URL("/callback")},
		"scope": {"orders:read"}, "state": {"st4te"},
		"code_challenge":        {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())},
		"code_challenge_method": {"S256"},
	}.Encode()
	patch := func(auth map[string]any) {
		t.Helper()
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/stormline", map[string]any{"auth": auth})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	post := func(path string, form url.Values) int {
		t.Helper()
		form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
		form.Set("client_assertion", agent.ClientAssertion(t, issuer))
		return env.Do(t, http.MethodPost, issuer+path, form.Encode(), "Content-Type", "application/x-www-form-urlencoded").Status
	}
	authorize := func() int { return env.Do(t, http.MethodGet, authURL, nil).Status }
	device := func() int { return post("/oauth/device_authorization", url.Values{"scope": {"orders:read"}}) }

	require.Equal(t, http.StatusOK, authorize())
	require.Equal(t, http.StatusOK, device())

	patch(map[string]any{"disabled": true})
	require.Equal(t, http.StatusNotFound, authorize())
	require.Equal(t, http.StatusNotFound, device())
	// Refreshing is not signing in: the token endpoint still answers (here
	// refusing a made-up refresh token).
	require.Equal(t, http.StatusBadRequest, post("/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}}))

	patch(map[string]any{"disabled": false, "grant_types": []string{"urn:ietf:params:oauth:grant-type:device_code"}})
	require.Equal(t, http.StatusNotFound, authorize())
	require.Equal(t, http.StatusOK, device())

	patch(map[string]any{"grant_types": []string{"authorization_code"}})
	require.Equal(t, http.StatusOK, authorize())
	require.Equal(t, http.StatusNotFound, device())
	// Showing the sign-in page stores no code or PKCE request.
	var stored int
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM oauth_tokens WHERE kind IN ('code', 'pkce')`).Scan(&stored))
	require.Zero(t, stored)
}
