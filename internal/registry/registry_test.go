package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Registering APIs and tools through /company/v1 and the admin API, over
// HTTPS against the registration API's own handler (see env).

// mgOrdersDoc is a tiny valid OpenAPI 3.0 description.
const mgOrdersDoc = `{"openapi":"3.0.3","info":{"title":"Orders","version":"1"},` +
	`"paths":{"/orders":{"get":{"responses":{"200":{"description":"ok"}}}}}}`

// mgOrdersYAML is another, as YAML.
const mgOrdersYAML = `openapi: 3.0.3
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

// mgSecuredDoc is a description whose GET /orders has the security
// requirements security (JSON), beside a GET /status that allows
// signed-out calls.
func mgSecuredDoc(security string) json.RawMessage {
	return json.RawMessage(`{"openapi":"3.0.3","info":{"title":"Orders","version":"1"},"components":{"securitySchemes":{` +
		`"oauth":{"type":"oauth2","flows":{"clientCredentials":{"tokenUrl":"https://auth.example.com/token",` +
		`"scopes":{"orders:read":"Read","orders:write":"Write","orders:delete":"Delete"}}}},` +
		`"key":{"type":"apiKey","in":"header","name":"X-Key"}}},` +
		`"paths":{"/orders":{"get":{"security":` + security + `,"responses":{"200":{"description":"ok"}}}},` +
		`"/status":{"get":{"security":[{}],"responses":{"200":{"description":"ok"}}}}}}`)
}

// mgCompany is a Company of a test with a Company API key.
type mgCompany struct {
	env  *env
	slug string
	key  string
}

// mgCreate creates Company slug, with settings merged into its body, and
// an API key for it.
func mgCreate(t *testing.T, env *env, slug string, settings map[string]any) mgCompany {
	t.Helper()
	env.CreateCompany(t, mgWith(map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Company " + slug, "domain": slug + ".example"},
	}, settings))
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "registry"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return mgCompany{env: env, slug: slug, key: resp.JSON(t)["key"].(string)}
}

// mgWith applies changes to body, a nil value removing the member, and
// returns it.
func mgWith(body, changes map[string]any) map[string]any {
	for k, v := range changes {
		if v == nil {
			delete(body, k)
			continue
		}
		body[k] = v
	}
	return body
}

// api calls the Company API at /company/v1 + path with the Company's key.
func (c mgCompany) api(t *testing.T, method, path string, body any) *peers.Response {
	t.Helper()
	return c.env.Do(t, method, c.env.PublicURL("/company/v1"+path), body, "Authorization", "Bearer "+c.key)
}

// admin calls the admin API at /admin/v1/companies/{slug} + path.
func (c mgCompany) admin(t *testing.T, method, path string, body any) *peers.Response {
	t.Helper()
	return c.env.Admin(t, method, "/admin/v1/companies/"+c.slug+path, body)
}

// company returns the Company as stored.
func (c mgCompany) company(t *testing.T) *tenant.Company {
	t.Helper()
	co, err := c.env.Tenants.Get(context.Background(), c.slug)
	require.NoError(t, err)
	return co
}

// listed returns the registry's entries in the Company's poppy.json.
func (c mgCompany) listed(t *testing.T) []tenant.API {
	t.Helper()
	listed, err := c.env.Listings.Listed(context.Background(), c.company(t))
	require.NoError(t, err)
	return listed
}

// mgList checks that resp is a 200 and returns the entries of its list
// member key.
func mgList(t *testing.T, resp *peers.Response, key string) []map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(resp.Body, &doc), "%s", resp.Body)
	var list []map[string]any
	if raw, ok := doc[key]; ok {
		require.NoError(t, json.Unmarshal(raw, &list), "%s", resp.Body)
	}
	return list
}

func mgJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

// mgDocs starts an HTTPS server on host that the platform can fetch,
// serving each path's body with its Content-Type, and 404 elsewhere. It
// returns its base URL.
func mgDocs(t *testing.T, env *env, host string, files map[string][2]string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", f[0])
		_, _ = w.Write([]byte(f[1]))
	}))
	srv.TLS = env.CA.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	env.Hosts.Add(host)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return "https://" + host + ":" + port
}

// mgRequireInvalid checks that resp is a 400 invalid_request naming
// exactly the fields want, and returns each field's message.
func mgRequireInvalid(t *testing.T, resp *peers.Response, want ...string) map[string]string {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	var body struct {
		Error  string             `json:"error"`
		Fields []httpx.FieldError `json:"fields"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &body))
	require.Equal(t, "invalid_request", body.Error, "%s", resp.Body)
	return mgFieldMessages(t, body.Fields, want, string(resp.Body))
}

// mgRequireInvalidError checks that err is an invalid_request error (a
// 400 once written) naming exactly the fields want, and returns each
// field's message.
func mgRequireInvalidError(t *testing.T, err error, want ...string) map[string]string {
	t.Helper()
	var e *httpx.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, httpx.CodeInvalidRequest, e.Code, "%v", err)
	require.Equal(t, http.StatusBadRequest, e.Status())
	return mgFieldMessages(t, e.Fields, want, err.Error())
}

// mgFieldMessages checks that fields name exactly want and returns each
// field's message.
func mgFieldMessages(t *testing.T, fields []httpx.FieldError, want []string, context string) map[string]string {
	t.Helper()
	got := map[string]string{}
	var names []string
	for _, f := range fields {
		got[f.Field] = f.Message
		names = append(names, f.Field)
	}
	require.ElementsMatch(t, want, names, "%s", context)
	return got
}

// mgBody is body as the handler decodes it.
func mgBody(t *testing.T, body any) map[string]json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// registerAPI registers an API for the Company through the function that
// holds the rules, as PUT /apis/{name} does with body.
func (c mgCompany) registerAPI(t *testing.T, name string, body any) (*registry.API, bool, error) {
	t.Helper()
	return registry.RegisterAPI(c.env.Handler, context.Background(), c.company(t), name, mgBody(t, body), httpx.Precondition{})
}

// registerTool registers a tool for the Company through the function that
// holds the rules, as PUT /tools/{name} does with body.
func (c mgCompany) registerTool(t *testing.T, name string, body any) (*registry.Tool, bool, error) {
	t.Helper()
	return registry.RegisterTool(c.env.Handler, context.Background(), c.company(t), name, mgBody(t, body), httpx.Precondition{})
}

// apiRule is registerAPI's error.
func (c mgCompany) apiRule(t *testing.T, name string, body any) error {
	t.Helper()
	_, _, err := c.registerAPI(t, name, body)
	return err
}

// toolRule is registerTool's error.
func (c mgCompany) toolRule(t *testing.T, name string, body any) error {
	t.Helper()
	_, _, err := c.registerTool(t, name, body)
	return err
}

// mgRefusal is a registration the rules refuse.
type mgRefusal struct {
	name   string // the subtest's
	target string // the API's or tool's name
	body   map[string]any
	fields []string // named invalid
	msg    string   // in the first field's message
}

// mgRequireRefuses registers each case's body under its target with
// register (apiRule or toolRule) in a subtest and checks it is refused.
func mgRequireRefuses(t *testing.T, register func(t *testing.T, name string, body any) error, cases []mgRefusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fields := mgRequireInvalidError(t, register(t, tc.target, tc.body), tc.fields...)
			require.Contains(t, fields[tc.fields[0]], tc.msg)
		})
	}
}

func TestManageAPIsThroughBothSurfaces(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "manage-apis", nil)

	// Created with the description as an object, through /company/v1.
	resp := co.api(t, http.MethodPut, "/apis/orders", map[string]any{
		"origin": "https://orders.manage-apis.example/v1", "description": "Orders, returns and exchanges",
		"openapi": json.RawMessage(mgOrdersDoc),
	})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	created := resp.JSON(t)
	require.Equal(t, "orders", created["name"])
	require.Equal(t, "https://orders.manage-apis.example/v1", created["origin"])
	require.Equal(t, "Orders, returns and exchanges", created["description"])
	require.EqualValues(t, registry.DefaultTimeoutSeconds, created["timeout_seconds"])
	require.EqualValues(t, registry.DefaultMaxRequestBytes, created["max_request_bytes"])
	require.EqualValues(t, registry.DefaultMaxResponseBytes, created["max_response_bytes"])
	require.NotContains(t, created, "openapi_url")
	doc := created["openapi"].(map[string]any)
	require.Equal(t, "3.0.3", doc["openapi"])
	require.Equal(t, "Orders", doc["info"].(map[string]any)["title"])

	// Replaced with the description as a YAML string, through the admin API.
	resp = co.admin(t, http.MethodPut, "/apis/orders", map[string]any{
		"origin": "https://orders.manage-apis.example/v2", "description": "Orders",
		"openapi": mgOrdersYAML, "timeout_seconds": 5, "max_request_bytes": 1024, "max_response_bytes": 2048,
	})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	replaced := resp.JSON(t)
	require.Equal(t, "https://orders.manage-apis.example/v2", replaced["origin"])
	require.EqualValues(t, 5, replaced["timeout_seconds"])
	require.EqualValues(t, 1024, replaced["max_request_bytes"])
	require.EqualValues(t, 2048, replaced["max_response_bytes"])
	require.Equal(t, created["created_at"], replaced["created_at"])
	doc = replaced["openapi"].(map[string]any)
	require.Equal(t, "Orders v2", doc["info"].(map[string]any)["title"])
	require.Contains(t, doc["paths"], "/orders/{id}")

	// Read back through either surface, with the description, as the
	// replacement answered.
	replacedBody := resp.Body
	for _, get := range []func(*testing.T, string, string, any) *peers.Response{co.api, co.admin} {
		resp = get(t, http.MethodGet, "/apis/orders", nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Equal(t, string(replacedBody), string(resp.Body))
	}

	// Registered by URL: fetched once, from a YAML file.
	docs := mgDocs(t, env, "docs.manage-apis.test", map[string][2]string{
		"/catalog.yaml": {"application/yaml", mgOrdersYAML},
		"/page.html":    {"text/html", "<html></html>"},
	})
	resp = co.api(t, http.MethodPut, "/apis/catalog", map[string]any{
		"origin": "https://catalog.manage-apis.example", "openapi_url": docs + "/catalog.yaml",
	})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	catalog := resp.JSON(t)
	require.Equal(t, docs+"/catalog.yaml", catalog["openapi_url"])
	require.Equal(t, "Orders v2", catalog["openapi"].(map[string]any)["info"].(map[string]any)["title"])

	// A URL that does not answer with a description is the request's fault.
	resp = co.api(t, http.MethodPut, "/apis/broken", map[string]any{
		"origin": "https://broken.manage-apis.example", "openapi_url": docs + "/missing.json",
	})
	msg := mgRequireInvalid(t, resp, "openapi_url")["openapi_url"]
	require.Contains(t, msg, "could not be fetched")
	require.Contains(t, msg, "404")
	resp = co.api(t, http.MethodPut, "/apis/broken", map[string]any{
		"origin": "https://broken.manage-apis.example", "openapi_url": docs + "/page.html",
	})
	require.Contains(t, mgRequireInvalid(t, resp, "openapi_url")["openapi_url"], "content type")
	require.Equal(t, http.StatusNotFound, co.api(t, http.MethodGet, "/apis/broken", nil).Status)

	// Lists leave the documents out.
	resp = co.api(t, http.MethodGet, "/apis", nil)
	list := mgList(t, resp, "apis")
	require.Len(t, list, 2)
	require.Equal(t, "catalog", list[0]["name"])
	require.Equal(t, "orders", list[1]["name"])
	for _, a := range list {
		require.NotContains(t, a, "openapi")
		require.Contains(t, a, "origin")
	}
	require.Equal(t, resp.Body, co.admin(t, http.MethodGet, "/apis", nil).Body)

	// poppy.json lists each API by the description the gateway serves
	// (internal/platform serves both).
	base := env.PublicURL("/t/" + co.slug)
	require.ElementsMatch(t, []tenant.API{
		{Type: "openapi", URL: base + "/openapi/catalog.json"},
		{Type: "openapi", URL: base + "/openapi/orders.json", Description: "Orders"},
	}, co.listed(t))

	// Deleted through either surface.
	resp = co.api(t, http.MethodDelete, "/apis/orders", nil)
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	require.Empty(t, resp.Body)
	for _, path := range []string{"/apis/orders", "/apis/no-such-api", "/apis/bad.name"} {
		resp = co.api(t, http.MethodGet, path, nil)
		require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
		require.Equal(t, "not_found", resp.JSON(t)["error"])
		resp = co.admin(t, http.MethodDelete, path, nil)
		require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
		require.Equal(t, "not_found", resp.JSON(t)["error"])
	}
	require.Equal(t, http.StatusNoContent, co.admin(t, http.MethodDelete, "/apis/catalog", nil).Status)
	resp = co.api(t, http.MethodGet, "/apis", nil)
	require.JSONEq(t, `{"apis":[]}`, string(resp.Body))
	require.Empty(t, co.listed(t))
}

func TestManageToolsThroughBothSurfaces(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "manage-tools", map[string]any{"auth": map[string]any{"scopes": map[string]any{
		"orders:read": "See your orders", "orders:write": "Change your orders",
	}}})

	input := mgJSON(t, `{"type":"object","properties":{"id":{"type":"string","pattern":"^ord_"}},"required":["id"],
		"$defs":{"status":{"enum":["open","shipped"]}}}`)
	output := mgJSON(t, `{"type":"object","properties":{"status":{"$ref":"#/$defs/status"}},
		"$defs":{"status":{"enum":["open","shipped"]}}}`)
	resp := co.api(t, http.MethodPut, "/tools/orders.lookup", map[string]any{
		"title": "Look up an order", "description": "Finds an order by its ID.\nReturns its status.",
		"input_schema": input, "output_schema": output, "annotations": map[string]any{"readOnlyHint": true},
		"scopes": []string{"orders:read"}, "url": "https://tools.manage-tools.example/lookup?v=1",
	})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	created := resp.JSON(t)
	require.Equal(t, "orders.lookup", created["name"])
	require.Equal(t, "Look up an order", created["title"])
	require.Equal(t, "Finds an order by its ID.\nReturns its status.", created["description"])
	require.Equal(t, input, created["input_schema"])
	require.Equal(t, output, created["output_schema"])
	require.Equal(t, map[string]any{"readOnlyHint": true}, created["annotations"])
	require.Equal(t, []any{"orders:read"}, created["scopes"])
	require.Equal(t, "https://tools.manage-tools.example/lookup?v=1", created["url"])
	require.EqualValues(t, registry.DefaultTimeoutSeconds, created["timeout_seconds"])

	// Replaced through the admin API: what is left out is gone.
	resp = co.admin(t, http.MethodPut, "/tools/orders.lookup", map[string]any{
		"description": "Finds an order.", "input_schema": map[string]any{"type": "object"},
		"url": "https://tools.manage-tools.example/lookup", "timeout_seconds": 10,
	})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	replaced := resp.JSON(t)
	require.Equal(t, created["created_at"], replaced["created_at"])
	require.NotContains(t, replaced, "title")
	require.NotContains(t, replaced, "output_schema")
	require.NotContains(t, replaced, "annotations")
	require.Equal(t, []any{}, replaced["scopes"])
	require.EqualValues(t, 10, replaced["timeout_seconds"])

	resp = co.api(t, http.MethodPut, "/tools/orders_cancel-2", map[string]any{
		"description": "Cancels an order.", "input_schema": input, "scopes": []string{"orders:read", "orders:write"},
		"url": "https://tools.manage-tools.example/cancel",
	})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

	for _, get := range []func(*testing.T, string, string, any) *peers.Response{co.api, co.admin} {
		resp = get(t, http.MethodGet, "/tools/orders.lookup", nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Equal(t, replaced, resp.JSON(t))
		list := mgList(t, get(t, http.MethodGet, "/tools", nil), "tools")
		require.Len(t, list, 2)
		require.Equal(t, "orders.lookup", list[0]["name"])
		require.Equal(t, "orders_cancel-2", list[1]["name"])
		require.Equal(t, []any{"orders:read", "orders:write"}, list[1]["scopes"])
	}

	// A registered tool puts the hosted MCP server in poppy.json.
	require.Equal(t, []tenant.API{{Type: "mcp", URL: env.PublicURL("/t/" + co.slug + "/mcp")}}, co.listed(t))

	require.Equal(t, http.StatusNoContent, co.api(t, http.MethodDelete, "/tools/orders.lookup", nil).Status)
	require.Equal(t, http.StatusNoContent, co.admin(t, http.MethodDelete, "/tools/orders_cancel-2", nil).Status)
	for _, path := range []string{"/tools/orders.lookup", "/tools/no-such-tool"} {
		resp = co.api(t, http.MethodGet, path, nil)
		require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
		require.Equal(t, "not_found", resp.JSON(t)["error"])
		resp = co.api(t, http.MethodDelete, path, nil)
		require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
	}
	require.JSONEq(t, `{"tools":[]}`, string(co.admin(t, http.MethodGet, "/tools", nil).Body))
	require.Empty(t, co.listed(t))
}

// An API's fields are checked by the function that holds the rules; the
// registration API answers its refusals as 400 invalid_request, and
// refuses bodies it cannot decode.
func TestManageRefusesInvalidAPIs(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "manage-bad-apis", nil)
	good := func(changes map[string]any) map[string]any {
		return mgWith(map[string]any{"origin": "https://orders.example.com", "openapi": json.RawMessage(mgOrdersDoc)}, changes)
	}
	allWrong := map[string]any{"origin": "ftp://x", "description": "\x01", "timeout_seconds": -1,
		"max_request_bytes": "big", "max_response_bytes": 0, "max_responce_bytes": 1}
	allWrongFields := []string{"name", "origin", "description", "openapi", "timeout_seconds", "max_request_bytes",
		"max_response_bytes", "max_responce_bytes"}
	mgRequireRefuses(t, co.apiRule, []mgRefusal{
		{"name with a dot", "orders.v1", good(nil), []string{"name"}, "letters, digits"},
		{"name too long", strings.Repeat("a", 65), good(nil), []string{"name"}, "1 to 64"},
		{"no origin", "orders", good(map[string]any{"origin": nil}), []string{"origin"}, "required"},
		{"origin not a string", "orders", good(map[string]any{"origin": 42}), []string{"origin"}, "string"},
		{"origin over http", "orders", good(map[string]any{"origin": "http://orders.example.com"}), []string{"origin"}, "https"},
		{"origin without host", "orders", good(map[string]any{"origin": "https:///v1"}), []string{"origin"}, "host"},
		{"origin relative", "orders", good(map[string]any{"origin": "/v1"}), []string{"origin"}, "https"},
		{"origin with user info", "orders", good(map[string]any{"origin": "https://me:pw@orders.example.com"}), []string{"origin"}, "user info"},
		{"origin with fragment", "orders", good(map[string]any{"origin": "https://orders.example.com/#x"}), []string{"origin"}, "fragment"},
		{"origin with query", "orders", good(map[string]any{"origin": "https://orders.example.com/?key=1"}), []string{"origin"}, "query"},
		{"origin with empty query", "orders", good(map[string]any{"origin": "https://orders.example.com/?"}), []string{"origin"}, "query"},
		{"origin in shorthand IPv4", "orders", good(map[string]any{"origin": "https://127.1/"}), []string{"origin"}, "standard form"},
		{"origin too long", "orders", good(map[string]any{"origin": "https://orders.example.com/" + strings.Repeat("a", 2030)}), []string{"origin"}, "2048"},
		{"description too long", "orders", good(map[string]any{"description": strings.Repeat("é", 1001)}), []string{"description"}, "1000"},
		{"description with NUL", "orders", good(map[string]any{"description": "Orders\x00"}), []string{"description"}, "control characters"},
		{"description not a string", "orders", good(map[string]any{"description": []string{"Orders"}}), []string{"description"}, "string"},
		{"no description document", "orders", good(map[string]any{"openapi": nil}), []string{"openapi"}, "required"},
		{"both document and URL", "orders", good(map[string]any{"openapi_url": "https://docs.example.com/openapi.json"}), []string{"openapi"}, "either"},
		{"document a number", "orders", good(map[string]any{"openapi": 3}), []string{"openapi"}, "JSON object"},
		{"document an empty string", "orders", good(map[string]any{"openapi": ""}), []string{"openapi"}, "JSON object"},
		{"document not YAML", "orders", good(map[string]any{"openapi": "openapi: [3.0"}), []string{"openapi"}, "OpenAPI"},
		{"document Swagger 2", "orders", good(map[string]any{"openapi": map[string]any{
			"swagger": "2.0", "info": map[string]any{"title": "Orders", "version": "1"}, "paths": map[string]any{}}}),
			[]string{"openapi"}, "OpenAPI"},
		{"document without paths", "orders", good(map[string]any{"openapi": map[string]any{
			"openapi": "3.0.3", "info": map[string]any{"title": "Orders", "version": "1"}, "paths": map[string]any{}}}),
			[]string{"openapi"}, "no paths"},
		{"document URL over http", "orders", good(map[string]any{"openapi": nil, "openapi_url": "http://docs.example.com/openapi.json"}),
			[]string{"openapi_url"}, "https"},
		{"document URL not a string", "orders", good(map[string]any{"openapi": nil, "openapi_url": true}), []string{"openapi_url"}, "string"},
		{"timeout zero", "orders", good(map[string]any{"timeout_seconds": 0}), []string{"timeout_seconds"}, "from 1 to 120"},
		{"timeout too long", "orders", good(map[string]any{"timeout_seconds": 121}), []string{"timeout_seconds"}, "from 1 to 120"},
		{"timeout a string", "orders", good(map[string]any{"timeout_seconds": "30"}), []string{"timeout_seconds"}, "whole number"},
		{"timeout a fraction", "orders", good(map[string]any{"timeout_seconds": 1.5}), []string{"timeout_seconds"}, "whole number"},
		{"request bytes zero", "orders", good(map[string]any{"max_request_bytes": 0}), []string{"max_request_bytes"}, "from 1"},
		{"request bytes too many", "orders", good(map[string]any{"max_request_bytes": registry.MaxRequestBytesLimit + 1}),
			[]string{"max_request_bytes"}, fmt.Sprint(registry.MaxRequestBytesLimit)},
		{"response bytes too many", "orders", good(map[string]any{"max_response_bytes": registry.MaxResponseBytesLimit + 1}),
			[]string{"max_response_bytes"}, fmt.Sprint(registry.MaxResponseBytesLimit)},
		{"member misspelt", "orders", good(map[string]any{"timeout_second": 5}), []string{"timeout_second"}, "is not a known member"},
		{"members of the answer", "orders", good(map[string]any{"name": "orders", "created_at": "2025-01-01T00:00:00Z"}),
			[]string{"created_at", "name"}, "is not a known member"},
		{"member misspelt beside the document", "orders", good(map[string]any{"openapi": nil, "openAPI": json.RawMessage(mgOrdersDoc)}),
			[]string{"openapi", "openAPI"}, "required"},
		{"scope not the Company's", "orders", good(map[string]any{"openapi": mgSecuredDoc(`[{"oauth":["orders:read"]}]`)}),
			[]string{"openapi"}, `needs the scope "orders:read", which is not one of the Company's scopes: define it in auth.scopes first`},
		{"scopes not the Company's", "orders", good(map[string]any{
			"openapi": mgSecuredDoc(`[{"oauth":["orders:write","orders:read"]},{"oauth":["orders:delete"]}]`)}),
			[]string{"openapi"}, `needs the scopes "orders:delete", "orders:read" and "orders:write", which are not among the Company's scopes`},
		{"everything wrong at once", "a.b", allWrong, allWrongFields, ""},
	})
	t.Run("refused over HTTPS", func(t *testing.T) {
		mgRequireInvalid(t, co.api(t, http.MethodPut, "/apis/a.b", allWrong), allWrongFields...)
		mgRequireInvalid(t, co.admin(t, http.MethodPut, "/apis/a.b", allWrong), allWrongFields...)
	})
	t.Run("description with NUL", func(t *testing.T) {
		// The body's decoder refuses it, naming the member.
		fields := mgRequireInvalid(t, co.api(t, http.MethodPut, "/apis/orders", good(map[string]any{"description": "Orders\x00"})),
			"description")
		require.Contains(t, fields["description"], "NUL")
	})
	t.Run("body not an object", func(t *testing.T) {
		resp := co.api(t, http.MethodPut, "/apis/orders", []any{"origin"})
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
		require.Equal(t, "invalid_request", resp.JSON(t)["error"])
	})
	t.Run("body too large", func(t *testing.T) {
		resp := co.api(t, http.MethodPut, "/apis/orders", good(map[string]any{
			"description": strings.Repeat("a", registry.MaxOpenAPIBytes+64<<10)}))
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.Status, "%s", resp.Body)
	})
	t.Run("replacement refused", func(t *testing.T) {
		resp := co.api(t, http.MethodPut, "/apis/kept", good(map[string]any{"description": "Kept"}))
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		before := co.api(t, http.MethodGet, "/apis/kept", nil).Body
		mgRequireInvalid(t, co.api(t, http.MethodPut, "/apis/kept", good(map[string]any{"origin": "http://x.example"})), "origin")
		require.Equal(t, before, co.api(t, http.MethodGet, "/apis/kept", nil).Body)
		require.Equal(t, http.StatusNoContent, co.api(t, http.MethodDelete, "/apis/kept", nil).Status)
	})

	// Nothing was stored.
	require.JSONEq(t, `{"apis":[]}`, string(co.api(t, http.MethodGet, "/apis", nil).Body))
	require.Empty(t, co.listed(t))
}

// An API's description may need only the scopes the Company defines, and
// without an issuer only signed-out calls.
func TestManageChecksAPIScopes(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	api := func(security string) map[string]any {
		return map[string]any{"origin": "https://orders.example.com", "openapi": mgSecuredDoc(security)}
	}

	scoped := mgCreate(t, env, "manage-scoped-apis", map[string]any{"auth": map[string]any{"scopes": map[string]any{
		"orders:read": "See your orders", "orders:write": "Change your orders",
	}}})
	resp := scoped.api(t, http.MethodPut, "/apis/orders", api(`[{"oauth":["orders:read","orders:write"]},{"key":[]}]`))
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	before := scoped.api(t, http.MethodGet, "/apis/orders", nil).Body
	msg := mgRequireInvalid(t, scoped.admin(t, http.MethodPut, "/apis/orders",
		api(`[{"oauth":["orders:read","orders:delete"]}]`)), "openapi")["openapi"]
	require.Equal(t, msg, mgRequireInvalidError(t, scoped.apiRule(t, "orders",
		api(`[{"oauth":["orders:read","orders:delete"]}]`)), "openapi")["openapi"])
	require.Equal(t, `needs the scope "orders:delete", which is not one of the Company's scopes: define it in auth.scopes first`, msg)
	// A description fetched by URL is refused on openapi_url.
	docs := mgDocs(t, env, "docs.manage-scoped-apis.test", map[string][2]string{
		"/openapi.json": {"application/json", string(mgSecuredDoc(`[{"oauth":["orders:delete"]}]`))},
	})
	msg = mgRequireInvalidError(t, scoped.apiRule(t, "orders", map[string]any{
		"origin": "https://orders.example.com", "openapi_url": docs + "/openapi.json"}), "openapi_url")["openapi_url"]
	require.Contains(t, msg, `"orders:delete"`)
	require.Contains(t, msg, "auth.scopes")
	require.Equal(t, before, scoped.api(t, http.MethodGet, "/apis/orders", nil).Body)

	// Without an issuer there is no sign-in: only operations that allow
	// signed-out calls can be served.
	plain := mgCreate(t, env, "manage-plain-apis", map[string]any{"auth": map[string]any{"issuer": false}})
	for _, security := range []string{`[{"key":[]}]`, `[{"oauth":["orders:read"]}]`} {
		msg = mgRequireInvalidError(t, plain.apiRule(t, "orders", api(security)), "openapi")["openapi"]
		require.Contains(t, msg, "this Company has no issuer, so only operations that allow signed-out calls can be served")
		require.Contains(t, msg, "GET /orders needs a sign-in")
		require.NotContains(t, msg, "/status")
	}
	msg = mgRequireInvalidError(t, plain.apiRule(t, "orders", map[string]any{
		"origin": "https://orders.example.com", "openapi": mgOrdersYAML + "security:\n  - key: []\n" +
			"components:\n  securitySchemes:\n    key: {type: apiKey, in: header, name: X-Key}\n"}), "openapi")["openapi"]
	require.Contains(t, msg, "GET /orders and GET /orders/{id} need a sign-in")
	require.JSONEq(t, `{"apis":[]}`, string(plain.api(t, http.MethodGet, "/apis", nil).Body))
	resp = plain.api(t, http.MethodPut, "/apis/orders", api(`[{},{"oauth":["orders:read"]}]`))
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	resp = plain.api(t, http.MethodPut, "/apis/orders", map[string]any{
		"origin": "https://orders.example.com", "openapi": json.RawMessage(mgOrdersDoc)})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// A tool's fields are checked by the function that holds the rules; the
// registration API answers its refusals as 400 invalid_request, and
// refuses bodies too large.
func TestManageRefusesInvalidTools(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "manage-bad-tools", map[string]any{"auth": map[string]any{"scopes": map[string]any{
		"orders:read": "See your orders", "orders:write": "Change your orders",
	}}})
	good := func(changes map[string]any) map[string]any {
		return mgWith(map[string]any{
			"description": "Finds an order.", "url": "https://tools.example.com/lookup",
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}},
		}, changes)
	}
	schema := func(s string) map[string]any { return map[string]any{"input_schema": json.RawMessage(s)} }
	output := func(s string) map[string]any { return map[string]any{"output_schema": json.RawMessage(s)} }
	allWrong := map[string]any{"title": 7, "input_schema": 7, "output_schema": 7, "annotations": 7,
		"scopes": []string{"nope"}, "url": "x", "timeout_seconds": 0, "scope": "nope"}
	allWrongFields := []string{"name", "title", "description", "input_schema", "output_schema", "annotations", "scopes[0]", "url",
		"timeout_seconds", "scope"}
	many := make([]string, registry.MaxToolScopes+1)
	for i := range many {
		many[i] = "orders:read"
	}
	mgRequireRefuses(t, co.toolRule, []mgRefusal{
		{"name with a colon", "orders:lookup", good(nil), []string{"name"}, "MCP tool names"},
		{"name too long", strings.Repeat("t", 65), good(nil), []string{"name"}, "1 to 64"},
		{"no description", "lookup", good(map[string]any{"description": nil}), []string{"description"}, "required"},
		{"description too long", "lookup", good(map[string]any{"description": strings.Repeat("d", 1001)}), []string{"description"}, "1000"},
		{"description with NUL", "lookup", good(map[string]any{"description": "a\x00b"}), []string{"description"}, "control characters"},
		{"title too long", "lookup", good(map[string]any{"title": strings.Repeat("t", 201)}), []string{"title"}, "200"},
		{"title on two lines", "lookup", good(map[string]any{"title": "Look\nup"}), []string{"title"}, "control"},
		{"no input schema", "lookup", good(map[string]any{"input_schema": nil}), []string{"input_schema"}, "required"},
		{"input schema an array", "lookup", good(schema(`[{"type":"object"}]`)), []string{"input_schema"}, "object"},
		{"input schema a string", "lookup", good(schema(`"object"`)), []string{"input_schema"}, "object"},
		{"input schema without type", "lookup", good(schema(`{"properties":{}}`)), []string{"input_schema"}, `"type": "object"`},
		{"input schema of strings", "lookup", good(schema(`{"type":"string"}`)), []string{"input_schema"}, `"type": "object"`},
		{"input schema with a type list", "lookup", good(schema(`{"type":["object"]}`)), []string{"input_schema"}, `"type": "object"`},
		{"input schema with an unknown type", "lookup", good(schema(`{"type":"object","properties":{"id":{"type":"strin"}}}`)),
			[]string{"input_schema"}, "/properties/id/type"},
		{"input schema with bad required", "lookup", good(schema(`{"type":"object","required":"id"}`)),
			[]string{"input_schema"}, "/required"},
		{"input schema with a bad pattern", "lookup", good(schema(`{"type":"object","properties":{"id":{"pattern":"(["}}}`)),
			[]string{"input_schema"}, "regex"},
		{"input schema with a dangling ref", "lookup", good(schema(`{"type":"object","properties":{"id":{"$ref":"#/$defs/no"}}}`)),
			[]string{"input_schema"}, `"#/$defs/no" not found`},
		{"input schema with a remote ref", "lookup", good(schema(`{"type":"object","properties":{"id":{"$ref":"https://schemas.example.com/id.json"}}}`)),
			[]string{"input_schema"}, "https://schemas.example.com/id.json"},
		{"input schema with a file ref", "lookup", good(schema(`{"type":"object","$ref":"file:///etc/passwd"}`)),
			[]string{"input_schema"}, "does not load"},
		{"input schema of an unknown draft", "lookup", good(schema(`{"$schema":"https://schemas.example.com/mine","type":"object"}`)),
			[]string{"input_schema"}, "JSON Schema"},
		{"input schema the SDK refuses", "lookup", good(schema(`{"type":"object","properties":{"a":{"type":"object","x-mcp-header":"X-A"}}}`)),
			[]string{"input_schema"}, "is refused by the MCP server: invalid parameter header annotations: property \"a\": x-mcp-header"},
		{"output schema of strings", "lookup", good(output(`{"type":"string"}`)), []string{"output_schema"}, `"type": "object"`},
		{"output schema invalid", "lookup", good(output(`{"type":"object","minProperties":-1}`)), []string{"output_schema"}, "minProperties"},
		{"annotations an array", "lookup", good(map[string]any{"annotations": []any{}}), []string{"annotations"}, "object"},
		{"annotations of the wrong type", "lookup", good(map[string]any{"annotations": map[string]any{"readOnlyHint": "yes"}}),
			[]string{"annotations"}, "MCP"},
		{"scopes a string", "lookup", good(map[string]any{"scopes": "orders:read"}), []string{"scopes"}, "array"},
		{"scopes of numbers", "lookup", good(map[string]any{"scopes": []int{1}}), []string{"scopes"}, "array"},
		{"scope with a space", "lookup", good(map[string]any{"scopes": []string{"orders read"}}), []string{"scopes[0]"}, "OAuth scope"},
		{"scope unknown", "lookup", good(map[string]any{"scopes": []string{"orders:read", "orders:delete"}}),
			[]string{"scopes[1]"}, `"orders:delete" is not one of the Company's scopes`},
		{"scope twice", "lookup", good(map[string]any{"scopes": []string{"orders:read", "orders:read"}}), []string{"scopes[1]"}, "twice"},
		{"too many scopes", "lookup", good(map[string]any{"scopes": many}), []string{"scopes"}, "at most 50"},
		{"no url", "lookup", good(map[string]any{"url": nil}), []string{"url"}, "required"},
		{"url over http", "lookup", good(map[string]any{"url": "http://tools.example.com/lookup"}), []string{"url"}, "https"},
		{"url with fragment", "lookup", good(map[string]any{"url": "https://tools.example.com/lookup#x"}), []string{"url"}, "fragment"},
		{"url with user info", "lookup", good(map[string]any{"url": "https://u@tools.example.com/lookup"}), []string{"url"}, "user info"},
		{"timeout too long", "lookup", good(map[string]any{"timeout_seconds": 1000}), []string{"timeout_seconds"}, "from 1 to 120"},
		{"member misspelt", "lookup", good(map[string]any{"timeout_second": 5}), []string{"timeout_second"}, "is not a known member"},
		{"member in MCP's spelling", "lookup", good(map[string]any{"input_schema": nil, "inputSchema": map[string]any{"type": "object"}}),
			[]string{"input_schema", "inputSchema"}, "required"},
		{"everything wrong at once", "a:b", allWrong, allWrongFields, ""},
	})
	t.Run("refused over HTTPS", func(t *testing.T) {
		mgRequireInvalid(t, co.api(t, http.MethodPut, "/tools/a:b", allWrong), allWrongFields...)
		mgRequireInvalid(t, co.admin(t, http.MethodPut, "/tools/a:b", allWrong), allWrongFields...)
	})
	t.Run("description with NUL", func(t *testing.T) {
		// The body's decoder refuses it, naming the member.
		fields := mgRequireInvalid(t, co.api(t, http.MethodPut, "/tools/lookup", good(map[string]any{"description": "a\x00b"})),
			"description")
		require.Contains(t, fields["description"], "NUL")
	})
	t.Run("body too large", func(t *testing.T) {
		resp := co.api(t, http.MethodPut, "/tools/lookup", good(map[string]any{"title": strings.Repeat("a", 256<<10)}))
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.Status, "%s", resp.Body)
	})

	// Nothing was stored.
	require.JSONEq(t, `{"tools":[]}`, string(co.api(t, http.MethodGet, "/tools", nil).Body))
	require.Empty(t, co.listed(t))

	// A Company without an issuer offers no sign-in, so no scopes.
	plain := mgCreate(t, env, "manage-bad-tools-plain", map[string]any{"auth": map[string]any{"issuer": false}})
	fields := mgRequireInvalidError(t, plain.toolRule(t, "lookup", good(map[string]any{"scopes": []string{"orders:read"}})), "scopes[0]")
	require.Contains(t, fields["scopes[0]"], "needs an issuer")
	_, created, err := plain.registerTool(t, "lookup", good(nil))
	require.NoError(t, err)
	require.True(t, created)
}

func TestManageKeepsCompaniesApart(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	acme := mgCreate(t, env, "manage-acme", nil)
	rival := mgCreate(t, env, "manage-rival", nil)

	resp := acme.api(t, http.MethodPut, "/apis/orders", map[string]any{
		"origin": "https://orders.acme.example", "description": "Acme orders", "openapi": json.RawMessage(mgOrdersDoc)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	resp = acme.api(t, http.MethodPut, "/tools/lookup", map[string]any{
		"description": "Acme lookup", "input_schema": map[string]any{"type": "object"}, "url": "https://tools.acme.example/lookup"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	apiBefore := acme.api(t, http.MethodGet, "/apis/orders", nil).Body
	toolBefore := acme.api(t, http.MethodGet, "/tools/lookup", nil).Body

	for _, call := range []func(*testing.T, string, string, any) *peers.Response{rival.api, rival.admin} {
		for _, path := range []string{"/apis/orders", "/tools/lookup"} {
			resp = call(t, http.MethodGet, path, nil)
			require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
			resp = call(t, http.MethodDelete, path, nil)
			require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
		}
		require.JSONEq(t, `{"apis":[]}`, string(call(t, http.MethodGet, "/apis", nil).Body))
		require.JSONEq(t, `{"tools":[]}`, string(call(t, http.MethodGet, "/tools", nil).Body))
	}
	require.Empty(t, rival.listed(t))

	// The rival's own registrations of the same names are its own.
	resp = rival.api(t, http.MethodPut, "/apis/orders", map[string]any{
		"origin": "https://orders.rival.example", "openapi": json.RawMessage(mgOrdersDoc)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	resp = rival.api(t, http.MethodPut, "/tools/lookup", map[string]any{
		"description": "Rival lookup", "input_schema": map[string]any{"type": "object"}, "url": "https://tools.rival.example/lookup"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, http.StatusNoContent, rival.api(t, http.MethodDelete, "/apis/orders", nil).Status)
	require.Equal(t, http.StatusNoContent, rival.api(t, http.MethodDelete, "/tools/lookup", nil).Status)

	require.Equal(t, apiBefore, acme.api(t, http.MethodGet, "/apis/orders", nil).Body)
	require.Equal(t, toolBefore, acme.api(t, http.MethodGet, "/tools/lookup", nil).Body)
	require.Len(t, acme.listed(t), 2)
}

func TestManageLimitsRegistrationsPerCompany(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "manage-full", nil)
	ctx := context.Background()
	id := co.company(t).ID
	for i := range registry.MaxAPIs {
		_, err := env.Store.PutAPI(ctx, id, &registry.API{Name: fmt.Sprintf("api-%02d", i), Origin: "https://orders.example.com",
			OpenAPI: json.RawMessage(mgOrdersDoc), TimeoutSeconds: 30, MaxRequestBytes: 1, MaxResponseBytes: 1}, time.Now())
		require.NoError(t, err)
	}
	for i := range registry.MaxTools {
		_, err := env.Store.PutTool(ctx, id, &registry.Tool{Name: fmt.Sprintf("tool-%03d", i), Description: "A tool",
			InputSchema: json.RawMessage(`{"type":"object"}`), URL: "https://tools.example.com/x", TimeoutSeconds: 30}, time.Now())
		require.NoError(t, err)
	}

	api := map[string]any{"origin": "https://orders.example.com", "openapi": json.RawMessage(mgOrdersDoc)}
	resp := co.api(t, http.MethodPut, "/apis/one-too-many", api)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	require.Equal(t, "invalid_request", body["error"])
	require.Contains(t, body["error_description"], "at most 50 APIs")
	require.Equal(t, http.StatusNotFound, co.api(t, http.MethodGet, "/apis/one-too-many", nil).Status)
	// Replacing one is not adding one.
	resp = co.api(t, http.MethodPut, "/apis/api-00", api)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	tool := map[string]any{"description": "A tool", "input_schema": map[string]any{"type": "object"}, "url": "https://tools.example.com/x"}
	resp = co.admin(t, http.MethodPut, "/tools/one-too-many", tool)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.JSON(t)["error_description"], "at most 200 tools")
	require.Equal(t, http.StatusNotFound, co.api(t, http.MethodGet, "/tools/one-too-many", nil).Status)
	resp = co.admin(t, http.MethodPut, "/tools/tool-000", tool)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	// Once one is deleted there is room again.
	require.Equal(t, http.StatusNoContent, co.api(t, http.MethodDelete, "/apis/api-01", nil).Status)
	resp = co.api(t, http.MethodPut, "/apis/one-too-many", api)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
}

// Outside development, origins, tool URLs and description URLs on
// addresses the platform would refuse to connect to are refused when
// registered; with AllowPrivate (development and tests) they are
// accepted. The test's env allows them (its peers listen on loopback),
// so this drives the rules with handlers of its own.
func TestManageRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "manage-private", nil).company(t)
	docs := mgDocs(t, env, "docs.manage-private.test", map[string][2]string{"/openapi.json": {"application/json", mgOrdersDoc}})
	ctx := context.Background()

	handler := func(allowPrivate bool) *registry.Handler {
		return registry.NewHandler(registry.Options{
			Store: env.Store,
			// Public fetches only, resolving the test's names to loopback.
			Fetch:        safehttp.New(safehttp.Options{RootCAs: env.CA.Pool(), Resolver: env.Hosts, AllowPrivate: allowPrivate}),
			AllowPrivate: allowPrivate,
		})
	}
	public, dev := handler(false), handler(true)
	api := func(h *registry.Handler, body map[string]any) error {
		_, _, err := registry.RegisterAPI(h, ctx, co, "orders", mgBody(t, body), httpx.Precondition{})
		return err
	}
	tool := func(h *registry.Handler, url string) error {
		_, _, err := registry.RegisterTool(h, ctx, co, "lookup", mgBody(t, map[string]any{
			"description": "Lookup", "input_schema": map[string]any{"type": "object"}, "url": url}), httpx.Precondition{})
		return err
	}

	// The dialler's ranges (safehttp): the first line were refused before;
	// the rest were accepted and then refused at every call.
	for _, origin := range []string{
		"https://localhost/v1", "https://LOCALHOST./v1", "https://orders.localhost/v1", "https://127.0.0.1/v1",
		"https://127.0.0.1:8443/v1", "https://[::1]/v1", "https://10.1.2.3/v1", "https://192.168.0.1/v1",
		"https://172.16.0.1/v1", "https://169.254.169.254/latest", "https://0.0.0.0/v1", "https://[::]/v1",
		"https://[fe80::1]/v1", "https://[fc00::1]/v1", "https://[::ffff:127.0.0.1]/v1",

		"https://100.64.0.1/v1", "https://100.127.255.254/v1", "https://192.0.2.1/v1", "https://198.51.100.1/v1",
		"https://203.0.113.7/v1", "https://0.1.2.3/v1", "https://240.0.0.1/v1", "https://255.255.255.255/v1",
		"https://192.0.0.1/v1", "https://192.88.99.1/v1", "https://198.18.0.1/v1", "https://198.19.255.254/v1",
		"https://[::ffff:100.64.0.1]/v1", "https://[2001:db8::1]/v1", "https://[3fff::1]/v1", "https://[2002:7f00:1::1]/v1",
		"https://[64:ff9b::7f00:1]/v1", "https://[fec0::1]/v1", "https://[100::1]/v1", "https://[2001::1]/v1",
	} {
		fields := mgRequireInvalidError(t, api(public, map[string]any{"origin": origin, "openapi": json.RawMessage(mgOrdersDoc)}), "origin")
		require.Contains(t, fields["origin"], "not public", origin)
		mgRequireInvalidError(t, tool(public, origin), "url")
		mgRequireInvalidError(t, api(public, map[string]any{
			"origin": "https://orders.example.com", "openapi_url": origin + "/openapi.json"}), "openapi_url")
	}
	require.Empty(t, mgStoredNames(t, env, co), "nothing stored")

	// With AllowPrivate they are accepted.
	for _, origin := range []string{"https://100.64.0.1/v1", "https://203.0.113.7/v1", "https://127.0.0.1:8443/v1"} {
		require.NoError(t, api(dev, map[string]any{"origin": origin, "openapi": json.RawMessage(mgOrdersDoc)}), origin)
		require.NoError(t, tool(dev, origin), origin)
	}
	require.NoError(t, env.Store.DeleteAPI(ctx, co.ID, "orders"))
	require.NoError(t, env.Store.DeleteTool(ctx, co.ID, "lookup"))

	// A name that resolves to loopback passes the check, but the fetch
	// refuses to connect.
	fields := mgRequireInvalidError(t, api(public, map[string]any{
		"origin": "https://orders.example.com", "openapi_url": docs + "/openapi.json"}), "openapi_url")
	require.Contains(t, fields["openapi_url"], "could not be fetched")
	require.Contains(t, fields["openapi_url"], "not allowed")

	// Public origins are fine.
	require.NoError(t, api(public, map[string]any{"origin": "https://93.184.216.34/v1", "openapi": json.RawMessage(mgOrdersDoc)}))
	require.NoError(t, tool(public, "https://tools.example.com/lookup"))
	require.Equal(t, []string{"api orders", "tool lookup"}, mgStoredNames(t, env, co))
}

// mgStoredNames returns the Company's registrations as stored, as "api
// {name}" and "tool {name}".
func mgStoredNames(t *testing.T, env *env, co *tenant.Company) []string {
	t.Helper()
	apis, err := env.Store.ListAPIs(context.Background(), co.ID)
	require.NoError(t, err)
	tools, err := env.Store.ListTools(context.Background(), co.ID)
	require.NoError(t, err)
	var names []string
	for _, a := range apis {
		names = append(names, "api "+a.Name)
	}
	for _, tl := range tools {
		names = append(names, "tool "+tl.Name)
	}
	return names
}
