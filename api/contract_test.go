package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
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
	"POST /admin/v1/companies/{slug}/staff",
	"POST /admin/v1/companies/{slug}/api-keys",
	"GET /admin/v1/companies/{slug}/api-keys",
	"DELETE /admin/v1/companies/{slug}/api-keys/{id}",
	"GET /admin/v1/companies/{slug}/audit",
	"GET /admin/v1/companies/{slug}/feedback",
	"POST /admin/v1/companies/{slug}/sessions/end",
	"POST /admin/v1/companies/{slug}/keys/rotate",
	"POST /admin/v1/companies/{slug}/operations/{operation_id}/resolve",
	"POST /admin/v1/companies/{slug}/secret/rotations",
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
	"GET /admin/v1/operator-tokens",
	"DELETE /admin/v1/operator-tokens/{id}",
	"GET /admin/v1/audit",
	"GET /company/v1/company",
	"GET /company/v1/api-keys",
	"DELETE /company/v1/api-keys/{id}",
	"GET /company/v1/audit",
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
	"POST /company/v1/conversations/{conversation_id}/hand-back",
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
	"POST /t/{slug}/oauth/register",
	"GET /t/{slug}/oauth/jwks.json",
	"GET /t/{slug}/device",
	"POST /t/{slug}/device",
	"GET /console/{slug}/signin",
	"POST /console/{slug}/signin",
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

// opsPaths are served on the operations listener only.
var opsPaths = []string{"/healthz", "/readyz", "/metrics"}

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
	"POST /console/{slug}/signin 503":    true,
	// If-Match required: the test server does not require it
	// (POPPYHOST_REQUIRE_IF_MATCH); internal/tenant's TestIfMatchRequired
	// and internal/registry's TestPutIfMatchRequired do.
	"PATCH /admin/v1/companies/{slug} 428":            true,
	"PUT /admin/v1/companies/{slug}/apis/{name} 428":  true,
	"PUT /admin/v1/companies/{slug}/tools/{name} 428": true,
	"PUT /company/v1/apis/{name} 428":                 true,
	"PUT /company/v1/tools/{name} 428":                true,
}

// apiRateLimited reports a 429 of the admin or Company API: the limits
// per operator token and API key are far above what the contract sends,
// and internal/platform's TestAdminAndCompanyAPILimits provokes them.
func apiRateLimited(path, code string) bool {
	return code == "429" && (strings.HasPrefix(path, "/admin/v1/") || strings.HasPrefix(path, "/company/v1/"))
}

func init() {
	// The issuer's pages and key set, and event streams, for response
	// validation.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/jwk-set+json", openapi3filter.JSONBodyDecoder)
}

// The admin token, a token no one issued, and the methods, as every area's
// requests name them.
const (
	admin = testkit.AdminToken
	bogus = "not-a-valid-token"
	get   = http.MethodGet
	post  = http.MethodPost
	patch = http.MethodPatch
	put   = http.MethodPut
	del   = http.MethodDelete
)

// fixture is what the areas share besides the contract: acme's issuer, and
// agent, the Personal Agent that sends feedback and starts Sessions.
type fixture struct {
	env    *testkit.Env
	issuer string
	agent  *peers.Agent
}

// signIn has an account of acme sign in through Direct Sign-In (spec 4.2)
// and returns agent's access token for it.
func (f *fixture) signIn(t *testing.T, username, password string) string {
	t.Helper()
	return f.env.SignIn(t, f.agent, f.issuer, username, password, []string{"orders:read"}, "").AccessToken
}

// TestContract drives every route against the document, one area after
// another, in this order: each area builds on the Companies, accounts,
// keys and settings the ones before it left, and what one hands on in a
// variable is passed explicitly. The coverage check runs once, after all
// of them.
func TestContract(t *testing.T) {
	env := testkit.Setup(t)
	c := newContract(t, env)
	f := &fixture{env: env, issuer: env.PublicURL("/t/acme"), agent: env.StartAgent(t, "")}

	contractOperations(t, c)
	acme := contractCompanies(t, c, f)
	contractIssuer(t, c, f)
	contractOperatorTokens(t, c)
	contractConsole(t, c)
	contractFeaturesOff(t, c)
	acmeKey := contractFeedback(t, c, f)
	contractBrowserJoin(t, c, f, acmeKey)
	contractConversations(t, c, f, acmeKey)
	contractGateway(t, c, f, acme, acmeKey)
	contractAudit(t, c, acmeKey)
	contractRateLimits(t, c, f)
	contractDeleteCompany(t, c)
	contractWebsiteOperations(t, c, f)
	contractUndocumented(t, c)
	contractDraining(t, c, f)

	c.checkCoverage(t)
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
	// ops sends the request to the operations listener instead of the
	// public one.
	ops   bool
	path  string // path and query
	body  any    // nil, string or []byte sent as is, or a value sent as JSON
	ctype string // Content-Type; application/json when there is a body
	token string // bearer token, if any
	want  int
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
func (c *contract) send(t testing.TB, k call) (*peers.Response, []byte) {
	t.Helper()
	raw := k.rawBody(t)
	req := k.newRequest(t, c.env.URL(k.hostOrDefault(), k.path), raw)
	client := c.env.Client
	if k.ops {
		req = k.newRequest(t, c.env.Ops+k.path, raw)
		client = http.DefaultClient
	}
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
	return &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, raw
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
func (c *contract) do(t testing.TB, k call) *peers.Response {
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
func (c *contract) undocumented(t testing.TB, k call, code string) *peers.Response {
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
				if unexercisedStatuses[code] || unexercisedStatuses[name+" "+code] || apiRateLimited(path, code) {
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

// padded is body followed by enough JSON whitespace to exceed limit: still
// a valid document, but too large.
func padded(t testing.TB, body any, limit int) string {
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	return string(raw) + strings.Repeat(" ", limit)
}

func decode[T any](t testing.TB, r *peers.Response) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(r.Body, &v), "%s", r.Body)
	return v
}
