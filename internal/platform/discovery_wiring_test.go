package platform_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
)

// TestDiscoveryWiring: the platform serves the discovery documents where a
// Personal Agent looks for them (the documents themselves are tested in
// internal/discovery): poppy.json and the protected resource metadata on
// every Company domain, the issuer's RFC 8414 metadata on the platform
// host, the excluded tasks under the issuer; read-only, HEAD as GET.
func TestDiscoveryWiring(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "shop",
		"organization":   map[string]any{"name": "Shop", "domain": "shop.example"},
		"domains":        []string{"www.shop.example"},
		"web":            map[string]any{"browser_join": true},
		"excluded_tasks": []map[string]any{{"task": "Close an account"}}})
	issuer := env.PublicURL("/t/shop")
	for _, d := range []string{"shop.example", "www.shop.example"} {
		pj := env.Do(t, http.MethodGet, env.URL(d, "/.well-known/poppy.json"), nil)
		require.Equal(t, http.StatusOK, pj.Status, "%s", pj.Body)
		require.Equal(t, "public, max-age=60", pj.Header.Get("Cache-Control"))
		doc := pj.JSON(t)
		require.Equal(t, d, doc["organization"].(map[string]any)["domain"])
		require.Equal(t, env.URL(d, "/poppy/browser-session"), doc["web"].(map[string]any)["browser_session_endpoint"])
		prm := env.Do(t, http.MethodGet, env.URL(d, "/.well-known/oauth-protected-resource"), nil)
		require.Equal(t, http.StatusOK, prm.Status, "%s", prm.Body)
		require.Equal(t, []any{issuer}, prm.JSON(t)["authorization_servers"])
	}
	as := env.Do(t, http.MethodGet, env.PublicURL("/.well-known/oauth-authorization-server/t/shop"), nil)
	require.Equal(t, http.StatusOK, as.Status, "%s", as.Body)
	require.Equal(t, issuer, as.JSON(t)["issuer"])
	tasks := env.Do(t, http.MethodGet, issuer+"/poppy/excluded-tasks.json", nil)
	require.Equal(t, http.StatusOK, tasks.Status, "%s", tasks.Body)
	require.Equal(t, []any{map[string]any{"task": "Close an account"}}, tasks.JSON(t)["tasks"])

	head := env.Do(t, http.MethodHead, env.URL("shop.example", "/.well-known/poppy.json"), nil)
	require.Equal(t, http.StatusOK, head.Status)
	require.Empty(t, head.Body)
	post := env.Do(t, http.MethodPost, env.URL("shop.example", "/.well-known/poppy.json"), "{}")
	require.Equal(t, http.StatusMethodNotAllowed, post.Status)
	require.Contains(t, post.Header.Get("Allow"), http.MethodGet)
	// On the platform's own host there is no poppy.json.
	require.Equal(t, http.StatusNotFound, env.Do(t, http.MethodGet, env.PublicURL("/.well-known/poppy.json"), nil).Status)
}
