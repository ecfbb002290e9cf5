package platform_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestAdminAndCompanyAPILimits: the admin API is limited per operator
// token and the Company API per API key; over the limit each answers 429
// rate_limited with Retry-After in its error format, and another token or
// key keeps its own budget.
func TestAdminAndCompanyAPILimits(t *testing.T) {
	t.Parallel()
	const perToken, perKey = 6, 4
	env := testkit.SetupWith(t, testkit.Options{Platform: func(o *platform.Options) {
		o.APIRates = tenant.APIRates{PerOperatorToken: perToken, PerAPIKey: perKey}
	}})
	requireLimited := func(resp *peers.Response) {
		t.Helper()
		require.Equal(t, http.StatusTooManyRequests, resp.Status, "%s", resp.Body)
		require.Equal(t, "rate_limited", resp.JSON(t)["error"])
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
	}

	// The bootstrap token's first four requests.
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"}})
	var keys []string
	for range 2 {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/shop/api-keys", map[string]any{"name": "k"})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		keys = append(keys, resp.JSON(t)["key"].(string))
	}
	resp := env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", map[string]any{"name": "ci"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	ci := resp.JSON(t)["token"].(string)

	get := func(path, token string) *peers.Response {
		return env.Do(t, http.MethodGet, env.PublicURL(path), nil, "Authorization", "Bearer "+token)
	}
	for i := range perToken {
		require.Equal(t, http.StatusOK, get("/admin/v1/companies", ci).Status, "request %d", i+1)
	}
	requireLimited(get("/admin/v1/companies", ci))
	requireLimited(get("/admin/v1/companies/shop", ci))
	// The bootstrap token has two requests left.
	for range perToken - 4 {
		require.Equal(t, http.StatusOK, get("/admin/v1/companies/shop", testkit.AdminToken).Status)
	}
	requireLimited(get("/admin/v1/companies", testkit.AdminToken))

	for i := range perKey {
		require.Equal(t, http.StatusOK, get("/company/v1/company", keys[0]).Status, "request %d", i+1)
	}
	requireLimited(get("/company/v1/company", keys[0]))
	require.Equal(t, http.StatusOK, get("/company/v1/company", keys[1]).Status, "another key has its own budget")

	// A token that is not valid is refused as before, not counted.
	for range perToken + 1 {
		require.Equal(t, http.StatusUnauthorized, get("/admin/v1/companies", "pho_not-a-token").Status)
	}
}
