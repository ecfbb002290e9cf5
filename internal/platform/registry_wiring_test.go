package platform_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// registryOrdersYAML is an OpenAPI description with two operations.
const registryOrdersYAML = `openapi: 3.0.3
info:
  title: Orders v2
  version: "2"
paths:
  /orders:
    get:
      responses:
        "200":
          description: ok
  /orders/{id}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "200":
          description: ok
`

// registryNestedDoc is a description whose one response schema nests
// depth arrays, as JSON.
func registryNestedDoc(depth int) json.RawMessage {
	schema := strings.Repeat(`{"type":"array","items":`, depth) + `{"type":"string"}` + strings.Repeat(`}`, depth)
	return json.RawMessage(`{"openapi":"3.0.3","info":{"title":"Deep","version":"1"},"paths":{"/a":{"get":{"responses":` +
		`{"200":{"description":"ok","content":{"application/json":{"schema":` + schema + `}}}}}}}}`)
}

// registryListed returns the apis entries of the poppy.json of domain.
func registryListed(t *testing.T, env *testkit.Env, domain string) []map[string]any {
	t.Helper()
	resp := env.Do(t, http.MethodGet, env.URL(domain, "/.well-known/poppy.json"), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var doc struct {
		APIs []map[string]any `json:"apis"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &doc), "%s", resp.Body)
	return doc.APIs
}

// registryDocs serves body as YAML at /openapi.yaml on host, a name the
// platform resolves to loopback, and returns its URL.
func registryDocs(t *testing.T, env *testkit.Env, host, body string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/openapi.yaml" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write([]byte(body))
	}))
	srv.TLS = env.CA.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	env.Hosts.Add(host)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return "https://" + host + ":" + port + "/openapi.yaml"
}

// TestRegistryWiring: APIs and tools registered through /company/v1 and
// the admin API (the registration API itself is tested in
// internal/registry) are listed in the Company's poppy.json, each API by
// the description the gateway publishes, naming the gateway as its server,
// a description given by URL fetched with the platform's client, and the
// hosted MCP server once a tool is registered; once deleted they are
// listed no more and the gateway stops publishing them.
func TestRegistryWiring(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	const slug, domain = "registry-wiring", "registry-wiring.example"
	env.CreateCompany(t, map[string]any{"slug": slug, "organization": map[string]any{"name": "Shop", "domain": domain}})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "registry"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	key := resp.JSON(t)["key"].(string)
	api := func(method, path string, body any) *peers.Response {
		return env.Do(t, method, env.PublicURL("/company/v1"+path), body, "Authorization", "Bearer "+key)
	}
	admin := func(method, path string, body any) *peers.Response {
		return env.Admin(t, method, "/admin/v1/companies/"+slug+path, body)
	}
	base := env.PublicURL("/t/" + slug)
	require.Empty(t, registryListed(t, env, domain))

	resp = api(http.MethodPut, "/apis/orders", map[string]any{
		"origin": "https://orders.registry-wiring.example/v1", "description": "Orders", "openapi": registryOrdersYAML})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	resp = admin(http.MethodPut, "/apis/catalog", map[string]any{"origin": "https://catalog.registry-wiring.example",
		"openapi_url": registryDocs(t, env, "docs.registry-wiring.test", registryOrdersYAML)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.ElementsMatch(t, []map[string]any{
		{"type": "openapi", "url": base + "/openapi/catalog.json"},
		{"type": "openapi", "url": base + "/openapi/orders.json", "description": "Orders"},
	}, registryListed(t, env, domain))
	for _, name := range []string{"orders", "catalog"} {
		resp = env.Do(t, http.MethodGet, base+"/openapi/"+name+".json", nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		published := resp.JSON(t)
		require.Equal(t, []any{map[string]any{"url": base + "/api/" + name}}, published["servers"])
		require.Equal(t, "Orders v2", published["info"].(map[string]any)["title"])
		require.Contains(t, published["paths"], "/orders/{id}")
	}

	// A description at the depth limit's safe side is published whole
	// (issue 25, item 7).
	resp = api(http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": registryNestedDoc(60)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	published := env.Do(t, http.MethodGet, base+"/openapi/deep.json", nil)
	require.Equal(t, http.StatusOK, published.Status, "%s", published.Body)
	require.Equal(t, 61, strings.Count(string(published.Body), `"type":`), "every level of the schema is published")

	for _, name := range []string{"orders", "deep"} {
		require.Equal(t, http.StatusNoContent, api(http.MethodDelete, "/apis/"+name, nil).Status)
	}
	require.Equal(t, http.StatusNoContent, admin(http.MethodDelete, "/apis/catalog", nil).Status)
	require.Empty(t, registryListed(t, env, domain))
	// The gateway notices within its cache's lifetime.
	for _, name := range []string{"orders", "catalog", "deep"} {
		require.Eventually(t, func() bool {
			return env.Do(t, http.MethodGet, base+"/openapi/"+name+".json", nil).Status == http.StatusNotFound
		}, 10*time.Second, 100*time.Millisecond, name)
	}

	// A registered tool puts the hosted MCP server in poppy.json.
	resp = api(http.MethodPut, "/tools/orders.lookup", map[string]any{"description": "Finds an order.",
		"input_schema": map[string]any{"type": "object"}, "url": "https://tools.registry-wiring.example/lookup"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, []map[string]any{{"type": "mcp", "url": base + "/mcp"}}, registryListed(t, env, domain))
	require.Equal(t, http.StatusNoContent, admin(http.MethodDelete, "/tools/orders.lookup", nil).Status)
	require.Empty(t, registryListed(t, env, domain))
}
