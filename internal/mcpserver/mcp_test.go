package mcpserver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

const mcpPassword = "correct horse battery staple"

// mcpRig is a running platform with the Companies stormline (signed-out
// MCP calls off, account ada, tools on their own origins) and harbor
// (signed-out calls on), and a test Personal Agent.
type mcpRig struct {
	env     *testkit.Env
	agent   *peers.Agent
	origins map[string]*peers.Origin // by tool name
}

func (g *mcpRig) issuer(slug string) string { return g.env.PublicURL("/t/" + slug) }

func (g *mcpRig) companyID(t testing.TB, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&id))
	return id
}

// addTool registers tool for slug on a new origin of its own, whose base
// URL (its expected aud) becomes the tool's URL.
func (g *mcpRig) addTool(t testing.TB, slug string, tool registry.Tool) *peers.Origin {
	t.Helper()
	o := g.env.StartOrigin(t, "origin.test", g.issuer(slug), g.issuer(slug))
	tool.URL = o.BaseURL()
	g.putTool(t, slug, tool)
	g.origins[tool.Name] = o
	return o
}

// putTool registers tool for slug, with defaults for its input schema and
// timeout.
func (g *mcpRig) putTool(t testing.TB, slug string, tool registry.Tool) {
	t.Helper()
	if tool.InputSchema == nil {
		tool.InputSchema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}}}`)
	}
	if tool.TimeoutSeconds == 0 {
		tool.TimeoutSeconds = 10
	}
	_, err := registry.NewStore(g.env.Pool).PutTool(context.Background(), g.companyID(t, slug), &tool, time.Now())
	require.NoError(t, err)
}

func setupMCP(t testing.TB) *mcpRig {
	t.Helper()
	env := testkit.Setup(t)
	scopes := map[string]any{"orders:read": "See your orders", "orders:write": "Change your orders"}
	env.CreateCompany(t, map[string]any{
		"slug":         "stormline",
		"organization": map[string]any{"name": "Stormline", "domain": "stormline.test"},
		"auth":         map[string]any{"scopes": scopes},
	})
	env.CreateCompany(t, map[string]any{
		"slug":         "harbor",
		"organization": map[string]any{"name": "Harbor", "domain": "harbor.test"},
		"auth":         map[string]any{"scopes": scopes},
		"mcp":          map[string]any{"signed_out": true},
	})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/accounts",
		map[string]any{"username": "ada", "password": mcpPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

	g := &mcpRig{env: env, agent: env.StartAgent(t, "agent-mcp.test"), origins: map[string]*peers.Origin{}}
	g.addTool(t, "stormline", registry.Tool{Name: "lookup_order", Title: "Look up an order",
		Description: "Shows one order", Scopes: []string{"orders:read"},
		OutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: json.RawMessage(`{"readOnlyHint":true}`)})
	g.addTool(t, "stormline", registry.Tool{Name: "cancel_order", Description: "Cancels an order",
		Scopes: []string{"orders:write"}, Annotations: json.RawMessage(`{"destructiveHint":true}`)})
	g.addTool(t, "harbor", registry.Tool{Name: "harbor_hours", Description: "Opening hours",
		InputSchema: json.RawMessage(`{"type":"object"}`)})
	g.addTool(t, "harbor", registry.Tool{Name: "harbor_orders", Description: "Your orders", Scopes: []string{"orders:read"}})
	g.origins["harbor_hours"].Handle(http.MethodPost, "/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "9 to 5")
	})
	return g
}

// signIn has ada sign the agent in at stormline with scopes; resource is
// the token's service, "" for the default token.
func (g *mcpRig) signIn(t *testing.T, scopes []string, resource string) string {
	t.Helper()
	return g.env.SignIn(t, g.agent, g.issuer("stormline"), "ada", mcpPassword, scopes, resource).AccessToken
}

func newSID() string { return rand.Text() }

// sessionTransport signs every request as the Personal Agent in Session
// sid, with token when set, and adds a cookie the origin must never see.
type sessionTransport struct {
	t     *testing.T
	g     *mcpRig
	aud   string
	sid   string
	token string
}

func (s *sessionTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	s.g.agent.Sign(s.t, req, peers.SessionClaims{Aud: s.aud, SID: s.sid, Sub: "usr_x", AccessToken: s.token},
		peers.SessionOptions{})
	req.Header.Set("Cookie", "poppy_web=secret")
	return s.g.env.Client.Transport.RoundTrip(req)
}

// connect connects the go-sdk MCP client to slug's /mcp in Session sid.
func (g *mcpRig) connect(t *testing.T, slug, sid, token, version string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: g.issuer(slug) + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &sessionTransport{t: t, g: g, aud: g.issuer(slug), sid: sid, token: token}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := client.Connect(ctx, tr, opts)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func (g *mcpRig) mustConnect(t *testing.T, slug, sid, token, version string) *mcp.ClientSession {
	t.Helper()
	cs, err := g.connect(t, slug, sid, token, version)
	require.NoError(t, err)
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return res
}

func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.Len(t, res.Content, 1)
	text, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "content is %T", res.Content[0])
	return text.Text
}

// post sends a raw JSON-RPC POST to slug's /mcp in Session sid, or with
// no Session header when sid is "". body is sent as JSON, or as is when
// it is a []byte.
func (g *mcpRig) post(t testing.TB, slug, sid, token string, body any, headers ...string) *peers.Response {
	t.Helper()
	raw, isRaw := body.([]byte)
	if !isRaw {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(http.MethodPost, g.issuer(slug)+"/mcp", bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if sid != "" {
		g.agent.Sign(t, req, peers.SessionClaims{Aud: g.issuer(slug), SID: sid, Sub: "usr_x", AccessToken: token},
			peers.SessionOptions{})
	}
	resp, err := g.env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: out}
}

func toolsCall(name string, args any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args}}
}

func (g *mcpRig) metadataURL(slug string) string {
	return g.env.PublicURL("/.well-known/oauth-protected-resource/t/" + slug + "/mcp")
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func TestMCPSignedInCallsReachTheOrigin(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	sid := newSID()
	cs := g.mustConnect(t, "stormline", sid, token, "")
	require.Equal(t, "2026-07-28", cs.InitializeResult().ProtocolVersion)
	require.Equal(t, "stormline", cs.InitializeResult().ServerInfo.Name)

	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 2)
	lookup := tools.Tools[1]
	require.Equal(t, "lookup_order", lookup.Name)
	require.Equal(t, "Look up an order", lookup.Title)
	require.Equal(t, "Shows one order", lookup.Description)
	require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}}},
		lookup.InputSchema)
	require.Equal(t, map[string]any{"type": "object"}, lookup.OutputSchema)
	require.True(t, lookup.Annotations.ReadOnlyHint)
	require.Equal(t, "cancel_order", tools.Tools[0].Name)
	require.True(t, *tools.Tools[0].Annotations.DestructiveHint)

	res := callTool(t, cs, "lookup_order", map[string]any{"order_id": "ord_7Hk2"})
	require.False(t, res.IsError, "%v", res.Content)
	structured, ok := res.StructuredContent.(map[string]any)
	require.True(t, ok, "structured content is %T", res.StructuredContent)
	require.Equal(t, `{"order_id":"ord_7Hk2"}`, structured["body"])
	require.Equal(t, []any{"orders:read"}, structured["scopes"])
	var fromText map[string]any
	require.NoError(t, json.Unmarshal([]byte(resultText(t, res)), &fromText), "the text is the JSON")
	require.Equal(t, structured, fromText)

	o := g.origins["lookup_order"]
	got := o.Last()
	require.NoError(t, got.VerifyErr)
	require.Equal(t, http.MethodPost, got.Method)
	require.Equal(t, "/", got.Path)
	require.JSONEq(t, `{"order_id":"ord_7Hk2"}`, string(got.Body))
	require.Equal(t, "application/json", got.Header.Get("Content-Type"))
	var account int64
	require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT a.id FROM accounts a
		JOIN companies c ON c.id = a.company_id WHERE c.slug = 'stormline' AND a.username = 'ada'`).Scan(&account))
	c := got.Claims
	require.Equal(t, g.issuer("stormline"), c.Issuer)
	require.Equal(t, o.BaseURL(), c.Audience, "aud is the tool's URL")
	require.Equal(t, strconv.FormatInt(account, 10), c.Account)
	require.Equal(t, []string{"orders:read"}, c.Scopes)
	require.Equal(t, "lookup_order", c.Tool)
	require.Equal(t, g.agent.ClientID, c.ClientID)
	require.Equal(t, sid, c.SID)
	require.Equal(t, "usr_x", c.UserID)
	require.Equal(t, http.MethodPost, c.Method)
	require.Equal(t, "/", c.Path)
	require.Empty(t, c.API)

	// Nothing of the Personal Agent's reaches the origin.
	for _, r := range o.Received() {
		for _, h := range []string{"Authorization", "Poppy-Session", "Cookie", "Mcp-Session-Id"} {
			require.Empty(t, r.Header.Get(h), h)
		}
		require.NotEmpty(t, r.Header.Get(verified.Header))
	}
	require.Equal(t, 1, o.Calls(http.MethodPost, "/"), "listing tools calls no origin")

	// No arguments are sent as {}.
	res = callTool(t, cs, "lookup_order", nil)
	require.False(t, res.IsError, "%v", res.Content)
	require.JSONEq(t, `{}`, string(o.Last().Body))
}

func TestMCPToolOnAPath(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	// aud is the tool's whole URL and htu its path: the test origin,
	// expecting its base URL as aud, refuses it, so check it here.
	o := g.env.StartOrigin(t, "origin.test", g.issuer("stormline"), g.issuer("stormline"))
	url := o.URL("/v1/tools/path%20tool")
	g.putTool(t, "stormline", registry.Tool{Name: "path_tool", Scopes: []string{"orders:read"}, URL: url})
	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	cs := g.mustConnect(t, "stormline", newSID(), token, "")
	res := callTool(t, cs, "path_tool", map[string]any{"x": 1})
	require.True(t, res.IsError, "the test origin refuses an aud other than its base URL")
	require.Contains(t, resultText(t, res), "refused the call (HTTP 401)")

	got := o.Last()
	require.Equal(t, "/v1/tools/path%20tool", got.Path)
	resp := g.env.Do(t, http.MethodGet, g.issuer("stormline")+"/oauth/jwks.json", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	set, err := jwk.Parse(resp.Body)
	require.NoError(t, err)
	claims, err := verified.Verify(got.Header.Get(verified.Header), set, g.issuer("stormline"), url, time.Now())
	require.NoError(t, err)
	require.Equal(t, "/v1/tools/path%20tool", claims.Path)
	require.Equal(t, "path_tool", claims.Tool)
}

func TestMCPRefusesTokensNotIssuedForIt(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	metadata := g.metadataURL("stormline")

	// A default token works at the Company's other services, not here
	// (spec 4.5, 7).
	token := g.signIn(t, []string{"orders:read"}, "")
	resp := g.post(t, "stormline", newSID(), token, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	www := resp.Header.Get("WWW-Authenticate")
	require.Contains(t, www, `error="invalid_token"`)
	require.Contains(t, www, `resource_metadata="`+metadata+`"`)
	require.Equal(t, "invalid_token", resp.JSON(t)["error"])
	_, err := g.connect(t, "stormline", newSID(), token, "")
	require.Error(t, err, "the MCP client cannot connect with a default token")
	require.Zero(t, g.origins["lookup_order"].Calls("", "/"))

	// Without a token, the challenge sends MCP clients to sign in.
	resp = g.post(t, "stormline", newSID(), "", toolsCall("lookup_order", map[string]any{}))
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	www = resp.Header.Get("WWW-Authenticate")
	require.True(t, strings.HasPrefix(www, "Bearer "), www)
	require.NotContains(t, www, "error=", "RFC 6750 §3.1: no error code without a token")
	require.Contains(t, www, `resource_metadata="`+metadata+`"`)
	_, err = g.connect(t, "stormline", newSID(), "", "")
	require.Error(t, err)
	require.Zero(t, g.origins["lookup_order"].Calls("", "/"))
}

func TestMCPStepsUpScopes(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	sid := newSID()

	resp := g.post(t, "stormline", sid, token, toolsCall("cancel_order", map[string]any{"order_id": "ord_1"}))
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	www := resp.Header.Get("WWW-Authenticate")
	require.Contains(t, www, `error="insufficient_scope"`)
	require.Contains(t, www, `scope="orders:write"`)
	require.Contains(t, www, `resource_metadata="`+g.metadataURL("stormline")+`"`)

	// A batch is refused for any of its calls, with the scopes they all
	// need.
	resp = g.post(t, "stormline", sid, token, []any{toolsCall("lookup_order", map[string]any{}),
		toolsCall("cancel_order", map[string]any{})})
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `scope="orders:read orders:write"`)

	// The check reads the body as the SDK does: keys are case-sensitive,
	// and the last of duplicates wins.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{"name":"cancel_order","NAME":"lookup_order"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"lookup_order","name":"cancel_order"}}`,
	} {
		resp = g.post(t, "stormline", sid, token, json.RawMessage(body), "MCP-Protocol-Version", "2025-06-18")
		require.Equal(t, http.StatusForbidden, resp.Status, "%s: %s", body, resp.Body)
	}

	cs := g.mustConnect(t, "stormline", sid, token, "")
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "cancel_order", Arguments: map[string]any{}})
	require.Error(t, err)
	require.Zero(t, g.origins["cancel_order"].Calls("", "/"))

	// The go-sdk client closes its connection on a refusal without a
	// JSON-RPC body; stateless, reconnecting costs one request. Tools it
	// has the scopes for still work in the same Poppy Session.
	cs = g.mustConnect(t, "stormline", sid, token, "")
	res := callTool(t, cs, "lookup_order", map[string]any{})
	require.False(t, res.IsError, "%v", res.Content)

	// An unknown tool is the SDK's to answer.
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "no_such_tool")
}

func TestMCPSignedOut(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	cs := g.mustConnect(t, "harbor", newSID(), "", "")
	require.Equal(t, []string{"harbor_hours", "harbor_orders"}, toolNames(t, cs))

	res := callTool(t, cs, "harbor_hours", nil)
	require.False(t, res.IsError, "%v", res.Content)
	require.Equal(t, "9 to 5", resultText(t, res))
	require.Nil(t, res.StructuredContent, "text is not structured")
	c := g.origins["harbor_hours"].Last().Claims
	require.NotNil(t, c)
	require.Empty(t, c.Account)
	require.Empty(t, c.Scopes)
	require.Equal(t, "harbor_hours", c.Tool)
	require.Equal(t, g.issuer("harbor"), c.Issuer)

	resp := g.post(t, "harbor", newSID(), "", toolsCall("harbor_orders", map[string]any{}))
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	www := resp.Header.Get("WWW-Authenticate")
	require.NotContains(t, www, "error=")
	require.Contains(t, www, `scope="orders:read"`)
	require.Contains(t, www, `resource_metadata="`+g.metadataURL("harbor")+`"`)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "harbor_orders", Arguments: map[string]any{}})
	require.Error(t, err)
	require.Zero(t, g.origins["harbor_orders"].Calls("", "/"))
}

func TestMCPOriginFailuresAreToolErrors(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	slow := g.addTool(t, "stormline", registry.Tool{Name: "slow", TimeoutSeconds: 1})
	slow.Handle(http.MethodPost, "/", slow.Slow(10*time.Second))
	down := g.addTool(t, "stormline", registry.Tool{Name: "down"})
	down.Close()
	refusing := g.addTool(t, "stormline", registry.Tool{Name: "refusing"})
	refusing.Handle(http.MethodPost, "/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"error":"no such order"}`)
	})
	long := g.addTool(t, "stormline", registry.Tool{Name: "long"})
	long.Handle(http.MethodPost, "/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, strings.Repeat("x", 10<<10))
	})
	big := g.addTool(t, "stormline", registry.Tool{Name: "big"})
	big.Handle(http.MethodPost, "/", big.BigChunked(origin.MaxToolResponseBytes+1))
	list := g.addTool(t, "stormline", registry.Tool{Name: "list"})
	list.Handle(http.MethodPost, "/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[1,2,3]`)
	})

	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	cs := g.mustConnect(t, "stormline", newSID(), token, "")

	start := time.Now()
	res := callTool(t, cs, "slow", nil)
	require.True(t, res.IsError)
	require.Equal(t, "the Company's origin did not answer in time", resultText(t, res))
	require.Less(t, time.Since(start), 8*time.Second, "the tool's timeout bounds the call")

	res = callTool(t, cs, "down", nil)
	require.True(t, res.IsError)
	require.Equal(t, "the Company's origin could not be reached", resultText(t, res))

	res = callTool(t, cs, "refusing", nil)
	require.True(t, res.IsError)
	require.Equal(t, `the Company's origin refused the call (HTTP 422): {"error":"no such order"}`, resultText(t, res))

	res = callTool(t, cs, "long", nil)
	require.True(t, res.IsError)
	require.Equal(t, "the Company's origin refused the call (HTTP 500): "+strings.Repeat("x", 4<<10)+"…", resultText(t, res),
		"at most 4 KiB of the origin's answer")

	res = callTool(t, cs, "big", nil)
	require.True(t, res.IsError)
	require.Contains(t, resultText(t, res), "more than")

	res = callTool(t, cs, "list", nil)
	require.False(t, res.IsError)
	require.Equal(t, `[1,2,3]`, resultText(t, res))
	require.Nil(t, res.StructuredContent, "only an object is structured content")

	// Arguments that are not an object never reach the origin.
	resp := g.post(t, "stormline", newSID(), token, toolsCall("list", []int{1}), "MCP-Protocol-Version", "2025-06-18")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Contains(t, string(resp.Body), `"isError":true`)
	require.Equal(t, 1, list.Calls("", "/"))
}

func TestMCPMetadata(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	resp := g.env.Do(t, http.MethodGet, g.metadataURL("stormline"), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "public, max-age=60", resp.Header.Get("Cache-Control"))
	require.JSONEq(t, `{
		"resource": "`+g.issuer("stormline")+`/mcp",
		"authorization_servers": ["`+g.issuer("stormline")+`"],
		"bearer_methods_supported": ["header"],
		"scopes_supported": ["orders:read", "orders:write"]
	}`, string(resp.Body))

	// poppy.json lists the server at exactly the metadata's resource.
	resp = g.env.Do(t, http.MethodGet, g.env.URL("stormline.test", "/.well-known/poppy.json"), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var poppy struct {
		APIs []struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"apis"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &poppy))
	require.Len(t, poppy.APIs, 1)
	require.Equal(t, "mcp", poppy.APIs[0].Type)
	require.Equal(t, g.issuer("stormline")+"/mcp", poppy.APIs[0].URL)

	// A Company without tools has no MCP server.
	g.env.CreateCompany(t, map[string]any{"slug": "quiet",
		"organization": map[string]any{"name": "Quiet", "domain": "quiet.test"}})
	resp = g.env.Do(t, http.MethodGet, g.metadataURL("quiet"), nil)
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
	resp = g.post(t, "quiet", newSID(), "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
}

func TestMCPCompaniesSeeOnlyTheirTools(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	cs := g.mustConnect(t, "harbor", newSID(), "", "")
	require.Equal(t, []string{"harbor_hours", "harbor_orders"}, toolNames(t, cs))
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{}})
	require.Error(t, err, "stormline's tool is unknown at harbor")
	require.Zero(t, g.origins["lookup_order"].Calls("", "/"))

	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	cs = g.mustConnect(t, "stormline", newSID(), token, "")
	require.Equal(t, []string{"cancel_order", "lookup_order"}, toolNames(t, cs))

	// stormline's MCP token is not harbor's.
	resp := g.post(t, "harbor", newSID(), token, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
}

func TestMCPProtocolVersions(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	for _, v := range mcp.SupportedProtocolVersions() {
		t.Run(v, func(t *testing.T) {
			cs := g.mustConnect(t, "stormline", newSID(), token, v)
			require.Equal(t, v, cs.InitializeResult().ProtocolVersion)
			require.Equal(t, []string{"cancel_order", "lookup_order"}, toolNames(t, cs))
			res := callTool(t, cs, "lookup_order", map[string]any{"order_id": v})
			require.False(t, res.IsError, "%v", res.Content)
			require.Equal(t, `{"order_id":"`+v+`"}`, res.StructuredContent.(map[string]any)["body"])
		})
	}

	// A raw 2025-06-18 client: initialize is answered without a session,
	// and each later request stands alone.
	sid := newSID()
	resp := g.post(t, "stormline", sid, token, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "raw", "version": "1"}}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Empty(t, resp.Header.Get("Mcp-Session-Id"), "stateless: no MCP session")
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var init struct {
		Result struct {
			ProtocolVersion string         `json:"protocolVersion"`
			ServerInfo      map[string]any `json:"serverInfo"`
			Capabilities    map[string]any `json:"capabilities"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &init))
	require.Equal(t, "2025-06-18", init.Result.ProtocolVersion)
	require.Equal(t, map[string]any{"name": "stormline", "version": "poppyhost"}, init.Result.ServerInfo)
	require.Equal(t, map[string]any{"tools": map[string]any{}}, init.Result.Capabilities)

	resp = g.post(t, "stormline", sid, token, toolsCall("lookup_order", map[string]any{"order_id": "raw"}),
		"MCP-Protocol-Version", "2025-06-18")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var call struct {
		Result struct {
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &call))
	require.Equal(t, `{"order_id":"raw"}`, call.Result.StructuredContent["body"])
}

// bearerOnly sends an MCP client's requests with only an access token: an
// MCP client that does not speak Poppy (spec 7, "Other MCP clients").
type bearerOnly struct {
	base  http.RoundTripper
	token string
}

func (b bearerOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(req)
}

func TestMCPClientsWithoutASession(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	token := g.signIn(t, []string{"orders:read"}, g.issuer("stormline")+"/mcp")
	connect := func(slug, token string) (*mcp.ClientSession, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "plain-mcp-client", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.issuer(slug) + "/mcp", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearerOnly{base: g.env.Client.Transport, token: token}}}, nil)
	}

	cs, err := connect("stormline", token)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res := callTool(t, cs, "lookup_order", map[string]any{"order_id": "o1"})
	require.False(t, res.IsError, "%v", res.Content)
	c := g.origins["lookup_order"].Last().Claims
	require.NotNil(t, c)
	require.Equal(t, g.agent.ClientID, c.ClientID, "the token's client")
	require.NotEmpty(t, c.Account)
	require.Equal(t, []string{"orders:read"}, c.Scopes)
	require.Empty(t, c.SID, "the call belongs to no Session")
	require.Empty(t, c.UserID)

	// Without a Session there is no signed-out call, even where the
	// Company allows signed-out calls: the challenge sends the client to
	// sign in.
	_, err = connect("harbor", "")
	require.Error(t, err)
	req, err := http.NewRequest(http.MethodPost, g.issuer("harbor")+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := g.env.Client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+g.metadataURL("harbor")+`"`)

	// A default token is still refused: only tokens issued for the server.
	def := g.signIn(t, []string{"orders:read"}, "")
	_, err = connect("stormline", def)
	require.Error(t, err)
}
