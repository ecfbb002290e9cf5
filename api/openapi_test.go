package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	webops "github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/testkit"
)

// operations is every route the server serves, as "METHOD /path/template".
// The document must describe exactly these, and the contract test drives
// each of them. A new route is added here, to openapi.yaml and to the test
// together.
var operations = []string{
	"GET /healthz",
	"GET /readyz",
	"GET /metrics",
	"POST /admin/v1/companies",
	"GET /admin/v1/companies",
	"GET /admin/v1/companies/{slug}",
	"PATCH /admin/v1/companies/{slug}",
	"DELETE /admin/v1/companies/{slug}",
	"POST /admin/v1/companies/{slug}/accounts",
	"POST /admin/v1/companies/{slug}/api-keys",
	"GET /admin/v1/companies/{slug}/api-keys",
	"DELETE /admin/v1/companies/{slug}/api-keys/{id}",
	"GET /admin/v1/companies/{slug}/feedback",
	"POST /admin/v1/companies/{slug}/sessions/end",
	"POST /admin/v1/companies/{slug}/keys/rotate",
	"POST /admin/v1/companies/{slug}/operations/{operation_id}/resolve",
	"GET /admin/v1/companies/{slug}/apis",
	"PUT /admin/v1/companies/{slug}/apis/{name}",
	"GET /admin/v1/companies/{slug}/apis/{name}",
	"DELETE /admin/v1/companies/{slug}/apis/{name}",
	"GET /admin/v1/companies/{slug}/tools",
	"PUT /admin/v1/companies/{slug}/tools/{name}",
	"GET /admin/v1/companies/{slug}/tools/{name}",
	"DELETE /admin/v1/companies/{slug}/tools/{name}",
	"GET /admin/v1/companies/{slug}/operations",
	"GET /admin/v1/companies/{slug}/operations/{operation_id}",
	"POST /admin/v1/operator-tokens",
	"DELETE /admin/v1/operator-tokens/{id}",
	"GET /company/v1/company",
	"GET /company/v1/feedback",
	"POST /company/v1/sessions/end",
	"POST /company/v1/web-sessions/introspect",
	"POST /company/v1/web-sessions/end",
	"GET /company/v1/conversations",
	"POST /company/v1/conversations/webhook-secret",
	"GET /company/v1/conversations/{conversation_id}",
	"GET /company/v1/conversations/{conversation_id}/events",
	"POST /company/v1/conversations/{conversation_id}/messages",
	"POST /company/v1/conversations/{conversation_id}/deltas",
	"POST /company/v1/conversations/{conversation_id}/status",
	"POST /company/v1/conversations/{conversation_id}/join",
	"POST /company/v1/conversations/{conversation_id}/handoff-unavailable",
	"POST /company/v1/conversations/{conversation_id}/user-requested",
	"POST /company/v1/operations/{operation_id}/resolve",
	"POST /company/v1/conversations/{conversation_id}/authorization",
	"POST /company/v1/conversations/{conversation_id}/close",
	"GET /company/v1/apis",
	"PUT /company/v1/apis/{name}",
	"GET /company/v1/apis/{name}",
	"DELETE /company/v1/apis/{name}",
	"GET /company/v1/tools",
	"PUT /company/v1/tools/{name}",
	"GET /company/v1/tools/{name}",
	"DELETE /company/v1/tools/{name}",
	"GET /company/v1/operations",
	"GET /company/v1/operations/{operation_id}",
	"GET /.well-known/oauth-authorization-server/t/{slug}",
	"GET /t/{slug}/poppy/excluded-tasks.json",
	"GET /t/{slug}/oauth/authorize",
	"POST /t/{slug}/oauth/authorize",
	"POST /t/{slug}/oauth/token",
	"POST /t/{slug}/oauth/device_authorization",
	"POST /t/{slug}/oauth/revoke",
	"POST /t/{slug}/oauth/introspect",
	"GET /t/{slug}/oauth/jwks.json",
	"GET /t/{slug}/device",
	"POST /t/{slug}/device",
	"GET /t/{slug}/account",
	"POST /t/{slug}/account",
	"POST /t/{slug}/poppy/feedback",
	"POST /t/{slug}/poppy/operations",
	"POST /t/{slug}/poppy/conversations",
	"POST /t/{slug}/poppy/conversations/{conversation_id}/messages",
	"GET /t/{slug}/poppy/conversations/{conversation_id}/events",
	"POST /t/{slug}/poppy/conversations/{conversation_id}/handoff",
	"POST /t/{slug}/poppy/conversations/{conversation_id}/close",
	"GET /t/{slug}/api/{name}/{path}",
	"POST /t/{slug}/api/{name}/{path}",
	"PUT /t/{slug}/api/{name}/{path}",
	"PATCH /t/{slug}/api/{name}/{path}",
	"DELETE /t/{slug}/api/{name}/{path}",
	"GET /t/{slug}/openapi/{name}.json",
	"POST /t/{slug}/mcp",
	"GET /.well-known/oauth-protected-resource/t/{slug}/mcp",
	"GET /.well-known/poppy.json",
	"GET /.well-known/oauth-protected-resource",
	"GET /poppy/browser-session",
	"POST /poppy/browser-session",
	"POST /poppy/browser-session/authorize",
}

// companyDomainPaths are served on Company domains, not the platform host.
var companyDomainPaths = []string{"/.well-known/poppy.json", "/.well-known/oauth-protected-resource",
	"/poppy/browser-session", "/poppy/browser-session/authorize"}

// unexercisedStatuses are documented statuses the test cannot provoke
// against a healthy server: a status of every operation, or "METHOD /path
// status" for one operation.
var unexercisedStatuses = map[string]bool{
	"500": true,
	// A token lookup that fails in the database.
	"POST /t/{slug}/oauth/revoke 503": true,
	// Password checking at its limit: a flood of sign-ins, which
	// internal/issuer's TestLoginFloodStaysBounded sends to the account
	// page; the authorization and device pages share its login step.
	"POST /t/{slug}/account 503":         true,
	"POST /t/{slug}/oauth/authorize 503": true,
	"POST /t/{slug}/device 503":          true,
}

func init() {
	// The issuer's pages and key set, and event streams, for response
	// validation.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/jwk-set+json", openapi3filter.JSONBodyDecoder)
}

// loadDocument loads and validates openapi.yaml.
func loadDocument(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context,
		openapi3.EnableMultiError(),
		openapi3.EnableSchemaFormatValidation(),
		openapi3.EnableSchemaPatternValidation(),
		openapi3.EnableSchemaDefaultsValidation(),
		openapi3.EnableExamplesValidation(),
	))
	return doc
}

// documentedOperations lists the document's operations as "METHOD /path".
func documentedOperations(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

func TestDocument(t *testing.T) {
	doc := loadDocument(t)
	assert.True(t, doc.IsOpenAPI31OrLater())

	want := slices.Clone(operations)
	sort.Strings(want)
	assert.Equal(t, want, documentedOperations(doc),
		"openapi.yaml and the list of served routes in this test differ")

	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		onCompanyDomain := slices.Contains(companyDomainPaths, path)
		if onCompanyDomain {
			require.Len(t, item.Servers, 1, "%s is served on Company domains", path)
			assert.Equal(t, "https://{domain}", item.Servers[0].URL)
		} else {
			assert.Empty(t, item.Servers, "%s is served on the platform host", path)
		}
		for method, op := range item.Operations() {
			name := method + " " + path
			require.NotEmpty(t, op.OperationID, name)
			if prev, dup := ids[op.OperationID]; dup {
				t.Errorf("operationId %s is used by %s and %s", op.OperationID, prev, name)
			}
			ids[op.OperationID] = name
			switch {
			case strings.HasPrefix(path, "/admin/v1/"):
				assert.Equal(t, openapi3.SecurityRequirements{{"operatorToken": {}}}, *op.Security, name)
			case strings.HasPrefix(path, "/company/v1/"), path == "/t/{slug}/oauth/introspect":
				assert.Equal(t, openapi3.SecurityRequirements{{"companyAPIKey": {}}}, *op.Security, name)
			case strings.HasPrefix(path, "/t/{slug}/poppy/conversations"), strings.HasPrefix(path, "/t/{slug}/api/"),
				path == "/poppy/browser-session/authorize", path == "/t/{slug}/poppy/operations":
				// Signed out or signed in (spec 8.2, 6 step 2); at the
				// gateway the API's own description decides which (spec 7).
				assert.Equal(t, openapi3.SecurityRequirements{{}, {"agentAccessToken": {}}}, *op.Security, name)
			case path == "/t/{slug}/mcp":
				// Signed out where mcp.signed_out allows it, else a token
				// issued for the server (spec 7).
				assert.Equal(t, openapi3.SecurityRequirements{{}, {"mcpAccessToken": {}}}, *op.Security, name)
			default:
				assert.Nil(t, op.Security, name)
			}
			if op.RequestBody != nil && strings.HasPrefix(path, "/admin/v1/") {
				for ct, mt := range op.RequestBody.Value.Content {
					s := mt.Schema.Value
					require.NotNil(t, s.AdditionalProperties.Has, "%s %s: admin bodies reject unknown members", name, ct)
					assert.False(t, *s.AdditionalProperties.Has, "%s %s: admin bodies reject unknown members", name, ct)
				}
			}
		}
	}
	assert.Len(t, doc.Servers, 1)
}

// contract drives the running platform and checks every exchange against
// the document.
type contract struct {
	env    *testkit.Env
	doc    *openapi3.T
	router routers.Router
	// seen records the statuses each operation answered.
	seen map[string]map[string]bool
}

func newContract(t *testing.T, env *testkit.Env) *contract {
	doc := loadDocument(t)
	// The test server answers every host on one port, so route by path
	// alone: drop the servers, which the router would match host and port
	// against.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &contract{env: env, doc: doc, router: router, seen: map[string]map[string]bool{}}
}

// call is one request and what it should get.
type call struct {
	method string
	host   string // default: the platform host
	path   string // path and query
	body   any    // nil, string or []byte sent as is, or a value sent as JSON
	ctype  string // Content-Type; application/json when there is a body
	token  string // bearer token, if any
	want   int
	// docRejects marks a request that breaks the document itself (a missing
	// token, a body or parameter its schemas forbid). The document must
	// reject it as the server does, so it is never looser than the server
	// where it can say so.
	docRejects bool
	// session, when set, signs the request with a Session header.
	session func(*http.Request)
	// client, when set, sends the request instead of the test's client:
	// a browser that keeps cookies (testkit.Env.Browser).
	client *http.Client
	// header holds more request headers, such as Accept.
	header map[string]string
	// frames, for an event stream that does not end by itself, is how
	// many frames (comments aside) to read before hanging up; the body is
	// what was read. opened, when set, runs once the response's headers
	// have arrived.
	frames int
	opened func()
}

func (k call) rawBody(t testing.TB) []byte {
	switch b := k.body.(type) {
	case nil:
		return nil
	case string:
		return []byte(b)
	case []byte:
		return b
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		return raw
	}
}

func (k call) newRequest(t testing.TB, url string, raw []byte) *http.Request {
	var body io.Reader
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(k.method, url, body)
	require.NoError(t, err)
	if raw != nil {
		ct := k.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if k.token != "" {
		req.Header.Set("Authorization", "Bearer "+k.token)
	}
	for name, v := range k.header {
		req.Header.Set(name, v)
	}
	if k.session != nil {
		k.session(req)
	}
	return req
}

func (k call) hostOrDefault() string {
	if k.host == "" {
		return testkit.PublicHost
	}
	return k.host
}

// send makes the request on the test server.
func (c *contract) send(t testing.TB, k call) (*testkit.Response, []byte) {
	t.Helper()
	raw := k.rawBody(t)
	req := k.newRequest(t, c.env.URL(k.hostOrDefault(), k.path), raw)
	client := c.env.Client
	if k.client != nil {
		client = k.client
	}
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	resp, err := client.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	if k.opened != nil {
		k.opened()
	}
	var body []byte
	if k.frames > 0 && resp.StatusCode == http.StatusOK {
		body = readFrames(t, resp.Body, k.frames)
	} else {
		body, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
	}
	return &testkit.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, raw
}

// readFrames reads server-sent events until n frames other than comments
// have arrived, and returns them all.
func readFrames(t testing.TB, r io.Reader, n int) []byte {
	t.Helper()
	var out bytes.Buffer
	lines := bufio.NewReader(r)
	frame := ""
	for n > 0 {
		line, err := lines.ReadString('\n')
		require.NoError(t, err, "the stream ended after %q", out.String())
		out.WriteString(line)
		if line != "\n" {
			frame += line
			continue
		}
		if !strings.HasPrefix(frame, ":") {
			n--
		}
		frame = ""
	}
	return out.Bytes()
}

// bearerAuth checks that a bearer token is present; whether it is valid is
// the server's business.
func bearerAuth(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme.Type != "http" || in.SecurityScheme.Scheme != "bearer" {
		return fmt.Errorf("unexpected security scheme %s", in.SecuritySchemeName)
	}
	tok, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// do sends a documented request and validates the request and the
// response against the document.
func (c *contract) do(t testing.TB, k call) *testkit.Response {
	t.Helper()
	resp, raw := c.send(t, k)
	name := k.method + " " + k.hostOrDefault() + k.path
	require.Equal(t, k.want, resp.Status, "%s: %s", name, resp.Body)

	vreq := k.newRequest(t, "https://"+k.hostOrDefault()+k.path, raw)
	route, params, err := c.router.FindRoute(vreq)
	require.NoError(t, err, "%s is not in the document", name)
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerAuth, MultiError: true},
	}
	err = openapi3filter.ValidateRequest(context.Background(), in)
	if k.docRejects {
		require.Error(t, err, "%s: the document accepts a request the server refuses (%d)", name, resp.Status)
		first, _, _ := strings.Cut(err.Error(), "\n")
		t.Logf("%s (%d): the document rejects it too: %s", name, resp.Status, first)
	} else {
		require.NoError(t, err, "%s: request does not match the document", name)
	}

	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.Status,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(resp.Body)
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out),
		"%s: %d response does not match the document: %s", name, resp.Status, resp.Body)

	op := route.Method + " " + route.Path
	if c.seen[op] == nil {
		c.seen[op] = map[string]bool{}
	}
	code := strconv.Itoa(resp.Status)
	if route.Operation.Responses.Value(code) == nil && route.Operation.Responses.Default() != nil {
		// A status the operation leaves to someone else, such as the
		// gateway's Company origin.
		code = "default"
	}
	c.seen[op][code] = true
	return resp
}

// undocumented sends a request no operation describes (an unknown path, a
// method the path does not serve) and checks its error body against the
// document's Error schema.
func (c *contract) undocumented(t testing.TB, k call, code string) *testkit.Response {
	t.Helper()
	resp, _ := c.send(t, k)
	require.Equal(t, k.want, resp.Status, "%s %s: %s", k.method, k.path, resp.Body)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.NotEmpty(t, resp.Header.Get("X-Request-ID"))
	var v any
	require.NoError(t, json.Unmarshal(resp.Body, &v))
	require.NoError(t, c.doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()))
	assert.Equal(t, code, v.(map[string]any)["error"])
	return resp
}

// incomplete reports whether a request to the operation that sends only
// its path parameters breaks the document: the operation needs a body, a
// credential or another parameter.
func (c *contract) incomplete(method, path string) bool {
	item := c.doc.Paths.Value(path)
	op := item.GetOperation(method)
	if op.Security != nil && !slices.ContainsFunc(*op.Security, func(r openapi3.SecurityRequirement) bool { return len(r) == 0 }) ||
		op.RequestBody != nil && op.RequestBody.Value.Required {
		return true
	}
	for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
		if p.Value.In != openapi3.ParameterInPath && p.Value.Required {
			return true
		}
	}
	return false
}

// checkCoverage fails for every documented status no request produced.
func (c *contract) checkCoverage(t *testing.T) {
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			for code := range op.Responses.Map() {
				if unexercisedStatuses[code] || unexercisedStatuses[name+" "+code] {
					continue
				}
				assert.True(t, c.seen[name][code], "%s: documented status %s was never exercised", name, code)
			}
			for code := range c.seen[name] {
				assert.NotNil(t, op.Responses.Value(code), "%s answered %s, which is not documented", name, code)
			}
		}
	}
}

const skillDigest = "sha256:1b2a8cde934e632f7e14fa080a627ad7191e29d412d2b8a7aa07d9c9ab2f475e"

// fullCompany sets every setting a Company has.
func fullCompany() map[string]any {
	return map[string]any{
		"slug": "acme",
		"organization": map[string]any{
			"name": "Acme Outfitters", "domain": "acme.example", "logo_uri": "https://cdn.acme.example/logo.png",
		},
		"domains": []string{"acme.example.co.uk"},
		"auth": map[string]any{
			"issuer":      true,
			"disabled":    false,
			"grant_types": []string{"authorization_code", "urn:ietf:params:oauth:grant-type:device_code"},
			"scopes": map[string]string{
				"orders:read":  "See your orders",
				"orders:write": "Place, change and return orders",
			},
			"scope_hints": map[string]any{
				"orders:read":  map[string]any{"changes": "none", "personal_data": true},
				"orders:write": map[string]any{"changes": "reversible", "personal_data": true},
			},
			"other_authorization_servers": []string{"https://staff-auth.acme.example"},
			"token_lifetimes":             map[string]any{"access_seconds": 600, "refresh_seconds": 86400},
		},
		// No agent_webhook: acme's conversations wait idle for its staff
		// (the update test sets one).
		"conversations": map[string]any{"enabled": true, "access": "signed_in", "handoff_timeout_seconds": 600,
			"handoff_unavailable_message": "Nobody is free right now.", "idle_close_seconds": 86400, "retention_days": 30},
		"feedback": map[string]any{"enabled": true, "alternatives": []any{
			map[string]any{"task": "Pay with a gift card", "alternative": map[string]any{
				"instructions": "Gift cards are applied with the payment API.",
				"references": []any{
					map[string]any{"type": "openapi", "url": "https://api.acme.example/openapi.json", "operation_id": "applyGiftCard"},
				},
			}},
			map[string]any{"task": "Find my size", "alternative": map[string]any{
				"references": []any{map[string]any{"type": "mcp", "url": "https://mcp.acme.example/mcp"}},
			}},
		}},
		"agents": map[string]any{"accept": "unlisted", "client_ids": []string{"https://blocked.example/agent.json"},
			"sign_in_refused": map[string]any{"https://no-sign-in.example/agent.json": []string{}}},
		"sessions":    map[string]any{"idle_timeout_seconds": 86400},
		"rate_limits": map[string]any{"per_agent": 3000, "per_session": 300, "per_address": 900},
		"excluded_tasks": []any{
			map[string]any{
				"task": "Send a wire transfer",
				"alternative": map[string]any{
					"instructions": "Wire transfers are made in the Acme app.",
					"references": []any{
						map[string]any{"type": "web", "url": "https://acme.example/wire"},
						map[string]any{"type": "openapi", "url": "https://api.acme.example/openapi.json", "operation_id": "createTransfer"},
					},
				},
			},
			map[string]any{"task": "Close an account"},
		},
		"apis": []any{
			map[string]any{"type": "openapi", "url": "https://api.acme.example/openapi.json", "description": "Orders and returns"},
			map[string]any{"type": "mcp", "url": "https://mcp.acme.example/mcp"},
		},
		"mcp":        map[string]any{"signed_out": false, "description": "Order tools"},
		"operations": map[string]any{"enabled": false, "web": false},
		"web": map[string]any{"browser_join": true, "origin": "https://www.acme.example",
			"cookie_name": "acme_poppy", "cookie_domain": "acme.example", "landing_path": "/welcome",
			"scope_rules": []any{
				map[string]any{"path": "/orders", "scopes": []string{"orders:read"}},
				map[string]any{"path": "/orders", "methods": []string{"POST", "DELETE"}, "scopes": []string{"orders:read", "orders:write"}},
			}},
		"extensions": map[string]any{
			"acme.example/gift-wrap": map[string]any{"version": "1", "endpoint": "https://api.acme.example/poppy/gift-wrap"},
			"mediated-sign-in":       map[string]any{"version": "1"},
		},
		"skill_index": map[string]any{
			"$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
			"skills": []any{map[string]any{
				"name": "manage-orders", "description": "Manage the User's orders.", "type": "skill-md",
				"url": "skills/manage-orders/SKILL.md", "digest": skillDigest,
			}},
		},
	}
}

// padded is body followed by enough JSON whitespace to exceed limit: still
// a valid document, but too large.
func padded(t testing.TB, body any, limit int) string {
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	return string(raw) + strings.Repeat(" ", limit)
}

// formField is the value of the first input named name in an HTML page,
// or "".
func formField(t testing.TB, page []byte, name string) string {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			require.ErrorIs(t, z.Err(), io.EOF)
			return ""
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			if tok.Data != "input" {
				continue
			}
			var n, v string
			for _, a := range tok.Attr {
				switch a.Key {
				case "name":
					n = a.Val
				case "value":
					v = a.Val
				}
			}
			if n == name {
				return v
			}
		}
	}
}

// conversationRead is a read of a conversation's events (spec 8.5).
type conversationRead struct {
	ConversationID string           `json:"conversation_id"`
	Events         []map[string]any `json:"events"`
	Cursor         string           `json:"cursor"`
	HasMore        bool             `json:"has_more"`
	Status         string           `json:"status"`
	Responder      string           `json:"responder"`
}

// types lists the events' types.
func (rd conversationRead) types() []string {
	var out []string
	for _, e := range rd.Events {
		out = append(out, e["type"].(string))
	}
	return out
}

func decode[T any](t testing.TB, r *testkit.Response) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(r.Body, &v), "%s", r.Body)
	return v
}

func TestContract(t *testing.T) {
	env := testkit.Setup(t)
	c := newContract(t, env)
	const (
		admin = testkit.AdminToken
		bogus = "not-a-valid-token"
		get   = http.MethodGet
		post  = http.MethodPost
		patch = http.MethodPatch
		put   = http.MethodPut
		del   = http.MethodDelete
	)
	issuer := env.PublicURL("/t/acme")
	// agent is the Personal Agent that sends feedback and starts Sessions.
	agent := env.StartAgent(t, "")
	// signIn has an account of acme sign in through Direct Sign-In (spec
	// 4.2) and returns agent's access token for it.
	signIn := func(t *testing.T, username, password string) string {
		t.Helper()
		return env.SignIn(t, agent, issuer, username, password, []string{"orders:read"}, "").AccessToken
	}

	t.Run("operations", func(t *testing.T) {
		r := c.do(t, call{method: get, path: "/healthz", want: 200})
		assert.JSONEq(t, `{"status":"ok"}`, string(r.Body))
		r = c.do(t, call{method: get, path: "/readyz", want: 200})
		assert.JSONEq(t, `{"status":"ok"}`, string(r.Body))
		r = c.do(t, call{method: get, path: "/metrics", want: 200})
		assert.Contains(t, string(r.Body), "poppyhost_http_requests_total")
	})

	var acme map[string]any
	t.Run("create companies", func(t *testing.T) {
		r := c.do(t, call{method: post, path: "/admin/v1/companies", body: fullCompany(), token: admin, want: 201})
		assert.Equal(t, "/admin/v1/companies/acme", r.Header.Get("Location"))
		acme = r.JSON(t)
		assert.Equal(t, issuer, acme["identifier"])
		assert.Equal(t, issuer, acme["issuer"])
		// Every setting comes back as it was sent.
		for k, v := range fullCompany() {
			want, _ := json.Marshal(v)
			got, _ := json.Marshal(acme[k])
			assert.JSONEq(t, string(want), string(got), k)
		}

		// Defaults: an issuer with both sign-in types (grant_types left
		// out), conversations and feedback on, every Personal Agent
		// accepted, 30-day Sessions and the default rate limits.
		r = c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"minimal","organization":{"name":"Minimal","domain":"minimal.example"}}`})
		m := r.JSON(t)
		assert.Equal(t, env.PublicURL("/t/minimal"), m["identifier"])
		assert.Equal(t, map[string]any{"issuer": true, "disabled": false,
			"scopes": map[string]any{}, "scope_hints": map[string]any{}, "other_authorization_servers": []any{},
			"token_lifetimes": map[string]any{"access_seconds": float64(0), "refresh_seconds": float64(0)}}, m["auth"])
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "handoff_timeout_seconds": float64(0),
			"idle_close_seconds": float64(0), "retention_days": float64(0)}, m["conversations"])
		assert.Equal(t, map[string]any{"enabled": true, "alternatives": []any{}}, m["feedback"])
		assert.Equal(t, map[string]any{"accept": "all", "client_ids": []any{}, "sign_in_refused": map[string]any{}}, m["agents"])
		assert.Equal(t, map[string]any{"idle_timeout_seconds": float64(2592000)}, m["sessions"])
		assert.Equal(t, map[string]any{"per_agent": float64(6000), "per_session": float64(600), "per_address": float64(1200)}, m["rate_limits"])
		assert.Equal(t, map[string]any{"signed_out": false}, m["mcp"])
		assert.Equal(t, map[string]any{"enabled": false, "web": false}, m["operations"])
		assert.NotContains(t, m, "skill_index")

		// Without an issuer the Company is identified by its domain.
		r = c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"corner","organization":{"name":"Corner Shop","domain":"corner.example"},
				"auth":{"issuer":false},"feedback":{"enabled":false}}`})
		m = r.JSON(t)
		assert.Equal(t, "https://corner.example", m["identifier"])
		assert.NotContains(t, m, "issuer")
		assert.NotContains(t, m["auth"], "grant_types", "no sign-in types without an issuer")

		// A skill index without skills is stored with an empty list.
		r = c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"skills","organization":{"name":"Skills","domain":"skills.example"},
				"skill_index":{"$schema":"https://schemas.agentskills.io/discovery/0.2.0/schema.json"}}`})
		assert.Equal(t, []any{}, r.JSON(t)["skill_index"].(map[string]any)["skills"])
		c.do(t, call{method: del, path: "/admin/v1/companies/skills", token: admin, want: 204})
	})

	t.Run("create company errors", func(t *testing.T) {
		path := "/admin/v1/companies"
		ok := `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"}}`

		r := c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},"colour":"red"}`})
		assert.Equal(t, []any{map[string]any{"field": "colour", "message": "unknown field"}}, r.JSON(t)["fields"])
		r = c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
			body: `{"slug":"Not A Slug","organization":{"name":"Fresh","domain":"fresh.example"}}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"slug":`})
		r = c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},"domains":"x.example"}`})
		assert.Equal(t, "domains", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// Rules the schema cannot state: extra domains need an issuer.
		r = c.do(t, call{method: post, path: path, token: admin, want: 400,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},
				"domains":["fresh2.example"],"auth":{"issuer":false}}`})
		assert.Equal(t, "domains", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// ... nor that a feedback task is listed once, ignoring case.
		r = c.do(t, call{method: post, path: path, token: admin, want: 400,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},"feedback":{"alternatives":[
				{"task":"Pay with a gift card","alternative":{"instructions":"A"}},{"task":"pay with a GIFT card ","alternative":{"instructions":"B"}}]}}`})
		assert.Equal(t, "feedback.alternatives[1].task", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// The new settings' limits are in the schema too.
		for _, bad := range []string{
			`"sessions":{"idle_timeout_seconds":59}`,
			`"sessions":{"idle_timeout_seconds":31622401}`,
			`"rate_limits":{"per_agent":0}`,
			`"rate_limits":{"per_address":1000001}`,
			`"agents":{"accept":"some"}`,
			`"agents":{"client_ids":["http://agent.example/agent.json"]}`,
			`"feedback":{"alternatives":[{"task":"T"}]}`,
			`"auth":{"other_authorization_servers":["https://a.example","https://a.example"]}`,
			`"auth":{"token_lifetimes":{"access_seconds":59}}`,
			`"auth":{"token_lifetimes":{"access_seconds":86401}}`,
			`"auth":{"token_lifetimes":{"refresh_seconds":3599}}`,
			`"auth":{"token_lifetimes":{"refresh_seconds":31536001}}`,
			`"agents":{"sign_in_refused":{"http://agent.example/agent.json":[]}}`,
			`"agents":{"sign_in_refused":{"https://agent.example/agent.json":["password"]}}`,
			`"mcp":{"signed_out":"yes"}`,
			`"mcp":{"description":"` + strings.Repeat("d", 1001) + `"}`,
		} {
			c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
				body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},` + bad + `}`})
		}

		r = c.do(t, call{method: post, path: path, token: admin, want: 409,
			body: `{"slug":"acme","organization":{"name":"Other","domain":"other.example"}}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		r = c.do(t, call{method: post, path: path, token: admin, want: 409,
			body: `{"slug":"copycat","organization":{"name":"Copycat","domain":"acme.example.co.uk"}}`})
		assert.Contains(t, r.JSON(t)["error_description"], "acme.example.co.uk")
		assert.Equal(t, "organization.domain", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])

		c.do(t, call{method: post, path: path, token: admin, want: 413, body: padded(t, fullCompany(), 256<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, body: ok, ctype: "text/plain"})

		r = c.do(t, call{method: post, path: path, want: 401, docRejects: true, body: ok})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: path, token: bogus, want: 401, body: ok})

		// Nothing was created.
		c.do(t, call{method: get, path: path + "/fresh", token: admin, want: 404})
		c.do(t, call{method: get, path: path + "/copycat", token: admin, want: 404})
	})

	t.Run("list companies", func(t *testing.T) {
		path := "/admin/v1/companies"
		type list struct {
			Companies []map[string]any `json:"companies"`
			Next      string           `json:"next"`
		}
		slugs := func(l list) (out []string) {
			for _, c := range l.Companies {
				out = append(out, c["slug"].(string))
			}
			return out
		}
		l := decode[list](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		assert.Equal(t, []string{"acme", "corner", "minimal"}, slugs(l))
		assert.Empty(t, l.Next)
		l = decode[list](t, c.do(t, call{method: get, path: path + "?limit=2", token: admin, want: 200}))
		assert.Equal(t, []string{"acme", "corner"}, slugs(l))
		assert.Equal(t, "corner", l.Next)
		l = decode[list](t, c.do(t, call{method: get, path: path + "?limit=2&after=corner", token: admin, want: 200}))
		assert.Equal(t, []string{"minimal"}, slugs(l))
		assert.Empty(t, l.Next)

		for _, q := range []string{"0", "501", "ten"} {
			r := c.do(t, call{method: get, path: path + "?limit=" + q, token: admin, want: 400, docRejects: true})
			assert.Equal(t, "limit", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		}
		c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		c.do(t, call{method: get, path: path, token: bogus, want: 401})
	})

	t.Run("get company", func(t *testing.T) {
		r := c.do(t, call{method: get, path: "/admin/v1/companies/acme", token: admin, want: 200})
		assert.Equal(t, acme, r.JSON(t))
		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/Not_A_Slug", token: admin, want: 404, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/companies/acme", want: 401, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/companies/acme", token: bogus, want: 401})
	})

	t.Run("discovery", func(t *testing.T) {
		// poppy.json names the domain that served it.
		for _, domain := range []string{"acme.example", "acme.example.co.uk"} {
			r := c.do(t, call{method: get, host: domain, path: "/.well-known/poppy.json", want: 200})
			assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
			doc := r.JSON(t)
			assert.Equal(t, "0.3", doc["protocol_version"])
			assert.Equal(t, map[string]any{"name": "Acme Outfitters", "domain": domain,
				"logo_uri": "https://cdn.acme.example/logo.png"}, doc["organization"])
			auth := doc["auth"].(map[string]any)
			assert.Equal(t, issuer, auth["issuer"], "several authorization servers: poppy.json names the issuer")
			assert.Len(t, auth["scopes"], 2)
			assert.Equal(t, map[string]any{"protocols": []any{map[string]any{"type": "poppy",
				"endpoint": issuer + "/poppy/conversations", "access": "signed_in"}}}, doc["agent"])
			// On the port poppy.json was fetched at (the test's, not 443).
			assert.Equal(t, map[string]any{"browser_session_endpoint": c.env.URL(domain, "/poppy/browser-session")}, doc["web"])
			assert.Equal(t, map[string]any{"endpoint": issuer + "/poppy/feedback"}, doc["feedback"])
			assert.Equal(t, map[string]any{"url": issuer + "/poppy/excluded-tasks.json"}, doc["excluded_tasks"])
			assert.Equal(t, acme["apis"], doc["apis"])
			assert.Equal(t, acme["extensions"], doc["extensions"])
			assert.Equal(t, acme["skill_index"], doc["skill_index"])

			r = c.do(t, call{method: get, host: domain, path: "/.well-known/oauth-protected-resource", want: 200})
			assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
			assert.Equal(t, map[string]any{"resource": "https://" + domain,
				"authorization_servers":    []any{issuer, "https://staff-auth.acme.example"},
				"bearer_methods_supported": []any{"header"}}, r.JSON(t))
		}

		// Without an issuer: no auth member, and 404 for the protected
		// resource metadata (spec 3.2).
		r := c.do(t, call{method: get, host: "corner.example", path: "/.well-known/poppy.json", want: 200})
		doc := r.JSON(t)
		assert.NotContains(t, doc, "auth")
		assert.NotContains(t, doc, "feedback")
		assert.NotContains(t, doc, "excluded_tasks")
		assert.Equal(t, env.PublicURL("/t/corner/poppy/conversations"),
			doc["agent"].(map[string]any)["protocols"].([]any)[0].(map[string]any)["endpoint"])
		c.do(t, call{method: get, host: "corner.example", path: "/.well-known/oauth-protected-resource", want: 404})

		// A host that is no Company's domain.
		c.do(t, call{method: get, host: "unknown.example", path: "/.well-known/poppy.json", want: 404})
		c.do(t, call{method: get, host: "unknown.example", path: "/.well-known/oauth-protected-resource", want: 404})

		// The issuer's metadata.
		r = c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/acme", want: 200})
		assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
		as := r.JSON(t)
		assert.Equal(t, issuer, as["issuer"])
		assert.Equal(t, issuer+"/oauth/authorize", as["authorization_endpoint"])
		assert.Equal(t, issuer+"/oauth/token", as["token_endpoint"])
		assert.Equal(t, issuer+"/oauth/revoke", as["revocation_endpoint"])
		assert.Equal(t, issuer+"/oauth/device_authorization", as["device_authorization_endpoint"])
		assert.Equal(t, issuer+"/oauth/jwks.json", as["jwks_uri"])
		assert.Equal(t, issuer+"/oauth/introspect", as["introspection_endpoint"])
		assert.Equal(t, []any{"refresh_token", "authorization_code", "urn:ietf:params:oauth:grant-type:device_code"}, as["grant_types_supported"])
		assert.Equal(t, []any{"orders:read", "orders:write"}, as["scopes_supported"])
		assert.Equal(t, []any{"https://acme.example", "https://acme.example.co.uk"}, as["protected_resources"])
		c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/corner", want: 404})
		c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/nosuch", want: 404})

		// Excluded tasks.
		r = c.do(t, call{method: get, path: "/t/acme/poppy/excluded-tasks.json", want: 200})
		assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
		assert.Equal(t, map[string]any{"tasks": acme["excluded_tasks"]}, r.JSON(t))
		c.do(t, call{method: get, path: "/t/minimal/poppy/excluded-tasks.json", want: 404})
		c.do(t, call{method: get, path: "/t/nosuch/poppy/excluded-tasks.json", want: 404})
	})

	t.Run("update company", func(t *testing.T) {
		path := "/admin/v1/companies/minimal"
		r := c.do(t, call{method: patch, path: path, token: admin, want: 200, ctype: "application/merge-patch+json",
			body: `{"organization":{"name":"Minimal Ltd"},"auth":{"disabled":true,"scopes":{"orders:read":"See your orders"}},
				"excluded_tasks":[{"task":"Close an account"}],"conversations":{"enabled":false}}`})
		m := r.JSON(t)
		assert.Equal(t, map[string]any{"name": "Minimal Ltd", "domain": "minimal.example"}, m["organization"])
		assert.Equal(t, true, m["auth"].(map[string]any)["disabled"])
		assert.Equal(t, m["created_at"], c.do(t, call{method: get, path: path, token: admin, want: 200}).JSON(t)["created_at"])

		// Sign-in off: the metadata offers only refresh, poppy.json says so.
		as := c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/minimal", want: 200}).JSON(t)
		assert.Equal(t, []any{"refresh_token"}, as["grant_types_supported"])
		assert.NotContains(t, as, "response_types_supported", "RFC 8414 section 3.2: empty lists are left out")
		assert.NotContains(t, as, "authorization_endpoint")
		assert.NotContains(t, as, "device_authorization_endpoint")
		doc := c.do(t, call{method: get, host: "minimal.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, map[string]any{"disabled": true, "scopes": map[string]any{"orders:read": "See your orders"}}, doc["auth"])
		assert.NotContains(t, doc, "agent")
		c.do(t, call{method: get, path: "/t/minimal/poppy/excluded-tasks.json", want: 200})

		// Plain JSON works too, and null resets a setting to its default.
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200,
			body: `{"auth":{"disabled":null,"scopes":{"orders:read":null}},"conversations":null,"slug":"minimal"}`})
		m = r.JSON(t)
		assert.Equal(t, false, m["auth"].(map[string]any)["disabled"])
		assert.Equal(t, map[string]any{}, m["auth"].(map[string]any)["scopes"])
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "handoff_timeout_seconds": float64(0),
			"idle_close_seconds": float64(0), "retention_days": float64(0)}, m["conversations"])

		// The new settings, changed and reset.
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200,
			body: `{"agents":{"accept":"listed","client_ids":["https://agent.example/agent.json"]},"sessions":{"idle_timeout_seconds":3600},
				"rate_limits":{"per_session":60},"feedback":{"alternatives":[{"task":"Close an account","alternative":{"instructions":"Call us."}}]},
				"conversations":{"agent_webhook":"https://agent.minimal.example/poppy","retention_days":7}}`})
		m = r.JSON(t)
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "agent_webhook": "https://agent.minimal.example/poppy",
			"handoff_timeout_seconds": float64(0), "idle_close_seconds": float64(0), "retention_days": float64(7)}, m["conversations"])
		assert.Equal(t, map[string]any{"accept": "listed", "client_ids": []any{"https://agent.example/agent.json"},
			"sign_in_refused": map[string]any{}}, m["agents"])
		assert.Equal(t, map[string]any{"idle_timeout_seconds": float64(3600)}, m["sessions"])
		assert.Equal(t, map[string]any{"per_agent": float64(6000), "per_session": float64(60), "per_address": float64(1200)}, m["rate_limits"])
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200,
			body: `{"agents":null,"sessions":null,"rate_limits":{"per_session":null},"feedback":{"alternatives":null},
				"conversations":{"agent_webhook":null,"retention_days":null}}`})
		m = r.JSON(t)
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "handoff_timeout_seconds": float64(0),
			"idle_close_seconds": float64(0), "retention_days": float64(0)}, m["conversations"])
		assert.Equal(t, map[string]any{"accept": "all", "client_ids": []any{}, "sign_in_refused": map[string]any{}}, m["agents"])
		assert.Equal(t, map[string]any{"per_agent": float64(6000), "per_session": float64(600), "per_address": float64(1200)}, m["rate_limits"])
		assert.Equal(t, map[string]any{"enabled": true, "alternatives": []any{}}, m["feedback"])
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"sessions":{"idle_timeout_seconds":10}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"rate_limits":{"per_agent":-1}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true,
			body: `{"conversations":{"agent_webhook":"http://agent.minimal.example/poppy"}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"conversations":{"retention_days":3651}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"auth":{"token_lifetimes":{"access_seconds":30}}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true,
			body: `{"agents":{"sign_in_refused":{"https://agent.example/agent.json":["refresh_token"]}}}`})

		r = c.do(t, call{method: patch, path: path, token: admin, want: 400, body: `{"slug":"renamed"}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `[]`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"colour":"red"}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true,
			body: `{"conversations":{"access":"always"}}`})
		// A domain of another Company.
		r = c.do(t, call{method: patch, path: path, token: admin, want: 409, body: `{"domains":["minimal.example.org","acme.example.co.uk"]}`})
		assert.Equal(t, "domains[1]", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: patch, path: path, token: admin, want: 413, body: padded(t, map[string]any{}, 256<<10)})
		c.do(t, call{method: patch, path: path, token: admin, want: 415, docRejects: true, body: `{}`, ctype: "text/plain"})
		c.do(t, call{method: patch, path: "/admin/v1/companies/nosuch", token: admin, want: 404, body: `{}`})
		c.do(t, call{method: patch, path: path, want: 401, docRejects: true, body: `{}`})
		c.do(t, call{method: patch, path: path, token: bogus, want: 401, body: `{}`})
	})

	t.Run("accounts", func(t *testing.T) {
		path := "/admin/v1/companies/acme/accounts"
		r := c.do(t, call{method: post, path: path, token: admin, want: 201, body: `{"username":"alice","password":"correct horse"}`})
		a := r.JSON(t)
		assert.Equal(t, "alice", a["username"])
		assert.NotContains(t, string(r.Body), "correct horse")
		r = c.do(t, call{method: post, path: path, token: admin, want: 409, body: `{"username":"alice","password":"another one"}`})
		assert.Equal(t, []any{map[string]any{"field": "username", "message": "is taken"}}, r.JSON(t)["fields"])
		// The same username at another Company is another account.
		c.do(t, call{method: post, path: "/admin/v1/companies/minimal/accounts", token: admin, want: 201,
			body: `{"username":"alice","password":"correct horse"}`})

		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"username":"bob","password":"short"}`})
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"username":"bob","password":"long enough","admin":true}`})
		r = c.do(t, call{method: post, path: path, token: admin, want: 400, body: `{"username":"bob smith","password":"long enough"}`})
		assert.Equal(t, "username", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: post, path: path, token: admin, want: 413,
			body: padded(t, map[string]string{"username": "bob", "password": "long enough"}, 4<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, ctype: "text/plain",
			body: `{"username":"bob","password":"long enough"}`})
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/accounts", token: admin, want: 404,
			body: `{"username":"bob","password":"long enough"}`})
		c.do(t, call{method: post, path: path, want: 401, docRejects: true, body: `{"username":"bob","password":"long enough"}`})
		c.do(t, call{method: post, path: path, token: bogus, want: 401, body: `{"username":"bob","password":"long enough"}`})
	})

	t.Run("api keys and the company API", func(t *testing.T) {
		path := "/admin/v1/companies/acme/api-keys"
		type key struct {
			ID        int64   `json:"id"`
			Name      string  `json:"name"`
			Key       string  `json:"key"`
			RevokedAt *string `json:"revoked_at"`
		}
		backend := decode[key](t, c.do(t, call{method: post, path: path, token: admin, want: 201, body: `{"name":"backend"}`}))
		assert.Equal(t, "backend", backend.Name)
		unnamed := decode[key](t, c.do(t, call{method: post, path: path, token: admin, want: 201}))
		assert.Empty(t, unnamed.Name)

		list := decode[struct {
			APIKeys []key `json:"api_keys"`
		}](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		require.Len(t, list.APIKeys, 2)
		assert.Equal(t, unnamed.ID, list.APIKeys[0].ID, "newest first")
		assert.Empty(t, list.APIKeys[0].Key, "secrets are shown once")

		// The Company API answers with the key's Company.
		r := c.do(t, call{method: get, path: "/company/v1/company", token: backend.Key, want: 200})
		assert.Equal(t, "acme", r.JSON(t)["slug"])
		r = c.do(t, call{method: get, path: "/company/v1/company", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: "/company/v1/company", token: "phk_" + strings.Repeat("A", 43), want: 401})
		c.do(t, call{method: get, path: "/company/v1/company", token: admin, want: 401})

		// Revoking: at once, twice is fine, and only through its Company.
		c.do(t, call{method: del, path: fmt.Sprintf("/admin/v1/companies/minimal/api-keys/%d", backend.ID), token: admin, want: 404})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, backend.ID), token: admin, want: 204})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, backend.ID), token: admin, want: 204})
		c.do(t, call{method: get, path: "/company/v1/company", token: backend.Key, want: 401})
		c.do(t, call{method: get, path: "/company/v1/company", token: unnamed.Key, want: 200})
		list = decode[struct {
			APIKeys []key `json:"api_keys"`
		}](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		assert.NotNil(t, list.APIKeys[1].RevokedAt)
		assert.Nil(t, list.APIKeys[0].RevokedAt)
		c.do(t, call{method: del, path: path + "/999999", token: admin, want: 404})
		c.do(t, call{method: del, path: path + "/abc", token: admin, want: 404, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", want: 401, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", token: bogus, want: 401})

		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: map[string]string{"name": strings.Repeat("n", 201)}})
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"name":7}`})
		c.do(t, call{method: post, path: path, token: admin, want: 413, body: padded(t, map[string]string{"name": "x"}, 4<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, body: `{}`, ctype: "text/plain"})
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/api-keys", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/api-keys", token: admin, want: 404})
		c.do(t, call{method: post, path: path, want: 401, docRejects: true})
		c.do(t, call{method: post, path: path, token: bogus, want: 401})
		c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		c.do(t, call{method: get, path: path, token: bogus, want: 401})
	})

	t.Run("issuer", func(t *testing.T) {
		// acme's issuer through the document: its keys, a Direct Sign-In
		// through the pages and the tokens it gives, introspection and
		// revocation, Device Sign-In, the account page, and the errors
		// the authorization endpoint shows or sends back.
		const formType = "application/x-www-form-urlencoded"
		base := "/t/acme"
		tokenPath, revokePath, introspectPath := base+"/oauth/token", base+"/oauth/revoke", base+"/oauth/introspect"
		devicePath, accountPath := base+"/oauth/device_authorization", base+"/account"
		// signed adds a fresh client assertion of a to a form (spec 4.1).
		signed := func(a *testkit.Agent, v url.Values) string {
			v.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
			v.Set("client_assertion", a.ClientAssertion(t, issuer))
			return v.Encode()
		}
		oauthError := func(r *testkit.Response) any { return r.JSON(t)["error"] }
		type tokens struct {
			AccessToken  string `json:"access_token"`
			TokenType    string `json:"token_type"`
			ExpiresIn    int    `json:"expires_in"`
			RefreshToken string `json:"refresh_token"`
			Scope        string `json:"scope"`
		}
		// browser is the User's browser; it keeps the pages' cookies.
		browser := env.Browser(t).Client
		send := func(method, path string, form url.Values, want int, docRejects bool) *testkit.Response {
			t.Helper()
			k := call{method: method, path: path, client: browser, want: want, docRejects: docRejects}
			if form != nil {
				k.body, k.ctype = form.Encode(), formType
			}
			return c.do(t, k)
		}
		page := func(method, path string, form url.Values, want int) *testkit.Response {
			t.Helper()
			return send(method, path, form, want, false)
		}
		// badPage is a request that breaks the document: no csrf, or no
		// client_id.
		badPage := func(method, path string, form url.Values, want int) *testkit.Response {
			t.Helper()
			return send(method, path, form, want, true)
		}

		// The key set; a rotation keeps the old key published.
		r := c.do(t, call{method: get, path: base + "/oauth/jwks.json", want: 200})
		type keySet struct {
			Keys []map[string]any `json:"keys"`
		}
		keys := decode[keySet](t, r)
		require.NotEmpty(t, keys.Keys)
		current, n := keys.Keys[0]["kid"], len(keys.Keys)
		c.do(t, call{method: post, path: "/admin/v1/companies/acme/keys/rotate", token: admin, want: 204})
		keys = decode[keySet](t, c.do(t, call{method: get, path: base + "/oauth/jwks.json", want: 200}))
		require.Len(t, keys.Keys, n+1)
		assert.NotEqual(t, current, keys.Keys[0]["kid"], "the new key comes first")
		assert.Equal(t, current, keys.Keys[1]["kid"], "the retired key stays published")
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/keys/rotate", token: admin, want: 404})
		r = c.do(t, call{method: post, path: "/admin/v1/companies/acme/keys/rotate", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: "/admin/v1/companies/acme/keys/rotate", token: bogus, want: 401})

		// Direct Sign-In (spec 4.2): the sign-in page, then consent.
		verifier := rand.Text() + rand.Text()
		challenge := sha256.Sum256([]byte(verifier))
		request := url.Values{"response_type": {"code"}, "client_id": {agent.ClientID}, "redirect_uri": {agent.URL("/callback")},
			"scope": {"orders:read orders:write"}, "state": {"st4te"},
			"code_challenge": {base64.RawURLEncoding.EncodeToString(challenge[:])}, "code_challenge_method": {"S256"}}
		authorize := base + "/oauth/authorize?" + request.Encode()
		r = page(get, authorize, nil, 200)
		assert.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
		csrf := formField(t, r.Body, "csrf")
		require.NotEmpty(t, csrf)
		login := url.Values{"csrf": {csrf}, "action": {"login"}, "username": {"alice"}, "password": {"correct horse"}}
		wrong := url.Values{"csrf": {csrf}, "action": {"login"}, "username": {"alice"}, "password": {"wrong horse"}}
		// A form without this browser's token does nothing.
		badPage(post, authorize, url.Values{"action": {"login"}, "username": {"alice"}, "password": {"correct horse"}}, 403)
		r = c.do(t, call{method: post, path: authorize, client: env.Browser(t).Client, ctype: formType, body: login.Encode(), want: 403})
		assert.Contains(t, string(r.Body), "expired")
		r = page(post, authorize, wrong, 400)
		assert.Contains(t, string(r.Body), "not right")
		r = page(post, authorize, login, 200)
		assert.Contains(t, string(r.Body), "Test Agent")
		assert.Equal(t, "orders:read", formField(t, r.Body, "scope"))
		// The User approves one of the two scopes: back to the agent with
		// a code, the state and iss (RFC 9207).
		r = page(post, authorize, url.Values{"csrf": {csrf}, "action": {"approve"}, "scope": {"orders:read"}}, 303)
		back, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		assert.Equal(t, agent.URL("/callback"), back.Scheme+"://"+back.Host+back.Path)
		assert.Equal(t, "st4te", back.Query().Get("state"))
		assert.Equal(t, issuer, back.Query().Get("iss"))
		code := back.Query().Get("code")
		require.NotEmpty(t, code)

		// The tokens (spec 4.7): fewer scopes than requested, so scope
		// says which.
		exchange := url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {agent.URL("/callback")}, "code_verifier": {verifier}}
		direct := decode[tokens](t, c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, exchange), want: 200}))
		assert.Equal(t, tokens{TokenType: "Bearer", ExpiresIn: 600, Scope: "orders:read"},
			tokens{TokenType: direct.TokenType, ExpiresIn: direct.ExpiresIn, Scope: direct.Scope})
		require.NotEmpty(t, direct.AccessToken)
		require.NotEmpty(t, direct.RefreshToken)
		refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {direct.RefreshToken}}
		fresh := decode[tokens](t, c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, refresh), want: 200}))
		assert.NotEqual(t, direct.RefreshToken, fresh.RefreshToken, "refresh tokens rotate")
		assert.Empty(t, fresh.Scope, "the grant's scopes")
		refresh.Set("refresh_token", fresh.RefreshToken)

		// Token errors are OAuth error bodies.
		for _, k := range []struct {
			body, ctype string
			want        int
			code        string
			docRejects  bool
		}{
			{body: "", want: 400, code: "invalid_request", docRejects: true},
			{body: `{"grant_type":"refresh_token"}`, ctype: "application/json", want: 400, code: "invalid_request", docRejects: true},
			{body: "grant_type=refresh_token&refresh_token=" + url.QueryEscape(fresh.RefreshToken), want: 401, code: "invalid_client", docRejects: true},
			{body: signed(agent, url.Values{"grant_type": {"password"}, "username": {"alice"}}), want: 400, code: "invalid_request", docRejects: true},
			{body: signed(agent, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nope.nope"}}), want: 400, code: "invalid_grant"},
			{body: signed(agent, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}, "scope": {"orders:write"}}),
				want: 400, code: "invalid_scope"},
			{body: signed(agent, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}, "resource": {"https://elsewhere.example"}}),
				want: 400, code: "invalid_target"},
		} {
			if k.ctype == "" {
				k.ctype = formType
			}
			r := c.do(t, call{method: post, path: tokenPath, ctype: k.ctype, body: k.body, want: k.want, docRejects: k.docRejects})
			assert.Equal(t, k.code, oauthError(r), k.body)
			assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		}

		// Introspection, with a Company API key (RFC 7662).
		key := decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/acme/api-keys", token: admin, want: 201, body: `{"name":"introspection"}`})).Key
		introspect := func(tok string) map[string]any {
			t.Helper()
			return c.do(t, call{method: post, path: introspectPath, token: key, ctype: formType,
				body: url.Values{"token": {tok}}.Encode(), want: 200}).JSON(t)
		}
		m := introspect(fresh.AccessToken)
		assert.Equal(t, true, m["active"])
		assert.Equal(t, "Bearer", m["token_type"])
		assert.Equal(t, agent.ClientID, m["client_id"])
		assert.Equal(t, "orders:read", m["scope"])
		assert.Equal(t, issuer, m["iss"])
		assert.Equal(t, []any{"https://acme.example", "https://acme.example.co.uk"}, m["aud"])
		m = introspect(fresh.RefreshToken)
		assert.Equal(t, true, m["active"])
		assert.Equal(t, "refresh_token", m["token_type"])
		assert.Equal(t, map[string]any{"active": false}, introspect("not-a-token"))
		r = c.do(t, call{method: post, path: introspectPath, ctype: formType, body: "token=x", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: introspectPath, token: admin, ctype: formType, body: "token=x", want: 401})
		minimalKey := decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/minimal/api-keys", token: admin, want: 201})).Key
		c.do(t, call{method: post, path: introspectPath, token: minimalKey, ctype: formType, body: "token=x", want: 401})
		r = c.do(t, call{method: post, path: introspectPath, token: key, ctype: formType, body: "token=", want: 400, docRejects: true})
		assert.Equal(t, "invalid_request", oauthError(r))

		// Revocation (spec 4.6): only by the client the token was issued
		// to; an unknown token is fine; revoking ends the grant.
		other := env.StartAgent(t, "other-agent.test")
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, want: 400,
			body: signed(other, url.Values{"token": {fresh.RefreshToken}, "token_type_hint": {"refresh_token"}})})
		assert.Equal(t, "unauthorized_client", oauthError(r))
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, body: "token=" + url.QueryEscape(fresh.RefreshToken), want: 401, docRejects: true})
		assert.Equal(t, "invalid_client", oauthError(r))
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, body: signed(agent, url.Values{}), want: 400, docRejects: true})
		assert.Equal(t, "invalid_request", oauthError(r))
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, body: signed(agent, url.Values{"token": {"unknown"}}), want: 200})
		assert.Empty(t, r.Body)
		c.do(t, call{method: post, path: revokePath, ctype: formType, want: 200,
			body: signed(agent, url.Values{"token": {fresh.RefreshToken}, "token_type_hint": {"refresh_token"}})})
		assert.Equal(t, map[string]any{"active": false}, introspect(fresh.RefreshToken))
		assert.Equal(t, map[string]any{"active": false}, introspect(fresh.AccessToken), "its grant's access tokens too")
		r = c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, refresh), want: 400})
		assert.Equal(t, "invalid_grant", oauthError(r))
		r = c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, exchange), want: 400})
		assert.Equal(t, "invalid_grant", oauthError(r), "a code works once")

		// Device Sign-In (spec 4.3), approved in the browser, which is
		// still signed in.
		start := func() map[string]any {
			t.Helper()
			return c.do(t, call{method: post, path: devicePath, ctype: formType, want: 200,
				body: signed(agent, url.Values{"scope": {"orders:read orders:write"}})}).JSON(t)
		}
		poll := func(da map[string]any, want int) *testkit.Response {
			t.Helper()
			return c.do(t, call{method: post, path: tokenPath, ctype: formType, want: want,
				body: signed(agent, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da["device_code"].(string)}})})
		}
		da := start()
		userCode := da["user_code"].(string)
		assert.Equal(t, issuer+"/device", da["verification_uri"])
		assert.Equal(t, issuer+"/device?user_code="+userCode, da["verification_uri_complete"])
		assert.Equal(t, "authorization_pending", oauthError(poll(da, 400)))
		assert.Equal(t, "slow_down", oauthError(poll(da, 400)), "polled again at once")
		r = page(get, base+"/device?user_code="+userCode, nil, 200)
		assert.Equal(t, userCode, formField(t, r.Body, "user_code"), "the code is filled in, nothing approved")
		csrf = formField(t, r.Body, "csrf")
		r = page(post, base+"/device", url.Values{"csrf": {csrf}, "action": {"continue"}, "user_code": {"AAAA-AAAA"}}, 400)
		assert.Contains(t, string(r.Body), "not a code")
		r = page(post, base+"/device", url.Values{"csrf": {csrf}, "action": {"continue"}, "user_code": {strings.ToLower(userCode)}}, 200)
		assert.Contains(t, string(r.Body), userCode, "the consent page shows the code to compare")
		decide := base + "/device?" + url.Values{"user_code": {userCode}}.Encode()
		r = page(post, decide, url.Values{"csrf": {csrf}, "action": {"approve"}, "scope": {"orders:write"}}, 200)
		assert.Contains(t, string(r.Body), "All set")
		device := decode[tokens](t, poll(da, 200))
		assert.Equal(t, "orders:write", device.Scope)
		assert.Equal(t, "invalid_grant", oauthError(poll(da, 400)), "a device code gives tokens once")

		// Declined, in a browser that signs in first.
		da = start()
		userCode = da["user_code"].(string)
		browser = env.Browser(t).Client
		r = page(get, base+"/device?user_code="+userCode, nil, 200)
		csrf = formField(t, r.Body, "csrf")
		r = page(post, base+"/device", url.Values{"csrf": {csrf}, "action": {"continue"}, "user_code": {userCode}}, 200)
		assert.Contains(t, string(r.Body), `value="login"`, "not signed in: the sign-in page")
		decide = base + "/device?" + url.Values{"user_code": {userCode}}.Encode()
		wrong.Set("csrf", csrf)
		page(post, decide, wrong, 400)
		login.Set("csrf", csrf)
		page(post, decide, login, 200)
		badPage(post, base+"/device", url.Values{"action": {"continue"}, "user_code": {userCode}}, 403)
		r = page(post, decide, url.Values{"csrf": {csrf}, "action": {"deny"}}, 200)
		assert.Contains(t, string(r.Body), "declined")
		assert.Equal(t, "access_denied", oauthError(poll(da, 400)))
		// Device authorization errors.
		r = c.do(t, call{method: post, path: devicePath, ctype: formType, body: "scope=orders%3Aread", want: 401, docRejects: true})
		assert.Equal(t, "invalid_client", oauthError(r))
		r = c.do(t, call{method: post, path: devicePath, ctype: formType, body: signed(agent, url.Values{"scope": {"orders:delete"}}), want: 400})
		assert.Equal(t, "invalid_scope", oauthError(r))

		// The account page lists the connected agent; disconnecting it
		// ends its grant at once (spec 5.5).
		assert.Equal(t, true, introspect(device.RefreshToken)["active"])
		r = page(get, accountPath, nil, 200)
		assert.Contains(t, string(r.Body), "Test Agent")
		csrf = formField(t, r.Body, "csrf")
		badPage(post, accountPath, url.Values{"action": {"disconnect"}, "client_id": {agent.ClientID}}, 403)
		r = page(post, accountPath, url.Values{"csrf": {csrf}, "action": {"disconnect"}, "client_id": {agent.ClientID}}, 200)
		assert.Contains(t, string(r.Body), "disconnected")
		assert.Equal(t, map[string]any{"active": false}, introspect(device.RefreshToken))
		assert.Equal(t, map[string]any{"active": false}, introspect(device.AccessToken))
		r = page(post, accountPath, url.Values{"csrf": {csrf}, "action": {"signout"}}, 200)
		assert.Contains(t, string(r.Body), "signed out")
		r = page(get, accountPath, nil, 200)
		assert.NotContains(t, string(r.Body), "Test Agent", "the sign-in page")
		wrong.Set("csrf", csrf)
		page(post, accountPath, wrong, 400)
		login.Set("csrf", csrf)
		r = page(post, accountPath, login, 200)
		assert.Contains(t, string(r.Body), "No agents are connected")
		page(post, accountPath, url.Values{"csrf": {csrf}, "action": {"signout"}, "pad": {strings.Repeat("x", 16<<10)}}, 400)

		// Problems with client_id or redirect_uri are shown to the User;
		// other problems go back to the agent, with iss (spec 4.2).
		with := func(name, value string) string {
			q := url.Values{}
			for k, v := range request {
				q[k] = v
			}
			if value == "" {
				q.Del(name)
			} else {
				q.Set(name, value)
			}
			return base + "/oauth/authorize?" + q.Encode()
		}
		badPage(get, base+"/oauth/authorize", nil, 400)
		page(get, with("redirect_uri", "https://elsewhere.example/callback"), nil, 400)
		r = page(get, with("client_id", "http://agent.example/agent.json"), nil, 400)
		assert.Contains(t, string(r.Body), "invalid_client")
		r = page(get, with("client_id", "https://unreachable.test/agent.json"), nil, 400)
		assert.Contains(t, string(r.Body), "invalid_client")
		page(post, with("client_id", "https://unreachable.test/agent.json"), login, 400)
		badPage(post, base+"/oauth/authorize", login, 400)
		for name, value := range map[string]string{"code_challenge": "", "state": "", "scope": "orders:delete", "resource": "https://elsewhere.example"} {
			k := call{method: get, path: with(name, value), client: browser, want: 303, docRejects: value == ""}
			back, err := url.Parse(c.do(t, k).Header.Get("Location"))
			require.NoError(t, err)
			assert.NotEmpty(t, back.Query().Get("error"), name)
			assert.Empty(t, back.Query().Get("code"), name)
			assert.Equal(t, issuer, back.Query().Get("iss"), name)
		}
		// The User declines.
		r = page(get, authorize, nil, 200)
		assert.Contains(t, string(r.Body), `value="approve"`, "signed in: the consent page")
		r = page(post, authorize, url.Values{"csrf": {csrf}, "action": {"deny"}}, 303)
		back, err = url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		assert.Equal(t, "access_denied", back.Query().Get("error"))
		assert.Equal(t, "st4te", back.Query().Get("state"))
		assert.Equal(t, issuer, back.Query().Get("iss"))
	})

	t.Run("operator tokens", func(t *testing.T) {
		path := "/admin/v1/operator-tokens"
		type token struct {
			ID    int64  `json:"id"`
			Name  string `json:"name"`
			Token string `json:"token"`
		}
		ci := decode[token](t, c.do(t, call{method: post, path: path, token: admin, want: 201, body: `{"name":"ci"}`}))
		assert.Equal(t, "ci", ci.Name)
		c.do(t, call{method: post, path: path, token: admin, want: 201})

		// A new token works at once and stops working when revoked.
		c.do(t, call{method: get, path: "/admin/v1/companies?limit=1", token: ci.Token, want: 200})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, ci.ID), token: ci.Token, want: 204})
		c.do(t, call{method: get, path: "/admin/v1/companies?limit=1", token: ci.Token, want: 401})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, ci.ID), token: admin, want: 204})

		c.do(t, call{method: del, path: path + "/999999", token: admin, want: 404})
		c.do(t, call{method: del, path: path + "/0", token: admin, want: 404, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", want: 401, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", token: bogus, want: 401})
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"nmae":"typo"}`})
		c.do(t, call{method: post, path: path, token: admin, want: 413, body: padded(t, map[string]string{"name": "x"}, 4<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, body: `{}`, ctype: "text/plain"})
		c.do(t, call{method: post, path: path, want: 401, docRejects: true})
		c.do(t, call{method: post, path: path, token: bogus, want: 401})
	})

	t.Run("features that are off", func(t *testing.T) {
		// A route answers 404 for a Company whose settings do not offer the
		// feature it belongs to (an issuer, its sign-in type,
		// conversations.enabled, web.browser_join); the issuer,
		// conversations and browser join tests drive them otherwise. acme
		// offers everything; minimal has an issuer and conversations but no
		// browser join; corner has conversations but no issuer.
		feature := func(path string) string {
			switch {
			case path == "/t/{slug}/oauth/jwks.json":
				// Every Company has keys: they sign Poppy-Verified.
				return "keys"
			case path == "/t/{slug}/oauth/authorize":
				return "direct sign-in"
			case path == "/t/{slug}/oauth/device_authorization", path == "/t/{slug}/device":
				return "device sign-in"
			case strings.HasPrefix(path, "/t/{slug}/oauth/"), path == "/t/{slug}/account":
				return "issuer"
			case strings.HasPrefix(path, "/t/{slug}/poppy/conversations"):
				return "conversations"
			case strings.HasPrefix(path, "/poppy/browser-session"):
				return "browser join"
			}
			return ""
		}
		offers := map[string]map[string]bool{
			"acme":    {"keys": true, "issuer": true, "direct sign-in": true, "device sign-in": true, "conversations": true, "browser join": true},
			"minimal": {"keys": true, "issuer": true, "direct sign-in": true, "device sign-in": true, "conversations": true},
			"corner":  {"keys": true, "conversations": true},
			"nosuch":  {},
		}
		check := func(t *testing.T, slug string) {
			t.Helper()
			for _, op := range operations {
				method, path, _ := strings.Cut(op, " ")
				f := feature(path)
				if f == "" || offers[slug][f] {
					continue
				}
				k := call{method: method, want: 404, docRejects: c.incomplete(method, path),
					path: strings.ReplaceAll(strings.ReplaceAll(path, "{slug}", slug), "{conversation_id}", "c_1")}
				if !strings.HasPrefix(path, "/t/") {
					k.host = slug + ".example"
				}
				r := c.do(t, k)
				assert.Equal(t, "not_found", r.JSON(t)["error"], op)
			}
		}
		for slug := range offers {
			check(t, slug)
		}

		// Turning a feature on or off changes the answer at once.
		c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"web":{"browser_join":true},"conversations":{"enabled":false},"auth":{"grant_types":["authorization_code"]}}`})
		c.do(t, call{method: patch, path: "/admin/v1/companies/corner", token: admin, want: 200,
			body: `{"conversations":{"enabled":false}}`})
		offers["minimal"] = map[string]bool{"keys": true, "issuer": true, "direct sign-in": true, "browser join": true}
		offers["corner"] = map[string]bool{"keys": true}
		c.do(t, call{method: get, host: "minimal.example", path: "/poppy/browser-session", want: 200})
		check(t, "minimal")
		check(t, "corner")
		c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"web":null,"conversations":null,"auth":{"grant_types":null}}`})
		c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"auth":{"issuer":false}}`})
		offers["minimal"] = map[string]bool{"keys": true, "conversations": true}
		check(t, "minimal")
	})

	t.Run("feedback", func(t *testing.T) {
		signed := func(slug string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: "contract-" + slug}, testkit.SessionOptions{})
			}
		}
		path := "/t/acme/poppy/feedback"
		report := `{"task":"Return a gift","description":"The User wanted to return a gift without the receipt."}`

		// A task without an alternative is taken; one with an alternative,
		// matched without case or surrounding space, gets it (spec 9.3).
		r := c.do(t, call{method: post, path: path, session: signed("acme"), want: 202, body: report})
		assert.Empty(t, r.Body)
		r = c.do(t, call{method: post, path: path, session: signed("acme"), want: 200,
			body: `{"task":"  PAY WITH A GIFT CARD ","description":"No field for a gift card at checkout.","extra":"ignored"}`})
		alts := fullCompany()["feedback"].(map[string]any)["alternatives"].([]any)
		want, _ := json.Marshal(alts[0].(map[string]any)["alternative"])
		assert.JSONEq(t, string(want), string(r.Body))

		// The Session header is required, and verified.
		r = c.do(t, call{method: post, path: path, want: 400, docRejects: true, body: report})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"])
		r = c.do(t, call{method: post, path: path, want: 400, body: report, session: func(req *http.Request) {
			agent.Sign(t, req, testkit.SessionClaims{Aud: env.PublicURL("/t/minimal")}, testkit.SessionOptions{})
		}})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"], "a Session JWT for another Company")
		r = c.do(t, call{method: post, path: path, session: signed("acme"), want: 400, docRejects: true, body: `{"task":"","description":"x"}`})
		assert.Equal(t, "task", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// Spec 9.3: a report that is malformed or too long is invalid_request.
		for _, k := range []call{
			{body: padded(t, map[string]string{"task": "T", "description": "D"}, 16<<10)},
			{body: `{"task":"T","description":"` + strings.Repeat("d", 4001) + `"}`, docRejects: true},
			{body: report, ctype: "text/plain", docRejects: true},
			{body: `{"task":"T",`, docRejects: true},
		} {
			k.method, k.path, k.session, k.want = post, path, signed("acme"), 400
			assert.Equal(t, "invalid_request", c.do(t, k).JSON(t)["error"])
		}

		// A Personal Agent the Company does not accept gets invalid_session.
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: map[string]any{"agents": map[string]any{"client_ids": []string{agent.ClientID, "https://blocked.example/agent.json"}}}})
		r = c.do(t, call{method: post, path: path, session: signed("acme"), want: 400, body: report})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"])
		assert.Contains(t, r.JSON(t)["error_description"], "does not accept")
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: `{"agents":{"client_ids":["https://blocked.example/agent.json"]}}`})
		c.do(t, call{method: post, path: path, session: signed("acme"), want: 202, body: report})

		// Feedback off: 404, before the Session header is looked at.
		c.do(t, call{method: post, path: "/t/corner/poppy/feedback", session: signed("corner"), want: 404, body: report})
		c.do(t, call{method: post, path: "/t/nosuch/poppy/feedback", session: signed("nosuch"), want: 404, body: report})
	})

	// reports is a page of feedback reports as the admin and Company APIs
	// show it.
	type report struct {
		ID          int64  `json:"id"`
		ClientID    string `json:"client_id"`
		UserID      string `json:"user_id"`
		AgentID     string `json:"agent_id"`
		SID         string `json:"sid"`
		Task        string `json:"task"`
		Description string `json:"description"`
		Answered    bool   `json:"answered"`
		CreatedAt   string `json:"created_at"`
	}
	type reports struct {
		Feedback []report `json:"feedback"`
		Next     string   `json:"next"`
	}
	// acmeKey is a Company API key of acme; minimalID is minimal's
	// identifier, the audience of its Session JWTs (it has no issuer now).
	var acmeKey, minimalID string
	// pruned is a conversation of acme whose oldest events the
	// conversations test dropped, and a cursor among them.
	type pruneMark struct{ conversation, cursor string }
	var pruned pruneMark

	t.Run("feedback reports", func(t *testing.T) {
		acmeKey = decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/acme/api-keys", token: admin, want: 201, body: `{"name":"reports"}`})).Key
		tasks := func(l reports) (out []string) {
			for _, r := range l.Feedback {
				out = append(out, r.Task)
			}
			return out
		}
		path := "/admin/v1/companies/acme/feedback"

		// The feedback test's reports, newest first, as sent, each with
		// the verified Session it came from.
		r := c.do(t, call{method: get, path: path, token: admin, want: 200})
		assert.NotContains(t, string(r.Body), "agent_id", "no Agent ID in the Session JWTs")
		assert.NotContains(t, r.JSON(t), "next", "the page is not full")
		l := decode[reports](t, r)
		assert.Equal(t, []string{"Return a gift", "  PAY WITH A GIFT CARD ", "Return a gift"}, tasks(l))
		require.Len(t, l.Feedback, 3)
		assert.Greater(t, l.Feedback[0].ID, l.Feedback[1].ID)
		assert.Greater(t, l.Feedback[1].ID, l.Feedback[2].ID)
		assert.Equal(t, []bool{false, true, false}, []bool{l.Feedback[0].Answered, l.Feedback[1].Answered, l.Feedback[2].Answered})
		for _, rep := range l.Feedback {
			assert.Equal(t, agent.ClientID, rep.ClientID)
			assert.Equal(t, "usr_test", rep.UserID)
			assert.Equal(t, "contract-acme", rep.SID)
		}
		assert.Equal(t, "No field for a gift card at checkout.", l.Feedback[1].Description)
		// The Company reads the same list with its API key.
		assert.Equal(t, l, decode[reports](t, c.do(t, call{method: get, path: "/company/v1/feedback", token: acmeKey, want: 200})))

		// Each Company sees its own reports only. minimal has none yet;
		// without an issuer (turned off by "not available yet", and here
		// again so that this test does not depend on that one) its
		// Session JWTs name its domain.
		minimalID = c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"auth":{"issuer":false}}`}).JSON(t)["identifier"].(string)
		require.Equal(t, "https://minimal.example", minimalID)
		path = "/admin/v1/companies/minimal/feedback"
		r = c.do(t, call{method: get, path: path, token: admin, want: 200})
		assert.JSONEq(t, `{"feedback":[]}`, string(r.Body))
		for i, task := range []string{"First", "Second", "Third"} {
			c.do(t, call{method: post, path: "/t/minimal/poppy/feedback", want: 202,
				session: func(req *http.Request) {
					agent.Sign(t, req, testkit.SessionClaims{Aud: minimalID, SID: fmt.Sprintf("reports-%d", i+1), AgentID: "agt_1"}, testkit.SessionOptions{})
				},
				body: map[string]string{"task": task, "description": "Could not do it."}})
		}

		// Paging: a full page names the next page's before.
		l = decode[reports](t, c.do(t, call{method: get, path: path + "?limit=2", token: admin, want: 200}))
		assert.Equal(t, []string{"Third", "Second"}, tasks(l))
		assert.Equal(t, "agt_1", l.Feedback[0].AgentID)
		assert.Equal(t, "reports-3", l.Feedback[0].SID)
		assert.Equal(t, strconv.FormatInt(l.Feedback[1].ID, 10), l.Next)
		l = decode[reports](t, c.do(t, call{method: get, path: path + "?limit=2&before=" + l.Next, token: admin, want: 200}))
		assert.Equal(t, []string{"First"}, tasks(l))
		assert.Empty(t, l.Next)
		l = decode[reports](t, c.do(t, call{method: get, path: fmt.Sprintf("%s?before=%d", path, l.Feedback[0].ID), token: admin, want: 200}))
		assert.Empty(t, l.Feedback)
		l = decode[reports](t, c.do(t, call{method: get, path: "/company/v1/feedback?limit=1", token: acmeKey, want: 200}))
		assert.Equal(t, []string{"Return a gift"}, tasks(l))
		assert.NotEmpty(t, l.Next)
		l = decode[reports](t, c.do(t, call{method: get, path: "/company/v1/feedback?limit=500&before=" + l.Next, token: acmeKey, want: 200}))
		assert.Equal(t, []string{"  PAY WITH A GIFT CARD ", "Return a gift"}, tasks(l))

		// Bad paging names the parameter, on both APIs.
		for _, q := range []string{"limit=0", "limit=501", "limit=ten", "before=0", "before=-1", "before=abc"} {
			field, _, _ := strings.Cut(q, "=")
			for _, k := range []call{{path: path + "?" + q, token: admin}, {path: "/company/v1/feedback?" + q, token: acmeKey}} {
				k.method, k.want, k.docRejects = get, 400, true
				r := c.do(t, k)
				assert.Equal(t, field, r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"], q)
			}
		}

		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/feedback", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/Not_A_Slug/feedback", token: admin, want: 404, docRejects: true})
		r = c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: path, token: bogus, want: 401})
		c.do(t, call{method: get, path: path, token: acmeKey, want: 401})
		r = c.do(t, call{method: get, path: "/company/v1/feedback", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: "/company/v1/feedback", token: bogus, want: 401})
		c.do(t, call{method: get, path: "/company/v1/feedback", token: admin, want: 401})
	})

	t.Run("end sessions", func(t *testing.T) {
		adminPath, companyPath := "/admin/v1/companies/acme/sessions/end", "/company/v1/sessions/end"
		feedback := "/t/acme/poppy/feedback"
		report := `{"task":"Return a gift","description":"No receipt."}`
		in := func(aud, sid string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, testkit.SessionClaims{Aud: aud, SID: sid}, testkit.SessionOptions{})
			}
		}
		end := func(sid string) map[string]string { return map[string]string{"client_id": agent.ClientID, "sid": sid} }

		// The operator ends the feedback test's Session: at once, and for
		// good (spec 5.5). Ending it again is fine.
		c.do(t, call{method: post, path: feedback, session: in(issuer, "contract-acme"), want: 202, body: report})
		c.do(t, call{method: post, path: adminPath, token: admin, body: end("contract-acme"), want: 204})
		c.do(t, call{method: post, path: adminPath, token: admin, body: end("contract-acme"), want: 204})
		r := c.do(t, call{method: post, path: feedback, session: in(issuer, "contract-acme"), want: 400, body: report})
		assert.Equal(t, "session_ended", r.JSON(t)["error"])
		assert.Contains(t, r.JSON(t)["error_description"], "new sid")
		r = c.do(t, call{method: post, path: feedback, session: in(issuer, "contract-acme"), want: 400, body: report})
		assert.Equal(t, "session_ended", r.JSON(t)["error"], "an ended Session does not start again")

		// A new sid is a new Session; the Company ends it with its API key.
		c.do(t, call{method: post, path: feedback, session: in(issuer, "end-sessions-2"), want: 202, body: report})
		c.do(t, call{method: post, path: companyPath, token: acmeKey, body: end("end-sessions-2"), want: 204})
		c.do(t, call{method: post, path: companyPath, token: acmeKey, body: end("end-sessions-2"), want: 204})
		r = c.do(t, call{method: post, path: feedback, session: in(issuer, "end-sessions-2"), want: 400, body: report})
		assert.Equal(t, "session_ended", r.JSON(t)["error"])

		// Only a Session of the Company named, by its exact client_id and
		// sid: minimal's reports-1 is not acme's.
		for _, body := range []map[string]string{
			end("never-started"),
			{"client_id": "https://other.example/agent.json", "sid": "contract-acme"},
			end("reports-1"),
		} {
			c.do(t, call{method: post, path: adminPath, token: admin, body: body, want: 404})
			c.do(t, call{method: post, path: companyPath, token: acmeKey, body: body, want: 404})
		}
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/sessions/end", token: admin, body: end("contract-acme"), want: 404})
		c.do(t, call{method: post, path: "/admin/v1/companies/minimal/sessions/end", token: admin, body: end("reports-1"), want: 204})
		r = c.do(t, call{method: post, path: "/t/minimal/poppy/feedback", want: 400, body: report, session: func(req *http.Request) {
			agent.Sign(t, req, testkit.SessionClaims{Aud: minimalID, SID: "reports-1", AgentID: "agt_1"}, testkit.SessionOptions{})
		}})
		assert.Equal(t, "session_ended", r.JSON(t)["error"])

		// Bad bodies name the offending members; unknown ones are refused.
		long := strings.Repeat("s", 257)
		for body, fields := range map[string][]string{
			`{"sid":"contract-acme"}`:                           {"client_id"},
			`{"client_id":"","sid":"contract-acme"}`:            {"client_id"},
			`{"client_id":null,"sid":"contract-acme"}`:          {"client_id"},
			`{"client_id":7,"sid":"contract-acme"}`:             {"client_id"},
			`{"client_id":"x"}`:                                 {"sid"},
			`{"client_id":"x","sid":"not a sid"}`:               {"sid"},
			`{"client_id":"x","sid":"` + long + `"}`:            {"sid"},
			`{}`:                                                {"client_id", "sid"},
			`{"client_id":"x","sid":"s","reason":"suspicious"}`: {"reason"},
		} {
			for _, k := range []call{{path: adminPath, token: admin}, {path: companyPath, token: acmeKey}} {
				k.method, k.body, k.want, k.docRejects = post, body, 400, true
				var got []string
				for _, f := range c.do(t, k).JSON(t)["fields"].([]any) {
					got = append(got, f.(map[string]any)["field"].(string))
				}
				assert.Equal(t, fields, got, body)
			}
		}
		for _, k := range []call{{path: adminPath, token: admin}, {path: companyPath, token: acmeKey}} {
			k.method = post
			for _, bad := range []call{
				{body: `{"client_id":`, want: 400, docRejects: true},
				{body: `[]`, want: 400, docRejects: true},
				{body: "", want: 400, docRejects: true},
				{body: padded(t, end("contract-acme"), 8<<10), want: 413},
				{body: end("contract-acme"), ctype: "text/plain", want: 415, docRejects: true},
				{body: end("contract-acme"), token: "-", want: 401},
			} {
				bad.method, bad.path = k.method, k.path
				if bad.token == "" {
					bad.token = k.token
				}
				c.do(t, bad)
			}
		}
		r = c.do(t, call{method: post, path: adminPath, body: end("contract-acme"), want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: adminPath, token: acmeKey, body: end("contract-acme"), want: 401})
		r = c.do(t, call{method: post, path: companyPath, body: end("contract-acme"), want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: companyPath, token: admin, body: end("contract-acme"), want: 401})
	})

	t.Run("browser join", func(t *testing.T) {
		// A browser joins a Session of acme over HTTP as a Personal Agent's
		// browser does (spec 6): the page sets the join cookie, the agent
		// authorizes the page's code, the form brings the Session cookie.
		// acme names it acme_poppy, for every host of acme.example, and
		// sends joined browsers to /welcome.
		const (
			host       = "acme.example"
			page       = "/poppy/browser-session"
			authorize  = page + "/authorize"
			form       = "application/x-www-form-urlencoded"
			introspect = "/company/v1/web-sessions/introspect"
			end        = "/company/v1/web-sessions/end"
		)
		in := func(sid, token string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: sid, AccessToken: token}, testkit.SessionOptions{})
			}
		}
		// browser is a new browser of the Personal Agent: it keeps cookies
		// and does not follow redirects.
		browser := func() *http.Client {
			jar, err := cookiejar.New(nil)
			require.NoError(t, err)
			return &http.Client{Transport: env.Client.Transport, Jar: jar,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		}
		// open is step 1 in b; it returns the page's code.
		open := func(t *testing.T, b *http.Client) string {
			t.Helper()
			r := c.do(t, call{method: get, host: host, path: page, client: b, want: 200})
			code := formField(t, r.Body, "code")
			require.True(t, strings.HasPrefix(code, "bc_"), "%s", r.Body)
			return code
		}
		authorizeCode := func(t *testing.T, code, sid, token string, want int) *testkit.Response {
			t.Helper()
			return c.do(t, call{method: post, host: host, path: authorize, session: in(sid, token),
				body: map[string]string{"code": code}, want: want})
		}
		submit := func(t *testing.T, b *http.Client, code string, want int) *testkit.Response {
			t.Helper()
			return c.do(t, call{method: post, host: host, path: page, client: b, ctype: form,
				body: url.Values{"code": {code}}.Encode(), want: want})
		}
		// cookies parses the response's Set-Cookie headers by name.
		cookies := func(t *testing.T, r *testkit.Response) map[string]*http.Cookie {
			t.Helper()
			out := map[string]*http.Cookie{}
			for _, line := range r.Header.Values("Set-Cookie") {
				ck, err := http.ParseSetCookie(line)
				require.NoError(t, err, line)
				out[ck.Name] = ck
			}
			return out
		}
		// join runs the three steps in b for Session sid, signed in with
		// token unless it is "", and returns the Session cookie's value.
		join := func(t *testing.T, b *http.Client, sid, token string) string {
			t.Helper()
			code := open(t, b)
			authorizeCode(t, code, sid, token, 204)
			r := submit(t, b, code, 303)
			ck := cookies(t, r)["acme_poppy"]
			require.NotNil(t, ck, "%v", r.Header)
			return ck.Value
		}
		lookup := func(t *testing.T, value string) map[string]any {
			t.Helper()
			return c.do(t, call{method: post, path: introspect, token: acmeKey, body: map[string]string{"cookie": value}, want: 200}).JSON(t)
		}
		inactive := map[string]any{"active": false}

		// A signed-in join. The page is never stored, framed or kept by
		// its opener, and its cookie is __Host- and SameSite=Strict.
		token := signIn(t, "alice", "correct horse")
		b := browser()
		r := c.do(t, call{method: get, host: host, path: page, client: b, want: 200})
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		assert.Equal(t, "DENY", r.Header.Get("X-Frame-Options"))
		assert.Equal(t, "same-origin", r.Header.Get("Cross-Origin-Opener-Policy"))
		assert.Contains(t, string(r.Body), "Acme Outfitters")
		joinCookie := cookies(t, r)["__Host-poppy_join"]
		require.NotNil(t, joinCookie)
		assert.Equal(t, http.SameSiteStrictMode, joinCookie.SameSite)
		code := formField(t, r.Body, "code")
		authorizeCode(t, code, "join-1", token, 204)
		r = authorizeCode(t, code, "join-1", token, 400)
		assert.Equal(t, "invalid_request", r.JSON(t)["error"], "a code is authorized once")
		r = submit(t, b, code, 303)
		assert.Equal(t, "/welcome", r.Header.Get("Location"))
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		set := cookies(t, r)
		session := set["acme_poppy"]
		require.NotNil(t, session)
		assert.Equal(t, []any{"/", "acme.example", 86400, true, true, http.SameSiteLaxMode},
			[]any{session.Path, session.Domain, session.MaxAge, session.Secure, session.HttpOnly, session.SameSite},
			"the Session cookie lives as long as an idle Session, on every host of cookie_domain")
		require.NotNil(t, set["__Host-poppy_join"])
		assert.Equal(t, -1, set["__Host-poppy_join"].MaxAge, "the join cookie is cleared")
		r = submit(t, b, code, 400)
		assert.Contains(t, string(r.Body), "was already used")
		assert.Empty(t, r.Header.Values("Set-Cookie"))
		first := session.Value
		ws := lookup(t, first)
		assert.Equal(t, true, ws["active"])
		assert.Equal(t, []any{agent.ClientID, "join-1", []any{"orders:read"}},
			[]any{ws["client_id"], ws["sid"], ws["scopes"]})
		assert.Regexp(t, `^[1-9][0-9]*$`, ws["account"])
		assert.NotEmpty(t, ws["expires_at"])

		// Step 4 through the website proxy: the origin gets the web
		// session's facts, never the cookie, and the scope rules hold.
		site := env.StartOrigin(t, "web.test", issuer, issuer)
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: map[string]any{"web": map[string]any{"origin": site.BaseURL()}}})
		resp, _ := c.send(t, call{method: get, host: host, path: "/welcome", client: b,
			header: map[string]string{"Cookie": "theme=dark"}})
		require.Equal(t, 200, resp.Status, "%s", resp.Body)
		got := site.Last()
		require.NoError(t, got.VerifyErr)
		assert.Equal(t, []any{site.BaseURL(), issuer, "join-1", ws["account"], []string{"orders:read"}},
			[]any{got.Claims.Audience, got.Claims.Issuer, got.Claims.SID, got.Claims.Account, got.Claims.Scopes})
		assert.NotContains(t, got.Header.Get("Cookie"), "acme_poppy")
		assert.Contains(t, got.Header.Get("Cookie"), "theme=dark", "the website's own cookies pass")
		resp, _ = c.send(t, call{method: post, host: host, path: "/orders", client: b, body: "{}"})
		assert.Equal(t, 403, resp.Status, "POST /orders needs orders:write")
		assert.Contains(t, string(resp.Body), "orders:write")

		// A later join replaces the cookie; a signed-out join acts for the
		// Session alone.
		second := join(t, b, "join-2", "")
		assert.Equal(t, inactive, lookup(t, first))
		ws = lookup(t, second)
		assert.Equal(t, []any{true, "join-2", "", []any{}}, []any{ws["active"], ws["sid"], ws["account"], ws["scopes"]})

		// The website signs the browser out with Poppy-Web-Session: end.
		site.Handle(get, "/signout", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Poppy-Web-Session", "end")
			w.WriteHeader(http.StatusNoContent)
		})
		resp, _ = c.send(t, call{method: get, host: host, path: "/signout", client: b})
		assert.Equal(t, 204, resp.Status)
		assert.Empty(t, resp.Header.Get("Poppy-Web-Session"))
		assert.Equal(t, inactive, lookup(t, second))
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: `{"web":{"origin":"https://www.acme.example"}}`})

		// A website of its own signs the browser out through the Company
		// API, at once; ending it again is fine.
		third := join(t, browser(), "join-3", "")
		assert.Equal(t, true, lookup(t, third)["active"])
		c.do(t, call{method: post, path: end, token: acmeKey, body: map[string]string{"cookie": third}, want: 204})
		c.do(t, call{method: post, path: end, token: acmeKey, body: map[string]string{"cookie": third}, want: 204})
		assert.Equal(t, inactive, lookup(t, third))
		assert.Equal(t, inactive, lookup(t, "no-such-cookie"))

		// A web session ends with its Session, and an ended Session
		// authorizes no code.
		fourth := join(t, browser(), "join-4", "")
		c.do(t, call{method: post, path: "/company/v1/sessions/end", token: acmeKey,
			body: map[string]string{"client_id": agent.ClientID, "sid": "join-4"}, want: 204})
		assert.Equal(t, inactive, lookup(t, fourth))
		r = authorizeCode(t, open(t, browser()), "join-4", "", 400)
		assert.Equal(t, "session_ended", r.JSON(t)["error"])

		// Step 3 fails for a code nobody authorized, a code submitted from
		// another browser than the page's, and a code used once already;
		// the first submission uses a code up, whatever the result.
		b2 := browser()
		code = open(t, b2)
		r = submit(t, b2, code, 400)
		assert.Contains(t, string(r.Body), "was not connected")
		assert.Empty(t, r.Header.Values("Set-Cookie"))
		authorizeCode(t, code, "join-5", "", 400)
		code = open(t, b2)
		authorizeCode(t, code, "join-5", "", 204)
		submit(t, browser(), code, 400)
		submit(t, b2, code, 400)
		r = submit(t, b2, "not-a-code", 400)
		assert.Contains(t, string(r.Body), "not valid")
		r = c.do(t, call{method: post, host: host, path: page, client: b2, ctype: form,
			body: "code=" + code + "&pad=" + strings.Repeat("x", 4<<10), want: 400})
		assert.Contains(t, string(r.Body), "could not be read", "the form may be at most 4 KiB")
		c.do(t, call{method: post, host: host, path: page, client: b2, body: map[string]string{"code": code}, want: 400, docRejects: true})

		// Step 2's errors.
		code = open(t, b2)
		for _, bad := range []call{
			{body: map[string]string{"code": "bc_NOSUCHCODE"}, session: in("join-6", ""), want: 400},
			{body: `{"code":7}`, session: in("join-6", ""), want: 400, docRejects: true},
			{body: `{"code":`, session: in("join-6", ""), want: 400, docRejects: true},
			{body: map[string]string{"code": code}, want: 400, docRejects: true},
			{body: map[string]string{"code": code}, session: in("join-6", bogus), want: 401},
			{body: padded(t, map[string]string{"code": code}, 4<<10), session: in("join-6", ""), want: 413},
			{body: map[string]string{"code": code}, ctype: "text/plain", session: in("join-6", ""), want: 415, docRejects: true},
		} {
			bad.method, bad.host, bad.path = post, host, authorize
			r = c.do(t, bad)
			if bad.want == 401 {
				assert.Equal(t, "invalid_token", r.JSON(t)["error"])
				assert.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
			}
		}
		authorizeCode(t, code, "join-6", "", 204)

		// The Company API's errors.
		for _, path := range []string{introspect, end} {
			for _, bad := range []call{
				{body: `{}`, want: 400, docRejects: true},
				{body: `{"cookie":""}`, want: 400, docRejects: true},
				{body: `{"cookie":"x","session":"y"}`, want: 400, docRejects: true},
				{body: `{"cookie":`, want: 400, docRejects: true},
				{body: padded(t, map[string]string{"cookie": "x"}, 4<<10), want: 413},
				{body: `{"cookie":"x"}`, ctype: "text/plain", want: 415, docRejects: true},
				{body: `{"cookie":"x"}`, token: "-", want: 401},
				{body: `{"cookie":"x"}`, token: admin, want: 401},
			} {
				bad.method, bad.path = post, path
				if bad.token == "" {
					bad.token = acmeKey
				}
				c.do(t, bad)
			}
			c.do(t, call{method: post, path: path, body: `{"cookie":"x"}`, want: 401, docRejects: true})
		}
	})

	t.Run("conversations", func(t *testing.T) {
		// The Personal Agent side of spec 8 through the document: acme has
		// no agent webhook, so its conversations wait idle for its staff.
		ctx := context.Background()
		base := "/t/acme/poppy/conversations"
		// in signs as User usr_test in Session sid, signed in with token
		// when it is set.
		in := func(sid, token string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: sid, AccessToken: token}, testkit.SessionOptions{})
			}
		}
		s := in("conversations", "")
		message := func(id, text string) map[string]any {
			return map[string]any{"id": id, "author": map[string]any{"type": "agent"}, "text": text}
		}
		send := func(id, text string) map[string]any { return map[string]any{"message": message(id, text)} }
		reply := func(id, status string) map[string]any {
			m := map[string]any{"status": status, "responder": "agent"}
			if id != "" {
				m["conversation_id"] = id
			}
			return m
		}

		// Start (spec 8.3). What only Company messages carry, extensions
		// acme does not list and unknown members are dropped.
		first := map[string]any{"colour": "red", "message": map[string]any{
			"id": "msg_first", "role": "user", "author": map[string]any{"type": "agent", "name": "Pat"},
			"text":       "The jacket from order 1042 isn't warm enough.",
			"context":    map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true},
			"extensions": map[string]any{"acme.example/gift-wrap": map[string]any{"wrap": true}, "other.example/x": map[string]any{}},
		}}
		r := c.do(t, call{method: post, path: base, session: s, body: first, want: 201})
		id := r.JSON(t)["conversation_id"].(string)
		assert.Equal(t, reply(id, "idle"), r.JSON(t))
		conv := base + "/" + id
		// A retried first message returns the conversation it started; its
		// ID with other content is a conflict, in any conversation: message
		// IDs are the User's.
		r = c.do(t, call{method: post, path: base, session: s, body: first, want: 201})
		assert.Equal(t, reply(id, "idle"), r.JSON(t))
		for _, path := range []string{base, conv + "/messages"} {
			r = c.do(t, call{method: post, path: path, session: s, body: send("msg_first", "Other words."), want: 409})
			assert.Equal(t, "message_id_conflict", r.JSON(t)["error"])
		}

		// Read (spec 8.5): the message as accepted, then the state.
		rd := decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events", session: s, want: 200}))
		assert.Equal(t, []string{"message", "state"}, rd.types())
		assert.Equal(t, conversationRead{ConversationID: id, Events: rd.Events, Cursor: rd.Events[1]["id"].(string), Status: "idle", Responder: "agent"}, rd)
		assert.Equal(t, map[string]any{"id": "msg_first", "author": map[string]any{"type": "agent"},
			"text":       "The jacket from order 1042 isn't warm enough.",
			"context":    map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true},
			"extensions": map[string]any{"acme.example/gift-wrap": map[string]any{"wrap": true}}}, rd.Events[0]["message"])
		oldest, cursor := rd.Events[0]["id"].(string), rd.Cursor
		// Another Session of the same User continues it (spec 8.2); a read
		// that times out has no events and keeps the cursor.
		rd = decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events?wait=1&cursor=" + cursor, session: in("conversations-2", ""), want: 200}))
		assert.Empty(t, rd.Events)
		assert.Equal(t, cursor, rd.Cursor)

		// Send (spec 8.3): 202 with the state, or with wait a read from the
		// cursor.
		r = c.do(t, call{method: post, path: conv + "/messages", session: s, body: send("msg_second", "Does it come in medium?"), want: 202})
		assert.Equal(t, reply(id, "idle"), r.JSON(t))
		rd = decode[conversationRead](t, c.do(t, call{method: post, path: conv + "/messages?wait=0&cursor=" + cursor, session: s, want: 202,
			body: map[string]any{"message": map[string]any{"id": "msg_away", "author": map[string]any{"type": "human"},
				"context": map[string]any{"user_available": false}}}}))
		assert.Equal(t, []string{"message", "message"}, rd.types())
		assert.Equal(t, "msg_away", rd.Events[1]["message"].(map[string]any)["id"])
		cursor = rd.Cursor

		// A Direct Conversation (spec 8.10): until it closes, the parent
		// takes no messages, handoff or second Direct Conversation.
		r = c.do(t, call{method: post, path: base, session: s, want: 201, body: map[string]any{"parent_conversation_id": id,
			"message": map[string]any{"id": "msg_direct", "author": map[string]any{"type": "human"}, "text": "Hi, it's me."}}})
		direct := r.JSON(t)["conversation_id"].(string)
		assert.Equal(t, reply(direct, "idle"), r.JSON(t))
		for _, k := range []call{
			{method: post, path: conv + "/messages", body: send("msg_blocked", "Hello?")},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: base, body: map[string]any{"parent_conversation_id": id, "message": message("msg_direct_2", "Hi again.")}},
		} {
			k.session, k.want = s, 409
			r = c.do(t, k)
			assert.Equal(t, "direct_conversation_open", r.JSON(t)["error"], k.path)
			assert.Equal(t, direct, r.JSON(t)["conversation_id"], k.path)
		}
		// A Direct Conversation is no parent, and an accepted event must be
		// a user_requested one.
		r = c.do(t, call{method: post, path: base, session: s, want: 404,
			body: map[string]any{"parent_conversation_id": direct, "message": message("msg_nested", "Hi.")}})
		assert.Equal(t, "conversation_not_found", r.JSON(t)["error"])
		r = c.do(t, call{method: post, path: base, session: s, want: 400,
			body: map[string]any{"parent_conversation_id": id, "user_requested_event_id": oldest}})
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])
		r = c.do(t, call{method: post, path: base + "/" + direct + "/close", session: s, body: `{}`, want: 200})
		assert.Equal(t, reply("", "closed"), r.JSON(t))

		// Handoff (spec 8.9), twice: the second changes nothing.
		for range 2 {
			r = c.do(t, call{method: post, path: conv + "/handoff", session: s, body: `{"ignored":true}`, want: 202})
			assert.Equal(t, reply("", "queued"), r.JSON(t))
		}
		// Close (spec 8.12), twice; then no more messages, handoff or
		// Direct Conversation, though a retried message is answered again.
		for range 2 {
			r = c.do(t, call{method: post, path: conv + "/close", session: s, body: `{}`, want: 200})
			assert.Equal(t, reply("", "closed"), r.JSON(t))
		}
		for _, k := range []call{
			{method: post, path: conv + "/messages", body: send("msg_late", "Hello?")},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: base, body: map[string]any{"parent_conversation_id": id, "message": message("msg_direct_3", "Hi.")}},
		} {
			k.session, k.want = s, 409
			r = c.do(t, k)
			assert.Equal(t, "conversation_closed", r.JSON(t)["error"], k.path)
			assert.NotContains(t, r.JSON(t), "conversation_id")
		}
		r = c.do(t, call{method: post, path: conv + "/messages", session: s, body: send("msg_second", "Does it come in medium?"), want: 202})
		assert.Equal(t, id, r.JSON(t)["conversation_id"])

		// The parent's events tell the story; a closed conversation stays
		// readable.
		rd = decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events?cursor=" + cursor, session: s, want: 200}))
		assert.Equal(t, []string{"direct_opened", "direct_closed", "state", "state"}, rd.types())
		assert.Equal(t, direct, rd.Events[0]["conversation_id"])
		assert.Equal(t, direct, rd.Events[1]["conversation_id"])
		assert.Equal(t, []any{"queued", "closed"}, []any{rd.Events[2]["status"], rd.Events[3]["status"]})
		assert.Equal(t, "closed", rd.Status)

		// Streaming (spec 8.6): each event with its ID as the SSE id;
		// Last-Event-ID wins over cursor.
		r = c.do(t, call{method: get, path: conv + "/events?cursor=" + oldest, session: s, frames: len(rd.Events), want: 200,
			header: map[string]string{"Accept": "text/event-stream", "Last-Event-ID": cursor}})
		assert.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
		var frames []string
		for _, f := range strings.Split(strings.TrimSuffix(string(r.Body), "\n\n"), "\n\n") {
			if !strings.HasPrefix(f, ":") {
				frames = append(frames, f)
			}
		}
		require.Len(t, frames, len(rd.Events))
		for i, f := range frames {
			idLine, data, _ := strings.Cut(f, "\n")
			assert.Equal(t, "id: "+rd.Events[i]["id"].(string), idLine)
			var e map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &e))
			assert.Equal(t, rd.Events[i], e)
		}
		// Signed in (spec 8.11): the conversation takes the account, and
		// then needs a token for it: a challenge, not a 404.
		token := signIn(t, "alice", "correct horse")
		r = c.do(t, call{method: post, path: base, session: in("conversations-account", token), body: send("msg_account", "Where is my order?"), want: 201})
		mine := base + "/" + r.JSON(t)["conversation_id"].(string)
		c.do(t, call{method: get, path: mine + "/events", session: in("conversations-account", token), want: 200})
		for _, k := range []call{
			{method: get, path: mine + "/events"},
			{method: post, path: mine + "/messages", body: send("msg_signed_out", "Hello?")},
		} {
			k.session, k.want = in("conversations-account", ""), 401
			r = c.do(t, k)
			assert.Equal(t, "unauthorized", r.JSON(t)["error"])
			assert.Equal(t, `Bearer realm="poppyhost", resource_metadata="https://acme.example/.well-known/oauth-protected-resource"`,
				r.Header.Get("WWW-Authenticate"))
		}

		// Every route: a token that is not valid is a challenge ...
		for _, k := range []call{
			{method: post, path: base, body: send("msg_bad_token", "Hi.")},
			{method: post, path: conv + "/messages", body: send("msg_bad_token", "Hi.")},
			{method: get, path: conv + "/events"},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: conv + "/close", body: `{}`},
		} {
			k.session, k.want = in("conversations-bad-token", bogus), 401
			r = c.do(t, k)
			assert.Equal(t, "invalid_token", r.JSON(t)["error"], k.path)
			assert.Contains(t, r.Header.Get("WWW-Authenticate"), `Bearer realm="poppyhost", error="invalid_token"`, k.path)
		}
		// ... and another User's conversation, or an unknown one, does not
		// exist (spec 8.2).
		someoneElse := func(req *http.Request) {
			agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: "conversations-other", Sub: "usr_other"}, testkit.SessionOptions{})
		}
		for _, k := range []call{
			{method: post, path: base, body: map[string]any{"parent_conversation_id": id, "message": message("msg_other", "Hi.")}},
			{method: post, path: conv + "/messages", body: send("msg_other", "Hi.")},
			{method: get, path: conv + "/events"},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: conv + "/close", body: `{}`},
			{method: get, path: base + "/cnv_nosuch/events", session: s},
		} {
			if k.session == nil {
				k.session = someoneElse
			}
			k.want = 404
			r = c.do(t, k)
			assert.Equal(t, "conversation_not_found", r.JSON(t)["error"], k.path)
		}

		// Bad requests are invalid_request (spec 8.13), whatever is wrong
		// with the body.
		author := map[string]any{"type": "agent"}
		for _, k := range []call{
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg_empty", "author": author}}},
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg_bot", "author": map[string]any{"type": "bot"}, "text": "Hi."}}},
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg bad", "author": author, "text": "Hi."}}},
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg_data", "author": author, "data": "words"}}},
			{method: post, path: base, body: map[string]any{"message": map[string]any{"id": "msg_tz", "author": author, "context": map[string]any{"time_zone": "Mars/Olympus"}}}},
			{method: post, path: base, body: send("msg_long", strings.Repeat("x", 33<<10))},
			{method: post, path: base, body: padded(t, send("msg_padded", "Hi."), 64<<10)},
			{method: post, path: base, ctype: "text/plain", docRejects: true, body: send("msg_ctype", "Hi.")},
			{method: post, path: base, docRejects: true, body: `{}`},
			{method: post, path: base, docRejects: true, body: map[string]any{"user_requested_event_id": oldest, "message": message("msg_orphan", "Hi.")}},
			{method: post, path: base + "?wait=soon", docRejects: true, body: send("msg_wait", "Hi.")},
			{method: post, path: conv + "/messages", docRejects: true, body: `{"message":`},
			{method: post, path: conv + "/messages", docRejects: true, body: `{}`},
			{method: get, path: conv + "/events?cursor=nope"},
			{method: get, path: conv + "/events?wait=-1", docRejects: true},
			{method: post, path: conv + "/handoff", docRejects: true, body: `[]`},
			{method: post, path: conv + "/close", docRejects: true, body: ""},
		} {
			k.session, k.want = s, 400
			assert.Equal(t, "invalid_request", c.do(t, k).JSON(t)["error"], "%s %s", k.method, k.path)
		}
		r = c.do(t, call{method: get, path: conv + "/events", want: 400, docRejects: true})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"])

		// A cursor for events no longer kept (spec 8.5). The prune job
		// keeps events for at least a day (conversations.retention_days),
		// so the test drops the parent's oldest three as that job does.
		acmeCo, err := env.Platform.Tenants.Get(ctx, "acme")
		require.NoError(t, err)
		_, err = env.Pool.Exec(ctx, `DELETE FROM conversation_events WHERE company_id = $1 AND conversation_id = $2 AND seq < 4`, acmeCo.ID, id)
		require.NoError(t, err)
		_, err = env.Pool.Exec(ctx, `UPDATE conversations SET first_seq = 4 WHERE company_id = $1 AND id = $2`, acmeCo.ID, id)
		require.NoError(t, err)
		for _, k := range []call{
			{method: get, path: conv + "/events?cursor=" + oldest},
			{method: post, path: conv + "/messages?wait=0&cursor=" + oldest, body: send("msg_second", "Does it come in medium?")},
			{method: post, path: base + "?wait=0&cursor=" + oldest, body: first},
		} {
			k.session, k.want = s, 410
			assert.Equal(t, "cursor_expired", c.do(t, k).JSON(t)["error"], k.path)
		}
		rd = decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events", session: s, want: 200}))
		assert.NotEqual(t, oldest, rd.Events[0]["id"], "read again from the beginning")
		pruned = pruneMark{conversation: id, cursor: oldest}
	})

	t.Run("company conversations", func(t *testing.T) {
		// The Company side (its agent or staff, with an API key) of a
		// conversation a Personal Agent starts, through the document.
		base, paBase := "/company/v1/conversations", "/t/acme/poppy/conversations"
		s := func(req *http.Request) {
			agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: "company-conversations"}, testkit.SessionOptions{})
		}
		type change struct {
			ConversationID string         `json:"conversation_id"`
			Status         string         `json:"status"`
			Responder      string         `json:"responder"`
			EventID        string         `json:"event_id"`
			Message        map[string]any `json:"message"`
		}
		type view struct {
			ID      string            `json:"id"`
			Status  string            `json:"status"`
			Context map[string]any    `json:"context"`
			Owner   map[string]string `json:"owner"`
			Cursor  string            `json:"cursor"`
		}
		type list struct {
			Conversations []view `json:"conversations"`
			Next          string `json:"next"`
		}
		do := func(method, path string, body any, want int) *testkit.Response {
			t.Helper()
			return c.do(t, call{method: method, path: path, token: acmeKey, body: body, want: want})
		}
		sse := func(last string) map[string]string {
			return map[string]string{"Accept": "text/event-stream", "Last-Event-ID": last}
		}

		r := c.do(t, call{method: post, path: paBase, session: s, want: 201, body: map[string]any{"message": map[string]any{
			"id": "msg_company_1", "author": map[string]any{"type": "agent"}, "text": "Can the user exchange the jacket?",
			"context": map[string]any{"locale": "en-GB"}}}})
		id := r.JSON(t)["conversation_id"].(string)
		conv, pa := base+"/"+id, paBase+"/"+id

		// The Company finds it: newest first, by status, page by page.
		l := decode[list](t, do(get, base+"?status=idle&limit=1", nil, 200))
		require.Len(t, l.Conversations, 1)
		assert.Equal(t, id, l.Conversations[0].ID)
		assert.Equal(t, id, l.Next)
		l = decode[list](t, do(get, base+"?limit=100&before="+l.Next, nil, 200))
		assert.True(t, slices.ContainsFunc(l.Conversations, func(v view) bool { return v.ID == pruned.conversation }))
		assert.False(t, slices.ContainsFunc(l.Conversations, func(v view) bool { return v.ID == id }))
		v := decode[view](t, do(get, conv, nil, 200))
		assert.Equal(t, map[string]string{"client_id": agent.ClientID, "user_id": "usr_test", "account": ""}, v.Owner)
		assert.Equal(t, map[string]any{"locale": "en-GB"}, v.Context)

		// The Company Agent works on a reply, streamed to the Personal
		// Agent as text deltas without IDs (spec 8.6), then posts it.
		ch := decode[change](t, do(post, conv+"/status", `{"status":"working"}`, 200))
		assert.Equal(t, change{ConversationID: id, Status: "working", Responder: "agent"}, ch)
		cursor := decode[view](t, do(get, conv, nil, 200)).Cursor
		r = c.do(t, call{method: get, path: pa + "/events", session: s, frames: 1, want: 200, header: sse(cursor),
			opened: func() { do(post, conv+"/deltas", `{"message_id":"msg_reply","text":"I can do that. "}`, 204) }})
		assert.Equal(t, "event: text-delta\ndata: {\"message_id\":\"msg_reply\",\"text\":\"I can do that. \"}\n\n",
			strings.TrimPrefix(string(r.Body), ": keep-alive\n\n"))
		reply := map[string]any{"message": map[string]any{"id": "msg_reply", "text": "I can do that. Want the insulated one?",
			"author": map[string]any{"type": "agent", "id": "aut_stormy", "name": "Stormy", "image": "https://cdn.acme.example/stormy.png"},
			"data":   map[string]any{"replacement_sku": "stormline-insulated-m", "price_difference": 70}}}
		ch = decode[change](t, do(post, conv+"/messages", reply, 201))
		assert.Equal(t, "idle", ch.Status)
		assert.Equal(t, "company", ch.Message["role"])
		// A retry answers the first post; the ID with other content
		// conflicts.
		assert.Equal(t, ch, decode[change](t, do(post, conv+"/messages", reply, 200)))
		r = do(post, conv+"/messages", `{"message":{"id":"msg_reply","author":{"type":"agent"},"text":"Other words."}}`, 409)
		assert.Equal(t, "message_id_conflict", r.JSON(t)["error"])
		rd := decode[conversationRead](t, c.do(t, call{method: get, path: pa + "/events?cursor=" + cursor, session: s, want: 200}))
		assert.Equal(t, []string{"message", "state"}, rd.types())
		assert.Equal(t, ch.EventID, rd.Events[0]["id"])
		assert.Equal(t, ch.Message, rd.Events[0]["message"])

		// It needs the User's account (spec 8.11): an event, and the
		// challenge next to it on a read.
		ch = decode[change](t, do(post, conv+"/authorization", `{"scope":"orders:read orders:write"}`, 201))
		r = c.do(t, call{method: get, path: pa + "/events?cursor=" + rd.Cursor, session: s, want: 200})
		assert.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), `Bearer realm="poppyhost", error="insufficient_scope", scope="orders:read orders:write"`),
			r.Header.Get("WWW-Authenticate"))
		rd = decode[conversationRead](t, r)
		assert.Equal(t, []string{"authorization"}, rd.types())
		assert.Equal(t, ch.EventID, rd.Events[0]["id"])

		// It asks for the User (spec 8.10); the Personal Agent accepts
		// without a message, so the Company speaks first, in the Direct
		// Conversation; accepting again returns the same one.
		asked := decode[change](t, do(post, conv+"/user-requested", `{"reason":"A specialist needs to confirm the exchange."}`, 201)).EventID
		accept := map[string]any{"parent_conversation_id": id, "user_requested_event_id": asked}
		rd = decode[conversationRead](t, c.do(t, call{method: post, path: paBase + "?wait=0", session: s, body: accept, want: 201}))
		direct := rd.ConversationID
		assert.NotEqual(t, id, direct)
		assert.Equal(t, []string{"state"}, rd.types())
		r = c.do(t, call{method: post, path: paBase, session: s, body: accept, want: 201})
		assert.Equal(t, direct, r.JSON(t)["conversation_id"])
		ch = decode[change](t, do(post, base+"/"+direct+"/messages", `{"message":{"author":{"type":"human","name":"Alex"},"text":"Hi, I'm Alex."}}`, 201))
		assert.Equal(t, "human", ch.Responder)
		assert.NotEmpty(t, ch.Message["id"], "an ID is made for the message")
		r = do(post, base+"/"+direct+"/user-requested", `{"reason":"Again?"}`, 400)
		assert.Contains(t, r.JSON(t)["error_description"], "Direct Conversation")
		assert.Equal(t, "closed", decode[change](t, do(post, base+"/"+direct+"/close", nil, 200)).Status)
		assert.Equal(t, "closed", decode[change](t, do(post, base+"/"+direct+"/close", `{}`, 200)).Status)

		// Handoff (spec 8.9): nobody is free, with the Company's message;
		// then a person joins.
		c.do(t, call{method: post, path: pa + "/handoff", session: s, body: `{}`, want: 202})
		ch = decode[change](t, do(post, conv+"/handoff-unavailable", nil, 200))
		assert.Equal(t, []string{"idle", "agent", "Nobody is free right now."}, []string{ch.Status, ch.Responder, ch.Message["text"].(string)})
		r = do(post, conv+"/handoff-unavailable", `{"text":"Still nobody."}`, 409)
		assert.Equal(t, "conflict", r.JSON(t)["error"])
		c.do(t, call{method: post, path: pa + "/handoff", session: s, body: `{}`, want: 202})
		ch = decode[change](t, do(post, conv+"/join", `{"author":{"id":"aut_alex","name":"Alex"},"text":"Hi, I'm Alex."}`, 200))
		assert.Equal(t, []string{"idle", "human", "human"}, []string{ch.Status, ch.Responder, ch.Message["author"].(map[string]any)["type"].(string)})

		// The Company reads events as the Personal Agent does, streams
		// included.
		rd = decode[conversationRead](t, do(get, conv+"/events?cursor="+cursor, nil, 200))
		assert.Equal(t, []string{"message", "state", "authorization", "user_requested", "direct_opened", "direct_closed",
			"state", "message", "state", "state", "state", "message"}, rd.types())
		last := rd.Events[len(rd.Events)-2]["id"].(string)
		r = c.do(t, call{method: get, path: conv + "/events", token: acmeKey, frames: 1, header: sse(last), want: 200})
		assert.True(t, strings.HasPrefix(string(r.Body), "id: "+rd.Cursor+"\n"), "%s", r.Body)
		c.do(t, call{method: get, path: base + "/" + pruned.conversation + "/events?cursor=" + pruned.cursor, token: acmeKey, want: 410})

		// The webhook secret, shown once and replaced at will.
		r = do(post, base+"/webhook-secret", nil, 201)
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		assert.NotEqual(t, r.JSON(t)["secret"], do(post, base+"/webhook-secret", `{}`, 201).JSON(t)["secret"])

		// Close, twice; then every change is refused.
		assert.Equal(t, "closed", decode[change](t, do(post, conv+"/close", `{}`, 200)).Status)
		assert.Equal(t, "closed", decode[change](t, do(post, conv+"/close", nil, 200)).Status)
		changes := map[string]any{
			"/messages":            `{"message":{"author":{"type":"agent"},"text":"Anything else?"}}`,
			"/deltas":              `{"message_id":"msg_late","text":"Any"}`,
			"/status":              `{"status":"working"}`,
			"/join":                nil,
			"/handoff-unavailable": nil,
			"/user-requested":      `{"reason":"One more thing."}`,
			"/authorization":       `{"scope":"orders:read"}`,
		}
		for route, body := range changes {
			assert.Equal(t, "conversation_closed", do(post, conv+route, body, 409).JSON(t)["error"], route)
		}
		// Another Company's or no conversation.
		changes["/close"], changes[""], changes["/events"] = nil, nil, nil
		for route, body := range changes {
			method := post
			if route == "" || route == "/events" {
				method = get
			}
			assert.Equal(t, "conversation_not_found", do(method, base+"/cnv_nosuch"+route, body, 404).JSON(t)["error"], route)
		}

		// Bad requests.
		for _, k := range []call{
			{method: get, path: base + "?status=open", docRejects: true},
			{method: get, path: base + "?limit=101", docRejects: true},
			{method: get, path: base + "?before=cnv_nosuch"},
			{method: post, path: base + "/webhook-secret", body: `{"rotate":true}`, docRejects: true},
			{method: get, path: conv + "/events?cursor=nope"},
			{method: post, path: conv + "/messages", docRejects: true,
				body: `{"message":{"author":{"type":"agent"},"text":"Hi.","context":{"locale":"en-GB"}}}`},
			{method: post, path: conv + "/messages", docRejects: true, body: `{"message":{"author":{"type":"agent"},"text":"Hi."},"status":"closed"}`},
			{method: post, path: conv + "/messages", body: `{"message":{"author":{"type":"agent"},"extensions":{"other.example/x":{}}}}`},
			{method: post, path: conv + "/deltas", docRejects: true, body: `{"message_id":"msg_late","text":""}`},
			{method: post, path: conv + "/status", docRejects: true, body: `{"status":"closed"}`},
			{method: post, path: conv + "/join", docRejects: true, body: `{"author":{"type":"agent"}}`},
			{method: post, path: conv + "/handoff-unavailable", docRejects: true, body: map[string]string{"text": strings.Repeat("t", 1001)}},
			{method: post, path: conv + "/user-requested", docRejects: true, body: `{"reason":"  "}`},
			{method: post, path: conv + "/authorization", body: `{"scope":"orders:delete"}`},
			{method: post, path: conv + "/close", docRejects: true, body: `{"reason":"done"}`},
		} {
			k.token, k.want = acmeKey, 400
			assert.Equal(t, "invalid_request", c.do(t, k).JSON(t)["error"], "%s %s", k.method, k.path)
		}
		// Every route needs an API key; the bodies are JSON of at most
		// 64 KiB.
		for _, op := range operations {
			method, path, _ := strings.Cut(op, " ")
			if !strings.HasPrefix(path, base) {
				continue
			}
			path = strings.ReplaceAll(path, "{conversation_id}", id)
			r = c.do(t, call{method: method, path: path, want: 401, docRejects: true})
			assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
			if method == post {
				body, _ := changes[strings.TrimPrefix(path, conv)].(string)
				if body == "" {
					body = `{}`
				}
				c.do(t, call{method: method, path: path, token: acmeKey, body: padded(t, json.RawMessage(body), 64<<10), want: 413})
				c.do(t, call{method: method, path: path, token: acmeKey, body: body, ctype: "text/plain", want: 415, docRejects: true})
			}
		}
	})

	t.Run("gateway", func(t *testing.T) {
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
				agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: sid, AccessToken: token}, testkit.SessionOptions{})
			}
		}
		firstField := func(r *testkit.Response) string {
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
		// server, and its OAuth flow is acme's issuer.
		descURL := issuer + "/openapi/orders.json"
		r = c.do(t, call{method: get, path: "/t/acme/openapi/orders.json", want: 200})
		published := r.JSON(t)
		assert.Equal(t, []any{map[string]any{"url": issuer + "/api/orders"}}, published["servers"])
		flow := published["components"].(map[string]any)["securitySchemes"].(map[string]any)["oauth"].(map[string]any)["flows"].(map[string]any)
		assert.Equal(t, []string{"authorizationCode"}, slices.Collect(maps.Keys(flow)))
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

		// The Operations extension (docs/operations-extension.md): acme
		// turns it on, and its origin answers an exchange with a proposal
		// until the request carries an approval, then performs it, declines
		// it, or takes longer than the API's timeout_seconds (1), so that
		// whether it took effect is unknown. The action key names the
		// method and the case, so each is its own operation.
		r = c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"operations":{"enabled":true}}`})
		assert.Equal(t, map[string]any{"enabled": true, "web": false}, r.JSON(t)["operations"])
		const exchanges = `openapi: 3.1.0
info: {title: Exchanges, version: '1'}
paths:
  /exchange:
    get: {responses: {'200': {description: OK}}}
    post: {responses: {'201': {description: Exchanged}}}
    put: {responses: {'201': {description: Exchanged}}}
    patch: {responses: {'201': {description: Exchanged}}}
    delete: {responses: {'201': {description: Exchanged}}}
`
		c.do(t, call{method: put, path: apis + "/exchanges", token: acmeKey, want: 201,
			body: map[string]any{"origin": origin.BaseURL(), "openapi": exchanges, "timeout_seconds": 1}})
		exchange := func(w http.ResponseWriter, r *http.Request) {
			claims, kase := testkit.OriginClaims(r), r.URL.Query().Get("case")
			if claims.OperationID == "" {
				w.Header().Set("Content-Type", "application/poppy-proposal+json")
				_, _ = fmt.Fprintf(w, `{"action_key": "exchange o1 %s %s",
					"summary": "Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more.",
					"terms": {"order_id": "o1", "replacement_sku": "stormline-insulated-m",
						"price_difference": {"amount": "70.00", "currency": "USD"}}}`, r.Method, kase)
				return
			}
			switch kase {
			case "decline":
				w.Header().Set("Content-Type", "application/poppy-decline+json")
				_, _ = io.WriteString(w, `{"reason": "Only the account holder can exchange this order.",
					"alternative": {"instructions": "Exchange it in the Acme app.",
						"references": [{"type": "web", "url": "https://acme.example/orders/o1"}]}}`)
				return
			case "slow":
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"exchange_id": "ex_1", "operation_id": %q, "revision": %q, "approver": %q}`,
				claims.OperationID, claims.Revision, claims.Approver)
		}
		declares := map[string]string{"Poppy-Extensions": `"operations";v="3"`}
		approving := func(op map[string]any) map[string]string {
			return map[string]string{"Poppy-Extensions": `"operations";v="3"`, "Poppy-Approval": fmt.Sprintf(
				`operation_id=%q, revision=%q, approver="user", approved_at=%d, input_type="tap"`,
				op["operation_id"], op["revision"], time.Now().Unix())}
		}
		operation := func(r *testkit.Response) map[string]any {
			t.Helper()
			body := r.JSON(t)
			require.Equal(t, "approval_required", body["error"], "%s", r.Body)
			assert.Empty(t, r.Header.Get("WWW-Authenticate"), "approval_required is no authorization error")
			return body["operation"].(map[string]any)
		}
		exchangePath := "/exchange" // one segment: the document's {path}
		// proposed is an operation the loop below made, for the Company's
		// list of operations after it; opOrder holds them as made.
		type proposed struct {
			method, kase string
			op           map[string]any
			done         []byte // the stored answer of a performed one
		}
		made := map[string]*proposed{}
		var opOrder []string
		record := func(m, kase string, op map[string]any) *proposed {
			p := &proposed{method: m, kase: kase, op: op}
			made[op["operation_id"].(string)] = p
			opOrder = append(opOrder, op["operation_id"].(string))
			return p
		}
		for _, m := range []string{get, post, put, patch, del} {
			origin.Handle(m, exchangePath, exchange)
			var body any
			if m != get && m != del {
				body = `{"replacement_sku": "stormline-insulated-m"}`
			}
			at := func(kase string, header map[string]string, want int) call {
				return call{method: m, path: "/t/acme/api/exchanges" + exchangePath + "?case=" + kase,
					session: in("ops-alice", token), body: body, header: header, want: want}
			}

			// A request that does not declare the extension cannot take
			// the approval the action needs.
			r = c.do(t, at("perform", nil, 403))
			assert.Equal(t, "extension_required", r.JSON(t)["error"], "%s", r.Body)
			assert.Equal(t, "operations", r.JSON(t)["extension"])
			assert.Equal(t, `Bearer realm="poppyhost", error="extension_required", extension="operations"`, r.Header.Get("WWW-Authenticate"))

			// Declared: the operation, the same one when asked again.
			op := operation(c.do(t, at("perform", declares, 403)))
			assert.Equal(t, map[string]any{"order_id": "o1", "replacement_sku": "stormline-insulated-m",
				"price_difference": map[string]any{"amount": "70.00", "currency": "USD"}}, op["terms"])
			assert.Contains(t, op["summary"], "Stormline Insulated Jacket")
			expires, err := time.Parse(time.RFC3339, op["expires_at"].(string))
			require.NoError(t, err)
			assert.WithinDuration(t, time.Now().Add(30*time.Minute), expires, time.Minute, "30 minutes by default")
			assert.Equal(t, op, operation(c.do(t, at("perform", declares, 403))))
			performed := record(m, "perform", op)

			// A malformed approval.
			r = c.do(t, at("perform", map[string]string{"Poppy-Approval": fmt.Sprintf(`operation_id=%q, revision=%q, approver="someone"`,
				op["operation_id"], op["revision"])}, 400))
			assert.Equal(t, "invalid_request", r.JSON(t)["error"])

			// Approved: performed once, with the approval in
			// Poppy-Verified and one Idempotency-Key per revision.
			calls := origin.Calls(m, exchangePath)
			done := c.do(t, at("perform", approving(op), 201))
			assert.Equal(t, calls+1, origin.Calls(m, exchangePath))
			// The settle job of an earlier case may call the origin too:
			// find this call by its operation.
			var got testkit.Received
			for _, rec := range origin.Received() {
				if rec.Method == m && rec.Claims != nil && rec.Claims.OperationID == op["operation_id"] {
					got = rec
				}
			}
			require.NoError(t, got.VerifyErr)
			require.NotNil(t, got.Claims)
			assert.Equal(t, []string{op["operation_id"].(string), op["revision"].(string), "user"},
				[]string{got.Claims.OperationID, got.Claims.Revision, got.Claims.Approver})
			assert.Equal(t, op["operation_id"].(string)+"."+op["revision"].(string), got.Header.Get("Idempotency-Key"))
			assert.Empty(t, got.Header.Get("Poppy-Approval"))
			assert.Equal(t, op["operation_id"], done.JSON(t)["operation_id"])
			performed.done = done.Body
			// Retried: the stored answer, the origin not called again.
			again := c.do(t, at("perform", approving(op), 201))
			assert.Equal(t, string(done.Body), string(again.Body))
			assert.Equal(t, calls+1, origin.Calls(m, exchangePath))

			// Declined by the origin at perform time.
			op = operation(c.do(t, at("decline", declares, 403)))
			record(m, "decline", op)
			r = c.do(t, at("decline", approving(op), 403))
			assert.Equal(t, map[string]any{"error": "approval_declined", "operation_id": op["operation_id"], "revision": op["revision"],
				"reason": "Only the account holder can exchange this order.",
				"alternative": map[string]any{"instructions": "Exchange it in the Acme app.",
					"references": []any{map[string]any{"type": "web", "url": "https://acme.example/orders/o1"}}}}, r.JSON(t))
			assert.Empty(t, r.Header.Get("WWW-Authenticate"))

			// The origin outlasts timeout_seconds: whether it took effect
			// is unknown, so the operation is still being performed, for
			// this request and its retries.
			op = operation(c.do(t, at("slow", declares, 403)))
			record(m, "slow", op)
			for range 2 {
				r = c.do(t, at("slow", approving(op), 503))
				assert.Equal(t, "unavailable", r.JSON(t)["error"])
				assert.Equal(t, "5", r.Header.Get("Retry-After"))
			}
			origin.Handle(m, exchangePath, nil)
		}
		// poppy.json lists the extension next to acme's own.
		opsDoc := c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, []any{map[string]any{"version": "3"}}, opsDoc["extensions"].(map[string]any)["operations"])
		assert.Len(t, opsDoc["extensions"], len(acme["extensions"].(map[string]any))+1)
		c.do(t, call{method: del, path: apis + "/exchanges", token: acmeKey, want: 204})
		r = c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"operations":null}`})
		assert.Equal(t, map[string]any{"enabled": false, "web": false}, r.JSON(t)["operations"])
		assert.NotContains(t, c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)["extensions"], "operations")

		// The Company's audit of those operations, on the Company API and
		// the admin API (also once the extension is off again): newest
		// first, each with its revisions, approval and stored answer.
		type opPage struct {
			Operations []map[string]any `json:"operations"`
			Next       *string          `json:"next"`
		}
		companyOps, adminOps := "/company/v1/operations", "/admin/v1/companies/acme/operations"
		r = c.do(t, call{method: get, path: companyOps, token: acmeKey, want: 200})
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		require.Contains(t, r.JSON(t), "next")
		page := decode[opPage](t, r)
		assert.Nil(t, page.Next, "the page is not full")
		ids := make([]string, 0, len(page.Operations))
		for _, rec := range page.Operations {
			ids = append(ids, rec["operation_id"].(string))
		}
		newestFirst := slices.Clone(opOrder)
		slices.Reverse(newestFirst)
		require.Equal(t, newestFirst, ids)
		sameTime := func(want, got any, msgAndArgs ...any) {
			t.Helper()
			w, err := time.Parse(time.RFC3339, want.(string))
			require.NoError(t, err)
			g, err := time.Parse(time.RFC3339, got.(string))
			require.NoError(t, err)
			assert.True(t, w.Equal(g), "%v != %v %v", want, got, msgAndArgs)
		}
		byID := map[string]map[string]any{}
		for _, rec := range page.Operations {
			id := rec["operation_id"].(string)
			byID[id] = rec
			p := made[id]
			name := p.method + " " + p.kase
			assert.Equal(t, "api", rec["interface"], name)
			assert.Equal(t, "exchanges", rec["target"], name)
			assert.Equal(t, "exchange o1 "+name, rec["action_key"], name)
			assert.Equal(t, agent.ClientID, rec["client_id"], name)
			assert.Equal(t, "usr_test", rec["user_id"], name)
			assert.Regexp(t, `^[1-9][0-9]*$`, rec["account"], "%s: proposed signed in", name)
			assert.Equal(t, p.op["revision"], rec["revision"], name)
			revs := rec["revisions"].([]any)
			require.Len(t, revs, 1, name)
			rev := revs[0].(map[string]any)
			assert.Equal(t, p.op["revision"], rev["revision"], name)
			assert.Equal(t, p.op["terms"], rev["terms"], name)
			assert.Equal(t, p.op["summary"], rev["summary"], name)
			sameTime(p.op["expires_at"], rev["expires_at"], name)
			assert.NotContains(t, rev, "replaced_at", name)
			switch p.kase {
			case "perform":
				assert.Equal(t, "performed", rec["status"], name)
				assert.NotContains(t, rev, "declined_at", name)
				assert.Contains(t, rec, "performed_at", name)
				approval := maps.Clone(rec["approval"].(map[string]any))
				assert.InDelta(t, time.Now().Unix(), approval["approved_at"], 120, name)
				delete(approval, "approved_at")
				assert.Equal(t, map[string]any{"operation_id": id, "revision": p.op["revision"], "approver": "user",
					"input_type": "tap"}, approval, name)
				resp := rec["response"].(map[string]any)
				assert.Equal(t, float64(201), resp["status"], name)
				assert.Equal(t, "application/json", resp["content_type"], name)
				body, err := base64.StdEncoding.DecodeString(resp["body"].(string))
				require.NoError(t, err, "%s: the body is base64", name)
				assert.Equal(t, string(p.done), string(body), name)
			case "decline":
				// Declined: nothing performed, waiting for a new revision.
				assert.Equal(t, "proposed", rec["status"], name)
				assert.Contains(t, rev, "declined_at", name)
				assert.NotContains(t, rec, "approval", name)
				assert.NotContains(t, rec, "response", name)
				assert.NotContains(t, rec, "performed_at", name)
			case "slow":
				// Performing until its settle job gets a final answer.
				assert.Contains(t, []any{"performing", "performed"}, rec["status"], name)
				assert.Equal(t, p.op["revision"], rec["approval"].(map[string]any)["revision"], name)
			}
		}
		// The operator sees the same list.
		r = c.do(t, call{method: get, path: adminOps + "?limit=200", token: admin, want: 200})
		admPage := decode[opPage](t, r)
		assert.Nil(t, admPage.Next)
		require.Len(t, admPage.Operations, len(ids))
		for i, rec := range admPage.Operations {
			assert.Equal(t, ids[i], rec["operation_id"])
			if made[ids[i]].kase != "slow" {
				assert.Equal(t, byID[ids[i]], rec)
			}
		}

		// Paging: a full page's next is its last operation_id, the
		// after of the next page.
		page = decode[opPage](t, c.do(t, call{method: get, path: companyOps + "?limit=1", token: acmeKey, want: 200}))
		require.Len(t, page.Operations, 1)
		assert.Equal(t, ids[0], page.Operations[0]["operation_id"])
		require.NotNil(t, page.Next)
		assert.Equal(t, ids[0], *page.Next)
		page = decode[opPage](t, c.do(t, call{method: get, path: companyOps + "?limit=1&after=" + *page.Next, token: acmeKey, want: 200}))
		require.Len(t, page.Operations, 1)
		assert.Equal(t, ids[1], page.Operations[0]["operation_id"])
		assert.Equal(t, ids[1], *page.Next)
		var walked []string
		for q := "limit=4"; ; {
			page = decode[opPage](t, c.do(t, call{method: get, path: adminOps + "?" + q, token: admin, want: 200}))
			for _, rec := range page.Operations {
				walked = append(walked, rec["operation_id"].(string))
			}
			if page.Next == nil {
				break
			}
			require.Len(t, page.Operations, 4)
			q = "limit=4&after=" + url.QueryEscape(*page.Next)
		}
		assert.Equal(t, ids, walked)
		r = c.do(t, call{method: get, path: companyOps + "?after=" + ids[len(ids)-1], token: acmeKey, want: 200})
		assert.JSONEq(t, `{"operations": [], "next": null}`, string(r.Body))
		r = c.do(t, call{method: get, path: companyOps + "?after=op_nosuch", token: acmeKey, want: 200})
		assert.JSONEq(t, `{"operations": [], "next": null}`, string(r.Body))

		// Each Company sees its own operations only.
		minimalKey := decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/minimal/api-keys", token: admin, want: 201,
			body: `{"name":"operations"}`})).Key
		for _, k := range []call{
			{path: companyOps, token: minimalKey},
			{path: companyOps + "?after=" + ids[1], token: minimalKey},
			{path: "/admin/v1/companies/minimal/operations", token: admin},
		} {
			k.method, k.want = get, 200
			assert.JSONEq(t, `{"operations": [], "next": null}`, string(c.do(t, k).Body), k.path)
		}

		// A bad limit names it, on both APIs.
		for _, q := range []string{"limit=0", "limit=201", "limit=ten", "limit=-1"} {
			for _, k := range []call{{path: adminOps + "?" + q, token: admin}, {path: companyOps + "?" + q, token: acmeKey}} {
				k.method, k.want, k.docRejects = get, 400, true
				assert.Equal(t, "limit", firstField(c.do(t, k)), q)
			}
		}
		// One operation, on both APIs, and another Company's not at all.
		for _, k := range []call{{path: companyOps + "/" + ids[0], token: acmeKey}, {path: adminOps + "/" + ids[0], token: admin}} {
			k.method, k.want = get, 200
			r = c.do(t, k)
			assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
			assert.Equal(t, ids[0], r.JSON(t)["operation_id"])
			assert.NotEmpty(t, r.JSON(t)["revisions"])
		}
		c.do(t, call{method: get, path: companyOps + "/" + ids[0], token: minimalKey, want: 404})
		c.do(t, call{method: get, path: companyOps + "/op_nosuch", token: acmeKey, want: 404})
		c.do(t, call{method: get, path: adminOps + "/op_nosuch", token: admin, want: 404})
		c.do(t, call{method: get, path: companyOps + "/" + ids[0], want: 401, docRejects: true})
		c.do(t, call{method: get, path: adminOps + "/" + ids[0], want: 401, docRejects: true})

		// Resolving an unknown outcome (docs/operations-extension.md 8):
		// an operation the settle job gave up on, one on each API.
		var performedID string
		var unknown []string
		for _, id := range ids {
			switch made[id].kase {
			case "perform":
				performedID = id
			case "decline":
				unknown = append(unknown, id)
			}
		}
		require.NotEmpty(t, performedID)
		require.GreaterOrEqual(t, len(unknown), 2)
		ctx := context.Background()
		acmeCo, err := env.Platform.Tenants.Get(ctx, "acme")
		require.NoError(t, err)
		for i, base := range []struct{ path, token string }{{companyOps, acmeKey}, {adminOps, admin}} {
			_, err := env.Pool.Exec(ctx, `UPDATE operations SET status = 'unknown' WHERE company_id = $1 AND id = $2`,
				acmeCo.ID, unknown[i])
			require.NoError(t, err)
			resolve := base.path + "/" + unknown[i] + "/resolve"
			r = c.do(t, call{method: post, path: resolve, token: base.token, want: 400, docRejects: true,
				body: map[string]any{"by": "ops"}})
			assert.Equal(t, "performed", firstField(r))
			c.do(t, call{method: post, path: resolve, token: base.token, want: 400, docRejects: true,
				body: map[string]any{"performed": true, "by": "ops", "unknown_member": 1}})
			c.do(t, call{method: post, path: resolve, token: base.token, want: 413,
				body: padded(t, map[string]any{"performed": true, "by": "ops"}, 256<<10)})
			c.do(t, call{method: post, path: resolve, token: base.token, want: 415, docRejects: true, ctype: "text/plain",
				body: `{"performed": true, "by": "ops"}`})
			c.do(t, call{method: post, path: resolve, want: 401, docRejects: true, body: map[string]any{"performed": true, "by": "ops"}})
			c.do(t, call{method: post, path: base.path + "/op_nosuch/resolve", token: base.token, want: 404,
				body: map[string]any{"performed": true, "by": "ops"}})
			c.do(t, call{method: post, path: base.path + "/" + performedID + "/resolve", token: base.token, want: 409,
				body: map[string]any{"performed": true, "by": "ops"}})
			r = c.do(t, call{method: post, path: resolve, token: base.token, want: 200,
				body: map[string]any{"performed": i == 0, "by": "ops@acme", "note": "checked the order system"}})
			res := r.JSON(t)["resolution"].(map[string]any)
			assert.Equal(t, []any{i == 0, "ops@acme"}, []any{res["performed"], res["by"]})
			c.do(t, call{method: post, path: resolve, token: base.token, want: 409,
				body: map[string]any{"performed": true, "by": "ops"}})
		}

		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/operations", token: admin, want: 404})
		r = c.do(t, call{method: get, path: adminOps, want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: adminOps, token: bogus, want: 401})
		c.do(t, call{method: get, path: adminOps, token: acmeKey, want: 401})
		r = c.do(t, call{method: get, path: companyOps, want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: companyOps, token: bogus, want: 401})
		c.do(t, call{method: get, path: companyOps, token: admin, want: 401})

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
		result := func(r *testkit.Response) map[string]any {
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
	})

	t.Run("rate limits", func(t *testing.T) {
		// A Company allowing one request a minute from an address: after
		// the first, every route of the Company answers 429 (spec 5.6).
		c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201, body: map[string]any{
			"slug": "busy", "organization": map[string]any{"name": "Busy", "domain": "busy.example"},
			"web": map[string]any{"browser_join": true}, "excluded_tasks": []any{map[string]any{"task": "T"}},
			"rate_limits": map[string]any{"per_address": 1},
		}})
		c.do(t, call{method: get, host: "busy.example", path: "/.well-known/poppy.json", want: 200})
		for _, op := range operations {
			method, path, _ := strings.Cut(op, " ")
			k := call{method: method, want: 429, docRejects: c.incomplete(method, path),
				path: strings.NewReplacer("{slug}", "busy", "{conversation_id}", "c_1", "{name}", "orders", "{path}", "x").Replace(path)}
			switch {
			case strings.HasPrefix(path, "/t/{slug}/"):
			case slices.Contains(companyDomainPaths, path):
				k.host = "busy.example"
			default:
				continue
			}
			r := c.do(t, k)
			assert.Equal(t, "rate_limited", r.JSON(t)["error"])
			n, err := strconv.Atoi(r.Header.Get("Retry-After"))
			assert.NoError(t, err, op)
			assert.True(t, n > 0 && n <= 60, "%s: Retry-After %d", op, n)
		}
		// Once its Session header is verified, a request also counts
		// against the Personal Agent and the Session.
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"rate_limits":{"per_session":1}}`})
		report := `{"task":"Return a gift","description":"No receipt."}`
		in := func(sid string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, testkit.SessionClaims{Aud: issuer, SID: sid}, testkit.SessionOptions{})
			}
		}
		c.do(t, call{method: post, path: "/t/acme/poppy/feedback", session: in("rate-1"), want: 202, body: report})
		r := c.do(t, call{method: post, path: "/t/acme/poppy/feedback", session: in("rate-1"), want: 429, body: report})
		assert.Equal(t, "rate_limited", r.JSON(t)["error"])
		n, err := strconv.Atoi(r.Header.Get("Retry-After"))
		assert.NoError(t, err)
		assert.True(t, n > 0 && n <= 60, "Retry-After %d", n)
		c.do(t, call{method: post, path: "/t/acme/poppy/feedback", session: in("rate-2"), want: 202, body: report})
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"rate_limits":{"per_session":300}}`})

		// Other Companies and the platform's own routes are not affected.
		c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200})
		c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/busy", want: 200})
		c.do(t, call{method: get, path: "/admin/v1/companies/busy", token: admin, want: 200})
	})

	t.Run("delete company", func(t *testing.T) {
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", want: 401, docRejects: true})
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", token: bogus, want: 401})
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", token: admin, want: 204})
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/corner", token: admin, want: 404})
		c.do(t, call{method: get, host: "corner.example", path: "/.well-known/poppy.json", want: 404})

		// The slug is retired (spec 3.2: an issuer stands for one Company);
		// the domain is free.
		r := c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 409,
			body: `{"slug":"corner","organization":{"name":"Corner Shop","domain":"corner.example"}}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"corner2","organization":{"name":"Corner Shop","domain":"corner.example"}}`})
	})

	t.Run("website operations", func(t *testing.T) {
		// A Company whose website uses operations (Operations extension 4,
		// 6, "Websites"); the operations its website would return are made
		// in its store, as the website proxy makes them.
		c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201, body: map[string]any{
			"slug": "webops", "organization": map[string]any{"name": "Web Ops", "domain": "webops.example"},
			"web":        map[string]any{"browser_join": true, "origin": "https://www.webops.example"},
			"operations": map[string]any{"enabled": true, "web": true},
		}})
		ctx := context.Background()
		webIssuer, path := env.PublicURL("/t/webops"), "/t/webops/poppy/operations"
		in := func(req *http.Request) {
			agent.Sign(t, req, testkit.SessionClaims{Aud: webIssuer, SID: "contract-webops"}, testkit.SessionOptions{})
			if req.Header.Get("Poppy-Extensions") == "" {
				req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
			}
		}
		var companyID int64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = 'webops'`).Scan(&companyID))
		store := webops.NewStore(env.Pool)
		propose := func(key string, account int64) (*webops.Operation, string) {
			op, err := store.Propose(ctx, companyID, webops.Owner{ClientID: agent.ClientID, UserID: "usr_test", AccountID: account},
				webops.InterfaceWeb, "web", &webops.Proposal{ActionKey: key, Terms: json.RawMessage(`{"sku": "m"}`)},
				&webops.Request{Method: post, Path: "/orders/o1/exchange", Body: []byte("sku=m")}, "", time.Now())
			require.NoError(t, err)
			return op, webops.Ref(op.OperationID, op.Revision)
		}
		approve := func(op *webops.Operation) map[string]string {
			return map[string]string{"Poppy-Approval": fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, op.OperationID, op.Revision)}
		}
		refBody := func(ref string) map[string]string { return map[string]string{"ref": ref} }

		op, ref := propose("exchange", 0)
		r := c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: 403})
		assert.Equal(t, op.OperationID, r.JSON(t)["operation"].(map[string]any)["operation_id"])
		r = c.do(t, call{method: post, path: path, session: in, body: refBody(op.OperationID + ".nosuch"), want: 400})
		// Undeclared: no operation (Operations extension 2).
		undeclared := func(req *http.Request) {
			req.Header.Set("Poppy-Extensions", `"gift-wrap";v="1"`)
			in(req)
		}
		assert.Equal(t, "extension_required", c.do(t, call{method: post, path: path, session: undeclared, body: refBody(ref),
			want: 403}).JSON(t)["error"])
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])
		c.do(t, call{method: post, path: path, session: in, body: refBody(ref), header: map[string]string{"Poppy-Approval": `operation_id="x"`}, want: 400})
		c.do(t, call{method: post, path: path, session: in, body: padded(t, refBody(ref), 8<<10), want: 413})
		c.do(t, call{method: post, path: path, session: in, body: `{"ref":"x"}`, ctype: "text/plain", want: 415, docRejects: true})
		c.do(t, call{method: post, path: path, session: in, body: refBody(ref), header: approve(op), want: 204})
		r = c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: 200})
		assert.Equal(t, map[string]any{"operation_id": op.OperationID, "status": "approved"}, r.JSON(t))
		// An account's operation, signed out: a challenge.
		_, accountRef := propose("close", 7)
		r = c.do(t, call{method: post, path: path, session: in, body: refBody(accountRef), want: 401})
		assert.NotEmpty(t, r.Header.Get("WWW-Authenticate"))

		// The approval hook declines, or cannot be reached: nothing recorded.
		hook := env.StartOrigin(t, "hook-webops.test", webIssuer, webIssuer)
		hook.Handle(post, "/", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/poppy-decline+json")
			_, _ = io.WriteString(w, `{"reason": "Not online."}`)
		})
		for _, h := range []struct {
			url        string
			want, then int // the approval's answer, then the ref's
		}{{hook.BaseURL(), 403, 403}, {"https://down.test/hook", 502, 403}} {
			c.do(t, call{method: patch, path: "/admin/v1/companies/webops", token: admin, want: 200,
				body: map[string]any{"operations": map[string]any{"enabled": true, "web": true, "approval_hook": h.url}}})
			op, ref := propose("return "+h.url, 0)
			c.do(t, call{method: post, path: path, session: in, body: refBody(ref), header: approve(op), want: h.want})
			c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: h.then})
		}
		doc := c.do(t, call{method: get, host: "webops.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, []any{map[string]any{"version": "3", "endpoint": webIssuer + "/poppy/operations"}},
			doc["extensions"].(map[string]any)["operations"])

		// Off: 404, and poppy.json lists no endpoint.
		c.do(t, call{method: patch, path: "/admin/v1/companies/webops", token: admin, want: 200,
			body: map[string]any{"operations": map[string]any{"enabled": true, "web": false}}})
		c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: 404})
		doc = c.do(t, call{method: get, host: "webops.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, []any{map[string]any{"version": "3"}}, doc["extensions"].(map[string]any)["operations"])
	})

	t.Run("undocumented requests", func(t *testing.T) {
		r := c.undocumented(t, call{method: http.MethodPut, path: "/admin/v1/companies/acme", token: admin, body: `{}`, want: 405}, "method_not_allowed")
		// RFC 9110 section 15.5.6: a 405 carries Allow.
		require.Equal(t, "GET, HEAD, PATCH, DELETE", r.Header.Get("Allow"))
		c.undocumented(t, call{method: get, path: "/no/such/route", want: 404}, "not_found")
		// A Company domain serves no platform route; without web.origin
		// (minimal has none) nothing else either.
		c.undocumented(t, call{method: get, host: "minimal.example", path: "/admin/v1/companies", token: admin, want: 404}, "not_found")
		r, _ = c.send(t, call{method: http.MethodHead, path: "/healthz"})
		assert.Equal(t, 200, r.Status)
		assert.Empty(t, r.Body)
		// The issuer's pages answer another method with a page.
		for _, path := range []string{"/t/acme/oauth/authorize", "/t/acme/device", "/t/acme/account"} {
			r, _ = c.send(t, call{method: http.MethodPut, path: path})
			assert.Equal(t, 405, r.Status, path)
			assert.Contains(t, r.Header.Get("Allow"), "GET", path)
			assert.Contains(t, r.Header.Get("Allow"), "POST", path)
			assert.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"), path)
		}
		// The OAuth endpoints answer a method they do not serve as every
		// route does.
		c.undocumented(t, call{method: get, path: "/t/acme/oauth/token", want: 405}, "method_not_allowed")
	})

	t.Run("draining", func(t *testing.T) {
		env.Platform.Drain()
		r := c.do(t, call{method: get, path: "/readyz", want: 503})
		assert.Equal(t, "draining", r.JSON(t)["status"])
	})

	c.checkCoverage(t)
}
