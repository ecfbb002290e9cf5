package api

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// gatewayMCP registers acme's MCP tools and calls them through the hosted
// MCP server.
func gatewayMCP(t *testing.T, c *contract, f *fixture, acmeKey string, g *gateway) {
	env, issuer := f.env, f.issuer
	origin, in, firstField, register, descURL := g.origin, g.in, g.firstField, g.register, g.descURL
	mcpPath, mcpMetadata, mcpHeaders, rpc, initialize := g.mcpPath, g.mcpMetadata, g.mcpHeaders, g.rpc, g.initialize
	token, mcpToken := g.token, g.mcpToken
	var r *peers.Response

	// Tools of the hosted MCP server: one anyone may call, one that
	// needs orders:write. A tool's Poppy-Verified is for its URL: the
	// one called here has an origin of its own, whose base URL it is.
	tools, adminTools := "/company/v1/tools", "/admin/v1/companies/acme/tools"
	toolOrigin := env.StartOrigin(t, "tools.test", issuer, issuer)
	orderID := map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}},
		"required": []string{"order_id"}}
	status := map[string]any{"title": "Order status", "description": "Looks an order up by its number.",
		"input_schema": orderID, "output_schema": map[string]any{"type": "object"},
		"annotations": map[string]any{"readOnlyHint": true}, "url": toolOrigin.BaseURL()}
	cancel := map[string]any{"description": "Cancels an order.", "input_schema": orderID,
		"scopes": []string{"orders:write"}, "url": origin.URL("/tools/cancel"), "timeout_seconds": 5}
	r = c.do(t, call{method: put, path: tools + "/order_status", token: acmeKey, body: status, want: 201})
	statusTool := r.JSON(t)
	assert.Equal(t, []any{}, statusTool["scopes"])
	assert.Equal(t, float64(30), statusTool["timeout_seconds"])
	assert.Equal(t, statusTool["created_at"], c.do(t, call{method: put, path: tools + "/order_status", token: acmeKey, body: status, want: 200}).JSON(t)["created_at"])
	c.do(t, call{method: put, path: adminTools + "/cancel_order", token: admin, body: cancel, want: 201})
	c.do(t, call{method: put, path: adminTools + "/cancel_order", token: admin, body: cancel, want: 200})
	tl := c.do(t, call{method: get, path: tools, token: acmeKey, want: 200}).JSON(t)["tools"].([]any)
	require.Len(t, tl, 2)
	assert.Equal(t, "cancel_order", tl[0].(map[string]any)["name"])
	assert.Equal(t, tl, c.do(t, call{method: get, path: adminTools, token: admin, want: 200}).JSON(t)["tools"])
	assert.Equal(t, tl[1], c.do(t, call{method: get, path: tools + "/order_status", token: acmeKey, want: 200}).JSON(t))
	assert.Equal(t, tl[0], c.do(t, call{method: get, path: adminTools + "/cancel_order", token: admin, want: 200}).JSON(t))
	c.do(t, call{method: put, path: tools + "/spare.tool", token: acmeKey, body: status, want: 201})
	stale := map[string]string{"If-Match": `"stale"`}
	c.do(t, call{method: put, path: tools + "/spare.tool", token: acmeKey, body: status, header: stale, want: 412})
	c.do(t, call{method: put, path: adminTools + "/spare.tool", token: admin, body: status, header: stale, want: 412})
	tag := c.do(t, call{method: get, path: adminTools + "/spare.tool", token: admin, want: 200}).Header.Get("ETag")
	c.do(t, call{method: put, path: adminTools + "/spare.tool", token: admin, body: status, header: map[string]string{"If-Match": tag}, want: 200})
	c.do(t, call{method: del, path: tools + "/spare.tool", token: acmeKey, want: 204})
	c.do(t, call{method: del, path: tools + "/spare.tool", token: acmeKey, want: 404})
	c.do(t, call{method: get, path: tools + "/spare.tool", token: acmeKey, want: 404})
	c.do(t, call{method: put, path: adminTools + "/spare.tool", token: admin, body: status, want: 201})
	c.do(t, call{method: del, path: adminTools + "/spare.tool", token: admin, want: 204})
	c.do(t, call{method: del, path: adminTools + "/spare.tool", token: admin, want: 404})
	c.do(t, call{method: get, path: adminTools + "/spare.tool", token: admin, want: 404})
	with := func(name string, v any) map[string]any {
		m := maps.Clone(cancel)
		if v == nil {
			delete(m, name)
		} else {
			m[name] = v
		}
		return m
	}
	for _, k := range []struct {
		body       map[string]any
		field      string
		docRejects bool
	}{
		{with("description", nil), "description", true},
		{with("input_schema", nil), "input_schema", true},
		{with("input_schema", map[string]any{"type": "string"}), "input_schema", true},
		{with("url", "http://origin.test/tools/cancel"), "url", true},
		{with("scopes", []string{"orders:write", "orders:write"}), "scopes[1]", true},
		{with("timeout_seconds", 0), "timeout_seconds", true},
		{with("title", strings.Repeat("t", 201)), "title", true},
		{with("annotations", map[string]any{"readOnlyHint": "yes"}), "annotations", true},
		// What the schema cannot say: a scope acme does not define, a
		// schema that is not valid JSON Schema.
		{with("scopes", []string{"orders:delete"}), "scopes[0]", false},
		{with("input_schema", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": 7}}}), "input_schema", false},
	} {
		r := c.do(t, call{method: put, path: tools + "/broken", token: acmeKey, body: k.body, want: 400, docRejects: k.docRejects})
		assert.Equal(t, k.field, firstField(r), "%v", k.body)
	}
	r = c.do(t, call{method: put, path: tools + "/bad!name", token: acmeKey, body: cancel, want: 400, docRejects: true})
	assert.Equal(t, "name", firstField(r))
	r = c.do(t, call{method: put, path: adminTools + "/broken", token: admin, body: with("url", nil), want: 400, docRejects: true})
	assert.Equal(t, "url", firstField(r))
	for _, p := range []string{tools + "/broken", adminTools + "/broken"} {
		tok := acmeKey
		if strings.HasPrefix(p, "/admin/") {
			tok = admin
		}
		c.do(t, call{method: put, path: p, token: tok, body: padded(t, cancel, 256<<10), want: 413})
		c.do(t, call{method: put, path: p, token: tok, body: cancel, ctype: "text/plain", want: 415, docRejects: true})
	}
	c.do(t, call{method: get, path: tools + "/broken", token: acmeKey, want: 404})

	// The MCP server is its own protected resource (spec 7).
	r = c.do(t, call{method: get, path: mcpMetadata, want: 200})
	assert.Equal(t, map[string]any{"resource": issuer + "/mcp", "authorization_servers": []any{issuer},
		"bearer_methods_supported": []any{"header"}, "scopes_supported": []any{"orders:write"}}, r.JSON(t))
	challenge := `Bearer realm="poppyhost", resource_metadata="` + env.PublicURL(mcpMetadata) + `"`
	// Signed out, while acme does not take signed-out calls; the
	// Company's default token, which is not for this server.
	r = c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: initialize, want: 401})
	assert.Equal(t, "unauthorized", r.JSON(t)["error"])
	assert.Equal(t, challenge, r.Header.Get("WWW-Authenticate"))
	r = c.do(t, call{method: post, path: mcpPath, session: in("mcp-default-token", token), header: mcpHeaders, body: initialize, want: 401})
	assert.Equal(t, "invalid_token", r.JSON(t)["error"])
	assert.Contains(t, r.Header.Get("WWW-Authenticate"), `resource_metadata="`+env.PublicURL(mcpMetadata)+`"`)

	// Signed out, once acme allows it: initialize, list, and call the
	// tool that needs no scope.
	r = c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"mcp":{"signed_out":true}}`})
	assert.Equal(t, map[string]any{"signed_out": true, "description": "Order tools"}, r.JSON(t)["mcp"])
	result := func(r *peers.Response) map[string]any {
		t.Helper()
		m := r.JSON(t)
		require.Contains(t, m, "result", "%s", r.Body)
		return m["result"].(map[string]any)
	}
	res := result(c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: initialize, want: 200}))
	assert.Equal(t, "2025-06-18", res["protocolVersion"])
	c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: rpc(0, "notifications/initialized", nil), want: 202})
	res = result(c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: rpc(2, "tools/list", nil), want: 200}))
	var names []string
	for _, tool := range res["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	assert.ElementsMatch(t, []string{"order_status", "cancel_order"}, names)
	call3 := rpc(3, "tools/call", map[string]any{"name": "order_status", "arguments": map[string]any{"order_id": "ord_1042"}})
	res = result(c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: call3, want: 200}))
	assert.NotEqual(t, true, res["isError"], "%v", res)
	structured := res["structuredContent"].(map[string]any)
	assert.Equal(t, []any{"POST", "/", `{"order_id":"ord_1042"}`, ""},
		[]any{structured["method"], structured["path"], structured["body"], structured["account"]})
	got := toolOrigin.Last()
	require.NoError(t, got.VerifyErr)
	assert.Equal(t, []string{toolOrigin.BaseURL(), "order_status", "POST", "/", "mcp"},
		[]string{got.Claims.Audience, got.Claims.Tool, got.Claims.Method, got.Claims.Path, got.Claims.SID})
	assert.Empty(t, got.Header.Get("Poppy-Session"))
	// The tool that needs orders:write: a challenge signed out (MCP's
	// step-up), 403 with a token that lacks it.
	cancelCall := rpc(4, "tools/call", map[string]any{"name": "cancel_order", "arguments": map[string]any{"order_id": "ord_1042"}})
	r = c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: cancelCall, want: 401})
	assert.Equal(t, `Bearer realm="poppyhost", scope="orders:write", resource_metadata="`+env.PublicURL(mcpMetadata)+`"`,
		r.Header.Get("WWW-Authenticate"))
	r = c.do(t, call{method: post, path: mcpPath, session: in("mcp-alice", mcpToken), header: mcpHeaders, body: cancelCall, want: 403})
	assert.Equal(t, "insufficient_scope", r.JSON(t)["error"])
	// Signed in with a token for this server, the account reaches the
	// tool's origin.
	res = result(c.do(t, call{method: post, path: mcpPath, session: in("mcp-alice", mcpToken), header: mcpHeaders, body: call3, want: 200}))
	assert.NotEmpty(t, res["structuredContent"].(map[string]any)["account"])

	// MCP 2026-07-28: no initialize; the version in every request's
	// metadata and headers, which the transport checks.
	latest := rpc(5, "tools/call", map[string]any{"name": "order_status", "arguments": map[string]any{"order_id": "ord_7"},
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "contract", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{}}})
	latestHeaders := map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
		"Mcp-Method": "tools/call", "Mcp-Name": "order_status"}
	res = result(c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: latestHeaders, body: latest, want: 200}))
	assert.Equal(t, `{"order_id":"ord_7"}`, res["structuredContent"].(map[string]any)["body"])
	delete(latestHeaders, "Mcp-Method")
	r = c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: latestHeaders, body: latest, want: 400})
	assert.Contains(t, r.JSON(t)["error"], "message", "a JSON-RPC error")

	// Transport errors: the Session header, the SDK's rules on Accept
	// and Content-Type, the body limit.
	// A Session header that fails spec 5.3 is invalid_session; a
	// request without one is an MCP client that does not speak Poppy,
	// and needs an access token for the server (spec 7).
	badSession := map[string]string{"Poppy-Session": "not-a-session-jwt"}
	for k, v := range mcpHeaders {
		badSession[k] = v
	}
	r = c.do(t, call{method: post, path: mcpPath, header: badSession, body: initialize, want: 400})
	assert.Equal(t, "invalid_session", r.JSON(t)["error"])
	r = c.do(t, call{method: post, path: mcpPath, header: mcpHeaders, body: initialize, want: 401, docRejects: true})
	assert.Contains(t, r.Header.Get("WWW-Authenticate"), "resource_metadata=")
	c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: map[string]string{"Accept": "application/json"}, body: initialize, want: 400})
	c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: initialize, ctype: "text/plain", want: 415, docRejects: true})
	c.do(t, call{method: post, path: mcpPath, session: in("mcp", ""), header: mcpHeaders, body: padded(t, initialize, 4<<20), want: 413})

	// poppy.json lists the API's description and the MCP server.
	doc := c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
	assert.Subset(t, doc["apis"], []any{
		map[string]any{"type": "openapi", "url": descURL, "description": "Orders and returns"},
		map[string]any{"type": "mcp", "url": issuer + "/mcp", "description": "Order tools"},
	})

	// Every registration route needs its credential, and the admin
	// routes a Company that exists.
	for _, op := range operations {
		method, path, _ := strings.Cut(op, " ")
		isAPI, isTool := strings.Contains(path, "/apis"), strings.Contains(path, "/tools")
		if !isAPI && !isTool {
			continue
		}
		k := call{method: method, path: strings.NewReplacer("{slug}", "acme", "{name}", "order_status").Replace(path), token: acmeKey}
		if isAPI {
			k.path = strings.ReplaceAll(path, "{name}", "orders")
		}
		if method == put {
			k.body = cancel
			if isAPI {
				k.body = register
			}
		}
		if strings.HasPrefix(path, "/admin/") {
			k.token = admin
			k.path = strings.ReplaceAll(k.path, "{slug}", "acme")
			nosuch := k
			nosuch.path, nosuch.want = strings.Replace(k.path, "/acme/", "/nosuch/", 1), 404
			c.do(t, nosuch)
		}
		bad := k
		bad.token, bad.want = bogus, 401
		c.do(t, bad)
		bad.token, bad.docRejects = "", true
		c.do(t, bad)
	}

	c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
		body: `{"mcp":{"signed_out":false},"rate_limits":{"per_address":900,"per_session":300}}`})

	// Dynamic Client Registration for MCP clients: absent until the
	// Company turns it on, then public clients only, limited by address.
	reg := "/t/acme/oauth/register"
	inspector := map[string]any{"client_name": "Inspector", "redirect_uris": []string{"http://localhost:6274/oauth/callback"},
		"token_endpoint_auth_method": "none"}
	c.do(t, call{method: post, path: reg, body: inspector, want: 404})
	c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"mcp":{"dynamic_registration":true}}`})
	as := c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/acme", want: 200}).JSON(t)
	assert.Equal(t, issuer+"/oauth/register", as["registration_endpoint"])
	assert.Contains(t, as["token_endpoint_auth_methods_supported"], "none")
	r = c.do(t, call{method: post, path: reg, body: inspector, want: 201})
	assert.Equal(t, "none", r.JSON(t)["token_endpoint_auth_method"])
	c.do(t, call{method: post, path: reg, body: map[string]any{"redirect_uris": []string{"http://evil.example/cb"}}, want: 400})
	c.do(t, call{method: post, path: reg, body: map[string]any{"redirect_uris": []string{"http://127.0.0.1/cb"},
		"token_endpoint_auth_method": "client_secret_basic"}, want: 400, docRejects: true})
	for range 2 {
		c.do(t, call{method: post, path: reg, body: inspector, want: 201})
	}
	c.do(t, call{method: post, path: reg, body: inspector, want: 429})
	c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"mcp":{"dynamic_registration":false}}`})
}
