package api

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractGateway puts APIs and MCP tools of acme behind the platform and
// calls them: the gateway, the Operations extension, the MCP server.
func contractGateway(t *testing.T, c *contract, f *fixture, acme map[string]any, acmeKey string) {
	t.Run("gateway", func(t *testing.T) {
		g := gatewayAPIs(t, c, f, acmeKey)
		gatewayOperations(t, c, f, acme, acmeKey, g)
		gatewayMCP(t, c, f, acmeKey, g)
	})
}

// gateway is what the gateway test's first section sets up for the other
// two: acme's origin and API, Session and MCP helpers, and alice's tokens.
type gateway struct {
	origin      *peers.Origin
	in          func(sid, token string) func(*http.Request)
	firstField  func(r *peers.Response) string
	mcpPath     string
	mcpMetadata string
	mcpHeaders  map[string]string
	rpc         func(id int, method string, params any) map[string]any
	initialize  map[string]any
	apis        string
	register    map[string]any
	descURL     string
	token       string
	mcpToken    string
}

// gatewayAPIs registers acme's API and calls it through the gateway.
func gatewayAPIs(t *testing.T, c *contract, f *fixture, acmeKey string) *gateway {
	env, issuer, agent, signIn := f.env, f.issuer, f.agent, f.signIn

	// acme puts an API and two MCP tools behind the platform with its
	// API key, and the Personal Agent calls them through the gateway
	// and the hosted MCP server, which forward to a real HTTPS origin
	// that verifies Poppy-Verified. This test sends many requests:
	// acme's address and Session limits are out of the way until it
	// ends.
	c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
		body: `{"rate_limits":{"per_address":1000000,"per_session":1000000}}`})
	origin := env.StartOrigin(t, "origin.test", issuer, issuer)
	// openapi_url below names the platform's own host.
	env.Hosts.Add(testkit.PublicHost)
	in := func(sid, token string) func(*http.Request) {
		return func(req *http.Request) {
			agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: sid, AccessToken: token}, peers.SessionOptions{})
		}
	}
	firstField := func(r *peers.Response) string {
		t.Helper()
		fields, _ := r.JSON(t)["fields"].([]any)
		require.NotEmpty(t, fields, "%s", r.Body)
		return fields[0].(map[string]any)["field"].(string)
	}
	mcpPath, mcpMetadata := "/t/acme/mcp", "/.well-known/oauth-protected-resource/t/acme/mcp"
	mcpHeaders := map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
	rpc := func(id int, method string, params any) map[string]any {
		m := map[string]any{"jsonrpc": "2.0", "method": method}
		if id > 0 {
			m["id"] = id
		}
		if params != nil {
			m["params"] = params
		}
		return m
	}
	initialize := rpc(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "contract", "version": "1"}})

	// No tools yet: no MCP server.
	c.do(t, call{method: get, path: mcpMetadata, want: 404})
	c.do(t, call{method: post, path: mcpPath, session: in("mcp-none", ""), header: mcpHeaders, body: initialize, want: 404})

	// The API, registered with a YAML description (every operation
	// needs orders:read unless it says otherwise), then replaced with
	// the JSON the platform stored and tight limits for the errors
	// below.
	const description = `openapi: 3.1.0
info: {title: Orders, version: '1'}
components:
  securitySchemes:
    oauth:
      type: oauth2
      flows:
        authorizationCode:
          authorizationUrl: https://auth.acme.example/authorize
          tokenUrl: https://auth.acme.example/token
          scopes:
            orders:read: See your orders
            orders:write: Change your orders
security:
  - oauth: [orders:read]
paths:
  /public:
    get: {security: [{}], responses: {'200': {description: OK}}}
    post: {security: [{}], responses: {'200': {description: OK}}}
    put: {security: [{}], responses: {'200': {description: OK}}}
    patch: {security: [{}], responses: {'200': {description: OK}}}
    delete: {security: [{}], responses: {'200': {description: OK}}}
  /orders:
    get: {responses: {'200': {description: OK}}}
    post: {responses: {'200': {description: OK}}}
    put: {responses: {'200': {description: OK}}}
    patch: {responses: {'200': {description: OK}}}
    delete: {responses: {'200': {description: OK}}}
  /changes:
    get: {security: [{oauth: [orders:write]}], responses: {'200': {description: OK}}}
    post: {security: [{oauth: [orders:write]}], responses: {'200': {description: OK}}}
    put: {security: [{oauth: [orders:write]}], responses: {'200': {description: OK}}}
    patch: {security: [{oauth: [orders:write]}], responses: {'200': {description: OK}}}
    delete: {security: [{oauth: [orders:write]}], responses: {'200': {description: OK}}}
  /readonly:
    get: {security: [{}], responses: {'200': {description: OK}}}
  /writeonly:
    post: {security: [{}], responses: {'200': {description: OK}}}
`
	apis, adminAPIs := "/company/v1/apis", "/admin/v1/companies/acme/apis"
	register := map[string]any{"origin": origin.BaseURL(), "description": "Orders and returns", "openapi": description}
	r := c.do(t, call{method: put, path: apis + "/orders", token: acmeKey, body: register, want: 201})
	created := r.JSON(t)
	assert.Equal(t, "orders", created["name"])
	assert.Equal(t, origin.BaseURL(), created["origin"])
	assert.Equal(t, []any{float64(30), float64(1 << 20), float64(10 << 20)},
		[]any{created["timeout_seconds"], created["max_request_bytes"], created["max_response_bytes"]}, "the defaults")
	stored := created["openapi"].(map[string]any)
	assert.Equal(t, "3.1.0", stored["openapi"])
	r = c.do(t, call{method: put, path: apis + "/orders", token: acmeKey, want: 200, body: map[string]any{
		"origin": origin.BaseURL(), "description": "Orders and returns", "openapi": stored,
		"timeout_seconds": 1, "max_request_bytes": 1024, "max_response_bytes": 2048}})
	replaced := r.JSON(t)
	assert.Equal(t, created["created_at"], replaced["created_at"])
	assert.Equal(t, stored, replaced["openapi"])
	l := c.do(t, call{method: get, path: apis, token: acmeKey, want: 200}).JSON(t)["apis"].([]any)
	require.Len(t, l, 1)
	assert.NotContains(t, l[0], "openapi", "lists leave descriptions out")
	assert.Equal(t, replaced, c.do(t, call{method: get, path: apis + "/orders", token: acmeKey, want: 200}).JSON(t))
	assert.Equal(t, l, c.do(t, call{method: get, path: adminAPIs, token: admin, want: 200}).JSON(t)["apis"])
	assert.Equal(t, replaced, c.do(t, call{method: get, path: adminAPIs + "/orders", token: admin, want: 200}).JSON(t))

	// The description as Personal Agents read it: the gateway is its
	// server, and its OAuth flows, one per sign-in acme offers, are acme's
	// issuer.
	descURL := issuer + "/openapi/orders.json"
	r = c.do(t, call{method: get, path: "/t/acme/openapi/orders.json", want: 200})
	published := r.JSON(t)
	assert.Equal(t, []any{map[string]any{"url": issuer + "/api/orders"}}, published["servers"])
	flow := published["components"].(map[string]any)["securitySchemes"].(map[string]any)["oauth"].(map[string]any)["flows"].(map[string]any)
	assert.ElementsMatch(t, []string{"authorizationCode", "x-deviceAuthorization"}, slices.Collect(maps.Keys(flow)))
	assert.Equal(t, issuer+"/oauth/device_authorization", flow["x-deviceAuthorization"].(map[string]any)["deviceAuthorizationUrl"])
	assert.Equal(t, issuer+"/oauth/authorize", flow["authorizationCode"].(map[string]any)["authorizationUrl"])
	assert.Equal(t, issuer+"/oauth/token", flow["authorizationCode"].(map[string]any)["tokenUrl"])
	c.do(t, call{method: get, path: "/t/acme/openapi/nosuch.json", want: 404})

	// An API whose description is fetched once by URL (here, the one
	// just published), by the operator.
	spare := map[string]any{"origin": origin.BaseURL(), "openapi_url": descURL}
	r = c.do(t, call{method: put, path: adminAPIs + "/spare", token: admin, body: spare, want: 201})
	assert.Equal(t, descURL, r.JSON(t)["openapi_url"])
	assert.Equal(t, []any{map[string]any{"url": issuer + "/api/orders"}}, r.JSON(t)["openapi"].(map[string]any)["servers"])
	c.do(t, call{method: put, path: adminAPIs + "/spare", token: admin, body: spare, want: 200})
	// Replacing only the version read: a tag that is not the current
	// one is 412 and changes nothing.
	stale := map[string]string{"If-Match": `"stale"`}
	tag := c.do(t, call{method: get, path: adminAPIs + "/spare", token: admin, want: 200}).Header.Get("ETag")
	require.NotEmpty(t, tag)
	c.do(t, call{method: put, path: adminAPIs + "/spare", token: admin, body: spare, header: stale, want: 412})
	c.do(t, call{method: put, path: apis + "/spare", token: acmeKey, body: spare, header: stale, want: 412})
	r = c.do(t, call{method: put, path: apis + "/spare", token: acmeKey, body: spare, header: map[string]string{"If-Match": tag}, want: 200})
	assert.Equal(t, r.Header.Get("ETag"), c.do(t, call{method: get, path: apis + "/spare", token: acmeKey, want: 200}).Header.Get("ETag"))
	c.do(t, call{method: del, path: adminAPIs + "/spare", token: admin, want: 204})
	c.do(t, call{method: del, path: adminAPIs + "/spare", token: admin, want: 404})
	c.do(t, call{method: get, path: adminAPIs + "/spare", token: admin, want: 404})
	c.do(t, call{method: put, path: apis + "/spare", token: acmeKey, body: spare, want: 201})
	c.do(t, call{method: del, path: apis + "/spare", token: acmeKey, want: 204})

	// Bad registrations name the member and store nothing.
	for _, k := range []struct {
		body       map[string]any
		field      string
		docRejects bool
	}{
		{map[string]any{"origin": "http://origin.test", "openapi": description}, "origin", true},
		{map[string]any{"origin": origin.BaseURL() + "/?x=1", "openapi": description}, "origin", true},
		{map[string]any{"origin": origin.BaseURL()}, "openapi", true},
		{map[string]any{"origin": origin.BaseURL(), "openapi": description, "openapi_url": descURL}, "openapi", true},
		{map[string]any{"origin": origin.BaseURL(), "openapi": 7}, "openapi", true},
		{map[string]any{"origin": origin.BaseURL(), "openapi": description, "timeout_seconds": 121}, "timeout_seconds", true},
		{map[string]any{"origin": origin.BaseURL(), "openapi": description, "max_request_bytes": 0}, "max_request_bytes", true},
		{map[string]any{"origin": origin.BaseURL(), "openapi": description, "description": strings.Repeat("d", 1001)}, "description", true},
		// What the schema cannot say: a description the gateway cannot
		// serve, and one its URL does not give (the origin refuses a
		// request without Poppy-Verified).
		{map[string]any{"origin": origin.BaseURL(), "openapi": map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "T", "version": "1"}}}, "openapi", false},
		{map[string]any{"origin": origin.BaseURL(), "openapi": "openapi: 2.0"}, "openapi", false},
		{map[string]any{"origin": origin.BaseURL(), "openapi_url": origin.URL("/openapi.json")}, "openapi_url", false},
	} {
		r := c.do(t, call{method: put, path: apis + "/broken", token: acmeKey, body: k.body, want: 400, docRejects: k.docRejects})
		assert.Equal(t, k.field, firstField(r), "%v", k.body)
	}
	r = c.do(t, call{method: put, path: apis + "/bad.name", token: acmeKey, body: register, want: 400, docRejects: true})
	assert.Equal(t, "name", firstField(r))
	c.do(t, call{method: put, path: apis + "/broken", token: acmeKey, body: `[]`, want: 400, docRejects: true})
	c.do(t, call{method: put, path: apis + "/broken", token: acmeKey, body: padded(t, register, 2<<20+64<<10), want: 413})
	c.do(t, call{method: put, path: apis + "/broken", token: acmeKey, body: register, ctype: "text/plain", want: 415, docRejects: true})
	c.do(t, call{method: put, path: adminAPIs + "/broken", token: admin, body: padded(t, register, 2<<20+64<<10), want: 413})
	c.do(t, call{method: put, path: adminAPIs + "/broken", token: admin, body: register, ctype: "text/plain", want: 415, docRejects: true})
	r = c.do(t, call{method: put, path: adminAPIs + "/broken", token: admin, body: map[string]any{"origin": origin.BaseURL()}, want: 400, docRejects: true})
	assert.Equal(t, "openapi", firstField(r))
	assert.Len(t, c.do(t, call{method: get, path: apis, token: acmeKey, want: 200}).JSON(t)["apis"], 1)
	c.do(t, call{method: get, path: apis + "/broken", token: acmeKey, want: 404})
	c.do(t, call{method: del, path: apis + "/broken", token: acmeKey, want: 404})

	// The gateway, for each method: the Session header is required;
	// the API's description decides what is forwarded and who may
	// call it; the origin gets the verified facts and none of the
	// Personal Agent's credentials.
	token := signIn(t, "alice", "correct horse")
	mcpToken := env.SignIn(t, agent, issuer, "alice", "correct horse", []string{"orders:read"}, issuer+"/mcp").AccessToken
	api := "/t/acme/api/orders"
	for _, m := range []string{get, post, put, patch, del} {
		var body any
		if m != get && m != del {
			body = `{"note":"hello"}`
		}
		k := call{method: m, path: api + "/public?page=2", session: in("gateway", ""), body: body, want: 200,
			header: map[string]string{"Idempotency-Key": "key-" + m, "Cookie": "poppyhost_csrf=x", "X-Forwarded-For": "203.0.113.9"}}
		r := c.do(t, k)
		echo := r.JSON(t)
		assert.Equal(t, []any{m, "/public", "page=2", "", []any{}}, []any{echo["method"], echo["path"], echo["query"], echo["account"], echo["scopes"]})
		got := origin.Last()
		require.NoError(t, got.VerifyErr)
		assert.Equal(t, origin.BaseURL(), got.Claims.Audience, "aud is the registered origin")
		assert.Equal(t, issuer, got.Claims.Issuer)
		assert.Equal(t, []string{"orders", m, "/public", agent.ClientID, "gateway", "usr_test", ""},
			[]string{got.Claims.API, got.Claims.Method, got.Claims.Path, got.Claims.ClientID, got.Claims.SID, got.Claims.UserID, got.Claims.Account})
		for _, h := range []string{"Authorization", "Poppy-Session", "Cookie", "X-Forwarded-For"} {
			assert.Empty(t, got.Header.Get(h), h)
		}
		assert.Empty(t, got.Header.Get("Idempotency-Key"), "only the platform sets it, for an approved revision")

		// Signed in: the account and scopes reach the origin.
		echo = c.do(t, call{method: m, path: api + "/orders", session: in("gateway-alice", token), body: body, want: 200}).JSON(t)
		assert.NotEmpty(t, echo["account"])
		assert.Equal(t, []any{"orders:read"}, echo["scopes"])
		assert.Empty(t, origin.Last().Header.Get("Authorization"))

		// Challenges: no token, a token that is not valid here (one for
		// the MCP server included), a token without the scope.
		r = c.do(t, call{method: m, path: api + "/orders", session: in("gateway", ""), body: body, want: 401})
		assert.Equal(t, "unauthorized", r.JSON(t)["error"])
		assert.Equal(t, `Bearer realm="poppyhost", scope="orders:read", resource_metadata="https://acme.example/.well-known/oauth-protected-resource"`,
			r.Header.Get("WWW-Authenticate"))
		for _, tok := range []string{bogus, mcpToken} {
			r = c.do(t, call{method: m, path: api + "/orders", session: in("gateway-bad-token", tok), body: body, want: 401})
			assert.Equal(t, "invalid_token", r.JSON(t)["error"])
		}
		r = c.do(t, call{method: m, path: api + "/changes", session: in("gateway-alice", token), body: body, want: 403})
		assert.Equal(t, "insufficient_scope", r.JSON(t)["error"])
		assert.Contains(t, r.Header.Get("WWW-Authenticate"), `scope="orders:write"`)

		// What the description does not declare, and paths that could
		// leave the API at the origin.
		c.do(t, call{method: m, path: api + "/nothing", session: in("gateway", ""), body: body, want: 404})
		c.do(t, call{method: m, path: "/t/acme/api/nosuch/public", session: in("gateway", ""), body: body, want: 404})
		declared := "/readonly"
		if m == get {
			declared = "/writeonly"
		}
		r = c.do(t, call{method: m, path: api + declared, session: in("gateway", ""), body: body, want: 405})
		assert.Equal(t, map[string]string{"/readonly": "GET", "/writeonly": "POST"}[declared], r.Header.Get("Allow"))
		r = c.do(t, call{method: m, path: api + "/%2e%2e", session: in("gateway", ""), body: body, want: 400})
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])
		r = c.do(t, call{method: m, path: api + "/a%2Fb", session: in("gateway", ""), body: body, want: 400})
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])

		// The API's limits: a body over max_request_bytes, an answer
		// over max_response_bytes, an origin slower than
		// timeout_seconds.
		c.do(t, call{method: m, path: api + "/public", session: in("gateway", ""), body: strings.Repeat("x", 1025), ctype: "text/plain", want: 413})
		origin.Handle(m, "/public", origin.Big(2049))
		r = c.do(t, call{method: m, path: api + "/public", session: in("gateway", ""), body: body, want: 502})
		assert.Equal(t, "origin_response_too_large", r.JSON(t)["error"])
		origin.Handle(m, "/public", origin.Slow(10*time.Second))
		r = c.do(t, call{method: m, path: api + "/public", session: in("gateway", ""), body: body, want: 504})
		assert.Equal(t, "origin_timeout", r.JSON(t)["error"])
		origin.Handle(m, "/public", nil)
	}
	r = c.do(t, call{method: get, path: api + "/public", want: 400, docRejects: true})
	assert.Equal(t, "invalid_session", r.JSON(t)["error"])

	// The origin's cookies stay with it: on the platform's host they
	// would reach other Companies' pages.
	origin.Handle(get, "/public", func(w http.ResponseWriter, _ *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "origin", Value: "1"})
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello")
	})
	r = c.do(t, call{method: get, path: api + "/public", session: in("gateway", ""), want: 200})
	assert.Equal(t, "hello", string(r.Body))
	assert.Empty(t, r.Header.Values("Set-Cookie"))
	// An answer over max_response_bytes without a Content-Length is
	// cut off by aborting the response, never passed off as whole.
	origin.Handle(get, "/public", origin.BigChunked(64<<10))
	req, err := http.NewRequest(get, env.PublicURL(api+"/public"), nil)
	require.NoError(t, err)
	in("gateway", "")(req)
	resp, err := env.Client.Do(req)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Error(t, err)
	origin.Handle(get, "/public", nil)
	// An origin that cannot be reached.
	c.do(t, call{method: put, path: apis + "/down", token: acmeKey, want: 201,
		body: map[string]any{"origin": "https://down.test", "openapi": description}})
	r = c.do(t, call{method: get, path: "/t/acme/api/down/public", session: in("gateway", ""), want: 502})
	assert.Equal(t, "origin_unreachable", r.JSON(t)["error"])
	c.do(t, call{method: del, path: apis + "/down", token: acmeKey, want: 204})

	return &gateway{
		origin: origin, in: in, firstField: firstField,
		mcpPath: mcpPath, mcpMetadata: mcpMetadata, mcpHeaders: mcpHeaders, rpc: rpc, initialize: initialize,
		apis: apis, register: register, descURL: descURL, token: token, mcpToken: mcpToken,
	}
}
