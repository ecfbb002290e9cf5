package platform_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/migrations"
)

// TestReadyzReportsSchemaBehind: a database rolled back under a running
// server makes it unready, with the reason.
func TestReadyzReportsSchemaBehind(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	m, err := migrations.New(env.Pool, nil)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Down(context.Background(), 1, false))

	resp := env.Do(t, http.MethodGet, env.PublicURL("/readyz"), nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.JSON(t)["reason"], "not applied")

	resp = env.Do(t, http.MethodGet, env.PublicURL("/healthz"), nil)
	require.Equal(t, http.StatusOK, resp.Status, "liveness does not depend on the database")
}

func TestReadyzAndDrain(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	resp := env.Do(t, http.MethodGet, env.PublicURL("/readyz"), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	env.Platform.Drain()
	resp = env.Do(t, http.MethodGet, env.PublicURL("/readyz"), nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	require.Equal(t, "draining", resp.JSON(t)["status"])
}

// TestFeatureRoutes: a feature's routes answer where the Company's
// settings offer it and are absent where they do not.
func TestFeatureRoutes(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"},
		"web": map[string]any{"browser_join": true}})
	env.CreateCompany(t, map[string]any{"slug": "plain", "organization": map[string]any{"name": "Plain", "domain": "plain.example"},
		"auth": map[string]any{"issuer": false}, "conversations": map[string]any{"enabled": false}})
	// Browser join is live: a submission without a code is refused.
	join := env.Do(t, http.MethodPost, env.URL("shop.example", "/poppy/browser-session"), nil)
	require.Equal(t, http.StatusBadRequest, join.Status)
	// Features the Company's settings do not offer are simply absent.
	for _, u := range []string{
		env.PublicURL("/t/nobody/oauth/token"),
		env.PublicURL("/t/plain/oauth/token"),
		env.PublicURL("/t/plain/poppy/conversations"),
		env.URL("plain.example", "/poppy/browser-session"),
	} {
		resp := env.Do(t, http.MethodPost, u, nil)
		require.Equal(t, http.StatusNotFound, resp.Status, u)
	}
	// Conversations are live: without a Session header, invalid_session.
	resp0 := env.Do(t, http.MethodPost, env.PublicURL("/t/shop/poppy/conversations"), "{}")
	require.Equal(t, http.StatusBadRequest, resp0.Status)
	require.Equal(t, "invalid_session", resp0.JSON(t)["error"])
	// A Company without an issuer still publishes the keys that sign
	// Poppy-Verified.
	jwks := env.Do(t, http.MethodGet, env.PublicURL("/t/plain/oauth/jwks.json"), nil)
	require.Equal(t, http.StatusOK, jwks.Status)
	require.NotEmpty(t, jwks.JSON(t)["keys"])
	// The issuer's endpoints are live where the Company has an issuer.
	resp := env.Do(t, http.MethodPost, env.PublicURL("/t/shop/oauth/token"), "grant_type=refresh_token",
		"Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusUnauthorized, resp.Status)
	require.Equal(t, "invalid_client", resp.JSON(t)["error"])
}

// TestOpsByAddress: probes and scrapers address a pod by IP, so health,
// readiness and metrics answer there, and nothing else does.
func TestOpsByAddress(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp := env.Do(t, http.MethodGet, env.URL("poppyhost.test", path), nil, "Host", "10.1.2.3:8443")
		require.Equal(t, http.StatusOK, resp.Status, path)
	}
	for _, path := range []string{"/admin/v1/companies", "/.well-known/poppy.json", "/t/x/poppy/excluded-tasks.json"} {
		resp := env.Do(t, http.MethodGet, env.URL("poppyhost.test", path), nil, "Host", "10.1.2.3", "Authorization", "Bearer "+testkit.AdminToken)
		require.Equal(t, http.StatusNotFound, resp.Status, path)
	}
}
