package platform_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
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

	resp := env.Probe(t, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.JSON(t)["reason"], "not applied")

	resp = env.Probe(t, "/healthz")
	require.Equal(t, http.StatusOK, resp.Status, "liveness does not depend on the database")
}

func TestReadyzAndDrain(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	resp := env.Probe(t, "/readyz")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	env.Platform.Drain()
	resp = env.Probe(t, "/readyz")
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

// TestOpsOnlyOnOpsListener: health, readiness and metrics answer on the
// operations listener, whatever the Host, and on no public host: not the
// platform's, not a Company's, not an IP literal as probes inside a cluster
// send. Nothing else answers on the operations listener.
func TestOpsOnlyOnOpsListener(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"}})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		require.Equal(t, http.StatusOK, env.Probe(t, path).Status, path)
		for _, u := range []string{env.PublicURL(path), env.URL("shop.example", path)} {
			resp := env.Do(t, http.MethodGet, u, nil)
			require.Equal(t, http.StatusNotFound, resp.Status, u)
			require.Equal(t, "not_found", resp.JSON(t)["error"], u)
		}
		resp := env.Do(t, http.MethodGet, env.URL("poppyhost.test", path), nil, "Host", "10.1.2.3:8443")
		require.Equal(t, http.StatusNotFound, resp.Status, path)
	}
	for _, path := range []string{"/admin/v1/companies", "/.well-known/poppy.json", "/t/shop/poppy/excluded-tasks.json"} {
		req := peers.NewRequest(t, http.MethodGet, env.Ops+path, nil)
		req.Header.Set("Authorization", "Bearer "+testkit.AdminToken)
		req.Host = testkit.PublicHost
		require.Equal(t, http.StatusNotFound, peers.Send(t, http.DefaultClient, req).Status, path)
	}
}
