package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The API gateway (spec 7; DESIGN.md, the origin contract) through the
// HTTPS test server: a test Personal Agent calls {issuer}/api/{name}/...,
// and a test origin verifies Poppy-Verified with the Company's key set and
// records what it received.

const (
	proxyAPI      = "orders-api"
	proxyPassword = "correct horse battery staple"
)

// proxyScopes are the Company's scopes: the description's, and returns:read
// for the operation with two alternatives.
var proxyScopes = map[string]any{
	"orders:read":  "See your orders",
	"orders:write": "Change your orders",
	"returns:read": "See your returns",
}

// ordersDoc is the OpenAPI 3.0 description the tests register, less the
// paths in drop. The servers, path-level and operation-level servers and
// the OAuth endpoints name the origin's side, which the published
// description must not.
func ordersDoc(t testing.TB, drop ...string) json.RawMessage {
	t.Helper()
	ok := map[string]any{"200": map[string]any{"description": "OK"}}
	op := func(id string, security []any) map[string]any {
		o := map[string]any{"operationId": id, "responses": ok}
		if security != nil {
			o["security"] = security
		}
		return o
	}
	oauth := func(scopes ...string) map[string]any {
		if scopes == nil {
			scopes = []string{}
		}
		return map[string]any{"oauth": scopes}
	}
	id := []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}}
	products := op("listProducts", nil)
	products["servers"] = []any{map[string]any{"url": "https://operation-level.internal.example/v1"}}
	exchange := op("createExchange", []any{oauth("orders:read", "orders:write")})
	exchange["requestBody"] = map[string]any{"content": map[string]any{"application/json": map[string]any{
		"schema": map[string]any{"type": "object"}}}}
	paths := map[string]any{
		"/orders": map[string]any{"get": op("listOrders", []any{oauth("orders:read")})},
		"/orders/{id}": map[string]any{"parameters": id, "get": op("getOrder", []any{oauth("orders:read")}),
			"servers": []any{map[string]any{"url": "https://path-level.internal.example/v1"}}},
		"/orders/{id}/exchanges": map[string]any{"parameters": id, "post": exchange},
		"/products":              map[string]any{"get": products},
		"/status":                map[string]any{"get": op("status", []any{map[string]any{}, oauth()})},
		"/returns":               map[string]any{"get": op("listReturns", []any{oauth("returns:read"), oauth("orders:write")})},
	}
	for _, p := range drop {
		delete(paths, p)
	}
	raw, err := json.Marshal(map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "Orders", "version": "1"},
		"servers": []any{map[string]any{"url": "https://api.internal.example/v1"}},
		"components": map[string]any{"securitySchemes": map[string]any{"oauth": map[string]any{
			"type": "oauth2",
			"flows": map[string]any{"authorizationCode": map[string]any{
				"authorizationUrl": "https://idp.internal.example/authorize",
				"tokenUrl":         "https://idp.internal.example/token",
				"scopes":           map[string]any{"orders:read": "See your orders", "orders:write": "Change your orders"},
			}},
		}}},
		"paths": paths,
	})
	require.NoError(t, err)
	return raw
}

// rig is a running platform with one Company (accounts ada and bob), a
// test Personal Agent, and the Company's origin serving API orders-api
// at the origin's base URL.
type rig struct {
	env       *testkit.Env
	agent     *peers.Agent
	slug      string
	issuer    string // also the Company's identifier
	domain    string
	companyID int64
	origin    *peers.Origin
	client    *http.Client
}

// newRig starts a platform for a test named name: its hosts are
// agent-{name}.test and origin-{name}.test.
func newRig(t *testing.T, name string) *rig {
	t.Helper()
	env := testkit.Setup(t)
	return addCompany(t, env, env.StartAgent(t, "agent-"+name+".test"), "shop", "origin-"+name+".test")
}

// addCompany creates Company slug on env, with its origin on originHost.
func addCompany(t *testing.T, env *testkit.Env, agent *peers.Agent, slug, originHost string) *rig {
	t.Helper()
	r := &rig{env: env, agent: agent, slug: slug, issuer: env.PublicURL("/t/" + slug), domain: slug + ".example",
		// No call may hang a test.
		client: &http.Client{Transport: env.Client.Transport, Timeout: 20 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	env.CreateCompany(t, map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Shop " + slug, "domain": r.domain},
		"auth":         map[string]any{"scopes": proxyScopes},
	})
	for _, user := range []string{"ada", "bob"} {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
			map[string]any{"username": user, "password": proxyPassword})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&r.companyID))
	r.origin = env.StartOrigin(t, originHost, r.issuer, r.issuer)
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL()})
	return r
}

// putAPI registers api (zero limits take the defaults) straight in the
// store.
func (r *rig) putAPI(t *testing.T, api registry.API) {
	t.Helper()
	if api.OpenAPI == nil {
		api.OpenAPI = ordersDoc(t)
	}
	if api.TimeoutSeconds == 0 {
		api.TimeoutSeconds = 10
	}
	if api.MaxRequestBytes == 0 {
		api.MaxRequestBytes = registry.DefaultMaxRequestBytes
	}
	if api.MaxResponseBytes == 0 {
		api.MaxResponseBytes = registry.DefaultMaxResponseBytes
	}
	_, err := registry.NewStore(r.env.Pool).PutAPI(context.Background(), r.companyID, &api, time.Now())
	require.NoError(t, err)
}

// signIn signs user in with scopes and returns the access token.
func (r *rig) signIn(t *testing.T, agent *peers.Agent, user string, scopes ...string) string {
	t.Helper()
	return r.env.SignIn(t, agent, r.issuer, user, proxyPassword, scopes, "").AccessToken
}

// opts shape a call. Zero values send a Session header of the rig's agent
// for User usr_test in a new Session, signed out.
type opts struct {
	token     string
	sid       string
	sub       string
	agentID   string
	agent     *peers.Agent
	aud       string // [the rig's identifier]
	noSession bool   // no Poppy-Session; the token, if any, still sent
	header    []string
	client    *http.Client
}

// request builds a call to {issuer}{path}. body is as for
// peers.NewRequest: nil, a string or []byte (sent with a
// Content-Length), or another io.Reader (sent without one).
func (r *rig) request(t *testing.T, method, path string, body any, o opts) *http.Request {
	t.Helper()
	req := peers.NewRequest(t, method, r.issuer+path, body)
	for i := 0; i+1 < len(o.header); i += 2 {
		req.Header.Add(o.header[i], o.header[i+1])
	}
	agent, aud := o.agent, o.aud
	if agent == nil {
		agent = r.agent
	}
	if aud == "" {
		aud = r.issuer
	}
	if o.noSession {
		if o.token != "" {
			req.Header.Set("Authorization", "Bearer "+o.token)
		}
		return req
	}
	agent.Sign(t, req, peers.SessionClaims{Aud: aud, SID: o.sid, Sub: o.sub, AgentID: o.agentID,
		AccessToken: o.token}, peers.SessionOptions{})
	return req
}

// call sends a request and reads the whole response.
func (r *rig) call(t *testing.T, method, path string, body any, o opts) *peers.Response {
	t.Helper()
	client := o.client
	if client == nil {
		client = r.client
	}
	return peers.Send(t, client, r.request(t, method, path, body, o))
}

// http1 returns a client that reaches the platform over HTTP/1.1, which
// alone can carry Connection headers.
// verify checks a Poppy-Verified JWT as a receiver with audience aud does,
// against the Company's published key set.
func (r *rig) verify(t *testing.T, token, aud string) *verified.Claims {
	t.Helper()
	resp := r.env.Do(t, http.MethodGet, r.issuer+"/oauth/jwks.json", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	set, err := jwk.Parse(resp.Body)
	require.NoError(t, err)
	c, err := verified.Verify(token, set, r.issuer, aud, time.Now())
	require.NoError(t, err)
	return c
}

// metadataURL is the resource_metadata of the Company's challenges.
func (r *rig) metadataURL() string {
	return "https://" + r.domain + "/.well-known/oauth-protected-resource"
}

// requireError checks a JSON error answer.
func requireError(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	require.NoError(t, err, "Content-Type %q", resp.Header.Get("Content-Type"))
	require.Equal(t, "application/json", mt)
	require.Equal(t, code, resp.JSON(t)["error"], "%s", resp.Body)
}

// requireChallenge checks a 401 or 403 with a Bearer challenge: its error
// code (none for a request without a token), the scopes it asks for (none
// left out), and resource_metadata.
func requireChallenge(t *testing.T, r *rig, resp *peers.Response, status int, code, scope string) {
	t.Helper()
	body := code
	if body == "" {
		body = "unauthorized"
	}
	requireError(t, resp, status, body)
	ch := resp.Header.Get("WWW-Authenticate")
	require.True(t, strings.HasPrefix(ch, "Bearer "), "WWW-Authenticate %q", ch)
	if code == "" {
		require.NotContains(t, ch, "error=", "RFC 6750 §3.1: no error code without a token")
	} else {
		require.Contains(t, ch, `error="`+code+`"`)
	}
	if scope == "" {
		require.NotContains(t, ch, "scope=")
	} else {
		require.Contains(t, ch, `scope="`+scope+`"`)
	}
	require.Contains(t, ch, `resource_metadata="`+r.metadataURL()+`"`)
}

// api is the gateway path of a path of API orders-api.
func api(path string) string { return "/api/" + proxyAPI + path }

// forgedVerified is a Poppy-Verified a caller made up.
const forgedVerified = "eyJhbGciOiJub25lIn0.eyJhY2NvdW50IjoiMSJ9."

// hostileHeaders are headers a Personal Agent (or anyone) might send that
// must not reach the origin, but for X-Client-Note. Idempotency-Key and
// Poppy-Approval are the platform's to set, for an approved revision only:
// an origin that trusts them must never get the Personal Agent's.
var hostileHeaders = []string{
	"Cookie", "poppyhost_web=secret; theme=dark",
	verified.Header, forgedVerified,
	"X-Forwarded-For", "203.0.113.7",
	"X-Forwarded-Host", "evil.example",
	"X-Forwarded-Proto", "http",
	"X-Forwarded-Port", "80",
	"X-Forwarded-Prefix", "/admin",
	"X-Real-Ip", "203.0.113.7",
	"Forwarded", "for=203.0.113.7;host=evil.example;proto=http",
	"Proxy-Authorization", "Basic c2VjcmV0OnNlY3JldA==",
	"Connection", "X-Custom",
	"X-Custom", "hop-by-hop",
	"Idempotency-Key", "4f1c2e8a-9b7d-4c3e-a5f6-0d8b1e2c3a4f",
	"Poppy-Approval", `operation_id="op_1", revision="r1", approver="user"`,
	"DPoP", "eyJ0eXAiOiJkcG9wK2p3dCJ9.e30.sig",
	"X-Client-Note", "end-to-end",
}

// requireOnlyVerified checks that a forwarded request carried none of the
// caller's credentials or hop-by-hop headers, and one Poppy-Verified.
func requireOnlyVerified(t *testing.T, got peers.Received) {
	t.Helper()
	for _, h := range []string{"Authorization", "Poppy-Session", "Cookie", "Proxy-Authorization", "X-Custom",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix",
		"X-Real-Ip", "Forwarded", "Dpop", "Idempotency-Key", "Poppy-Approval"} {
		require.Empty(t, got.Header.Values(h), "%s reached the origin", h)
	}
	require.Len(t, got.Header.Values(verified.Header), 1)
	require.NotEqual(t, forgedVerified, got.Header.Get(verified.Header))
	require.Equal(t, "end-to-end", got.Header.Get("X-Client-Note"))
}

// TestProxyForwardsVerifiedFacts: the origin gets the request with
// Poppy-Verified stating what was verified and nothing of the caller's
// credentials; its answer streams back without cookies.
func TestProxyForwardsVerifiedFacts(t *testing.T) {
	t.Parallel()
	r := newRig(t, "verified")
	token := r.signIn(t, r.agent, "ada", "orders:read")
	h1 := r.env.HTTP1Client(t)

	t.Run("at the origin's root", func(t *testing.T) {
		r.origin.Handle(http.MethodGet, "/orders/o1", func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Origin", "yes")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Add("Set-Cookie", "sid=evil; Path=/; Domain=poppyhost.test")
			w.Header().Add("Set-Cookie", "other=1")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"order":"o1","account":"`+peers.OriginClaims(req).Account+`"}`)
		})
		resp := r.call(t, http.MethodGet, api("/orders/o1?x=1&y=a%20b"), nil, opts{token: token, sid: "sidVerified1",
			sub: "usr_ada", agentID: "agt_7Hk2", header: hostileHeaders, client: h1})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		require.Equal(t, "yes", resp.Header.Get("X-Origin"))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Empty(t, resp.Header.Values("Set-Cookie"), "an origin may not set cookies on the platform's host")

		require.Len(t, r.origin.Received(), 1)
		got := r.origin.Last()
		require.NoError(t, got.VerifyErr)
		require.Equal(t, http.MethodGet, got.Method)
		require.Equal(t, "/orders/o1", got.Path)
		require.Equal(t, "x=1&y=a%20b", got.RawQuery)
		require.Equal(t, strings.TrimPrefix(r.origin.BaseURL(), "https://"), got.Host, "Host names the origin, not the platform")
		requireOnlyVerified(t, got)

		c := got.Claims
		account := c.Account
		_, err := strconv.ParseInt(account, 10, 64)
		require.NoError(t, err, "account %q", account)
		require.JSONEq(t, `{"order":"o1","account":"`+account+`"}`, string(resp.Body))
		require.Equal(t, r.issuer, c.Issuer)
		require.Equal(t, r.origin.BaseURL(), c.Audience, "aud is the API's origin exactly")
		require.Equal(t, verified.Facts{ClientID: r.agent.ClientID, SID: "sidVerified1", UserID: "usr_ada",
			AgentID: "agt_7Hk2", Account: account, Scopes: []string{"orders:read"}}, c.Facts)
		require.Equal(t, proxyAPI, c.API)
		require.Equal(t, http.MethodGet, c.Method)
		require.Equal(t, "/orders/o1", c.Path)
		require.Empty(t, c.Tool)
		require.Empty(t, c.ConversationID)
		require.NotEmpty(t, c.ID)
		require.Equal(t, int64(verified.Lifetime/time.Second), c.Expires-c.IssuedAt)
		require.InDelta(t, time.Now().Unix(), c.IssuedAt, 30)

		// A second call in the Session gets a JWT of its own.
		resp = r.call(t, http.MethodGet, api("/orders/o1"), nil, opts{token: token, sid: "sidVerified1", sub: "usr_ada",
			agentID: "agt_7Hk2"})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		require.NoError(t, r.origin.Last().VerifyErr)
		require.NotEqual(t, c.ID, r.origin.Last().Claims.ID)
	})

	t.Run("under the origin's base path", func(t *testing.T) {
		// aud is the registered Origin, base path included. The test origin
		// expects its bare BaseURL as aud, so it refuses this JWT (and
		// answers 401 itself); what the gateway sent is checked here as a
		// receiver at {BaseURL}/v1 checks it.
		base := r.origin.BaseURL() + "/v1"
		r.putAPI(t, registry.API{Name: "orders-v1", Origin: base})
		r.origin.Reset()
		resp := r.call(t, http.MethodGet, "/api/orders-v1/orders/o1?x=1", nil,
			opts{token: token, sid: "sidVerifiedV1", header: hostileHeaders, client: h1})
		require.Len(t, r.origin.Received(), 1, "%d %s", resp.Status, resp.Body)
		got := r.origin.Last()
		require.Equal(t, http.MethodGet, got.Method)
		require.Equal(t, "/v1/orders/o1", got.Path)
		require.Equal(t, "x=1", got.RawQuery)
		requireOnlyVerified(t, got)

		c := r.verify(t, got.Header.Get(verified.Header), base)
		require.Equal(t, r.issuer, c.Issuer)
		require.Equal(t, base, c.Audience)
		require.Equal(t, "orders-v1", c.API)
		require.Equal(t, http.MethodGet, c.Method)
		require.Equal(t, "/v1/orders/o1", c.Path)
		require.Equal(t, "sidVerifiedV1", c.SID)
		require.Equal(t, r.agent.ClientID, c.ClientID)
		require.Equal(t, []string{"orders:read"}, c.Scopes)
		require.NotEmpty(t, c.Account)
	})

	t.Run("escaped characters reach the origin as sent", func(t *testing.T) {
		r.origin.Reset()
		resp := r.call(t, http.MethodGet, api("/orders/a%20b%3Bc"), nil, opts{token: token})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		got := r.origin.Last()
		require.NoError(t, got.VerifyErr)
		require.Equal(t, "/orders/a%20b%3Bc", got.Path)
		require.Equal(t, "/orders/a%20b%3Bc", got.Claims.Path)
	})
}

// TestProxyInformationalResponsesSetNoCookies: an origin's Set-Cookie is
// removed from 1xx responses too, which httputil.ReverseProxy forwards
// before ModifyResponse sees the final one.
func TestProxyInformationalResponsesSetNoCookies(t *testing.T) {
	t.Parallel()
	r := newRig(t, "earlyhints")
	r.origin.Handle(http.MethodGet, "/products", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("Set-Cookie", "early=evil; Path=/")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Set-Cookie")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok")
	})
	var (
		codes []int
		early []textproto.MIMEHeader
	)
	req := r.request(t, http.MethodGet, api("/products"), nil, opts{})
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			codes, early = append(codes, code), append(early, h)
			return nil
		}}))
	resp, err := r.client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok", string(body))
	require.Equal(t, []int{http.StatusEarlyHints}, codes, "the Early Hints reach the Personal Agent")
	require.Equal(t, "</style.css>; rel=preload", early[0].Get("Link"))
	require.Empty(t, early[0].Values("Set-Cookie"), "an origin may not set cookies on the platform's host")
}

// TestProxySignedOut: operations without security need no token; the
// others answer 401 with a challenge and never reach the origin.
func TestProxySignedOut(t *testing.T) {
	t.Parallel()
	r := newRig(t, "signedout")

	resp := r.call(t, http.MethodGet, api("/products"), nil, opts{sid: "sidSignedOut1"})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	got := r.origin.Last()
	require.NoError(t, got.VerifyErr)
	require.Equal(t, "/products", got.Path)
	require.Equal(t, "", got.Claims.Account)
	require.Equal(t, []string{}, got.Claims.Scopes)
	require.Equal(t, "sidSignedOut1", got.Claims.SID)
	require.Equal(t, r.agent.ClientID, got.Claims.ClientID)
	require.Equal(t, "usr_test", got.Claims.UserID)
	require.Empty(t, got.Claims.AgentID)
	require.JSONEq(t, `{"method":"GET","path":"/products","query":"","body":"","account":"","scopes":[]}`, string(resp.Body))

	for _, path := range []string{"/orders", "/orders/o1"} {
		resp = r.call(t, http.MethodGet, api(path), nil, opts{})
		requireChallenge(t, r, resp, http.StatusUnauthorized, "", "orders:read")
		require.Zero(t, r.origin.Calls("", path))
	}
	resp = r.call(t, http.MethodPost, api("/orders/o1/exchanges"), `{}`, opts{})
	requireChallenge(t, r, resp, http.StatusUnauthorized, "", "orders:read orders:write")
	require.Len(t, r.origin.Received(), 1)
}

// TestProxyScopes: an operation needs every scope of one of its security
// requirements; an empty requirement lets signed-out calls through.
func TestProxyScopes(t *testing.T) {
	t.Parallel()
	r := newRig(t, "scopes")
	read := r.signIn(t, r.agent, "ada", "orders:read")
	both := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	write := r.signIn(t, r.agent, "ada", "orders:write")
	returns := r.signIn(t, r.agent, "ada", "returns:read")

	tests := []struct {
		name   string
		method string
		path   string
		token  string
		status int
		scope  string // asked for in a 403's challenge
	}{
		{"read lists orders", http.MethodGet, "/orders", read, http.StatusOK, ""},
		{"read gets an order", http.MethodGet, "/orders/o1", read, http.StatusOK, ""},
		{"write alone cannot list", http.MethodGet, "/orders", write, http.StatusForbidden, "orders:read"},
		{"another scope cannot list", http.MethodGet, "/orders", returns, http.StatusForbidden, "orders:read"},
		{"read alone cannot exchange", http.MethodPost, "/orders/o1/exchanges", read, http.StatusForbidden, "orders:read orders:write"},
		{"write alone cannot exchange", http.MethodPost, "/orders/o1/exchanges", write, http.StatusForbidden, "orders:read orders:write"},
		{"read and write exchange", http.MethodPost, "/orders/o1/exchanges", both, http.StatusOK, ""},
		{"first alternative", http.MethodGet, "/returns", returns, http.StatusOK, ""},
		{"second alternative", http.MethodGet, "/returns", write, http.StatusOK, ""},
		{"second alternative among more", http.MethodGet, "/returns", both, http.StatusOK, ""},
		{"neither alternative", http.MethodGet, "/returns", read, http.StatusForbidden, "returns:read"},
		{"optional security, signed out", http.MethodGet, "/status", "", http.StatusOK, ""},
		{"optional security, signed in", http.MethodGet, "/status", returns, http.StatusOK, ""},
		{"no security, signed in", http.MethodGet, "/products", read, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.origin.Reset()
			var body any
			if tt.method == http.MethodPost {
				body = `{"item_id":"itm_4Qa"}`
			}
			resp := r.call(t, tt.method, api(tt.path), body, opts{token: tt.token})
			if tt.status != http.StatusOK {
				requireChallenge(t, r, resp, tt.status, "insufficient_scope", tt.scope)
				require.Empty(t, r.origin.Received())
				return
			}
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			require.Len(t, r.origin.Received(), 1)
			got := r.origin.Last()
			require.NoError(t, got.VerifyErr)
			require.Equal(t, tt.method, got.Method)
			require.Equal(t, tt.path, got.Path)
			if tt.token == "" {
				require.Empty(t, got.Claims.Account)
				require.Empty(t, got.Claims.Scopes)
			} else {
				require.NotEmpty(t, got.Claims.Account)
				require.NotEmpty(t, got.Claims.Scopes)
			}
			if body != nil {
				require.Equal(t, body, string(got.Body))
			}
		})
	}

	// The signed-out call to /returns asks for the first alternative.
	resp := r.call(t, http.MethodGet, api("/returns"), nil, opts{})
	requireChallenge(t, r, resp, http.StatusUnauthorized, "", "returns:read")
}

// TestProxyRefusesTokens: a token that is not valid for the Company's
// default service, or not for the request's Session, never reaches the
// origin.
func TestProxyRefusesTokens(t *testing.T) {
	t.Parallel()
	r := newRig(t, "tokens")
	ada := r.signIn(t, r.agent, "ada", "orders:read")
	mcp := r.env.SignIn(t, r.agent, r.issuer, "ada", proxyPassword, []string{"orders:read"}, r.issuer+"/mcp").AccessToken
	revoked := r.signIn(t, r.agent, "ada", "orders:read")
	bob := r.signIn(t, r.agent, "bob", "orders:read")
	other := r.env.StartAgent(t, "agent-tokens-other.test")
	otherClient := r.signIn(t, other, "ada", "orders:read")

	// Revoked at the revocation endpoint with the agent's client assertion.
	revoke := &http.Client{Transport: r.agent.AssertionTransport(t, r.env.Client.Transport, r.issuer)}
	rv, err := revoke.PostForm(r.issuer+"/oauth/revoke", url.Values{"token": {revoked}, "token_type_hint": {"access_token"}})
	require.NoError(t, err)
	_ = rv.Body.Close()
	require.Equal(t, http.StatusOK, rv.StatusCode)

	parts := strings.Split(ada, ".")
	require.Len(t, parts, 3)
	sig := []byte(parts[2])
	sig[len(sig)/2] ^= 1
	tampered := parts[0] + "." + parts[1] + "." + string(sig)

	for _, tt := range []struct {
		name, token, path string
		desc              string // in error_description
	}{
		{"garbage", "not-a-token", "/orders", ""},
		{"garbage on a signed-out operation", "not-a-token", "/products", ""},
		{"a JWT with a tampered signature", tampered, "/orders", ""},
		{"a token for the MCP server", mcp, "/orders", "spec 4.5"},
		{"a token for the MCP server on a signed-out operation", mcp, "/products", "spec 4.5"},
		{"a revoked token", revoked, "/orders", "revoked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := r.call(t, http.MethodGet, api(tt.path), nil, opts{token: tt.token})
			requireChallenge(t, r, resp, http.StatusUnauthorized, "invalid_token", "")
			require.Contains(t, resp.JSON(t)["error_description"], tt.desc)
		})
	}

	t.Run("no Session header", func(t *testing.T) {
		resp := r.call(t, http.MethodGet, api("/orders"), nil, opts{token: ada, noSession: true})
		requireError(t, resp, http.StatusBadRequest, "invalid_session")
		resp = r.call(t, http.MethodGet, api("/products"), nil, opts{noSession: true})
		requireError(t, resp, http.StatusBadRequest, "invalid_session")
	})

	t.Run("query parameters named like tokens", func(t *testing.T) {
		// Spec 5.6: "Personal Agents MUST NOT send tokens or Session JWTs in
		// a URL, and Companies MUST NOT accept them from one." The names
		// stay the API's (spec 7): the query reaches the origin as sent,
		// and only the headers authenticate.
		query := "session=x&access_token=y&Poppy_Session=z"
		resp := r.call(t, http.MethodGet, api("/orders?"+query), nil, opts{token: ada})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		got := r.origin.Last()
		require.Equal(t, query, got.RawQuery)
		require.NotEmpty(t, got.Claims.Account)
		require.Empty(t, got.Header.Values("Authorization"))
		require.Empty(t, got.Header.Values("Poppy-Session"))

		// A token in the query alone is not read: the call is signed out.
		calls := len(r.origin.Received())
		resp = r.call(t, http.MethodGet, api("/orders?access_token="+url.QueryEscape(ada)), nil, opts{})
		requireChallenge(t, r, resp, http.StatusUnauthorized, "", "orders:read")
		// Nor is a Session JWT.
		signed := r.request(t, http.MethodGet, api("/products"), nil, opts{})
		resp = r.call(t, http.MethodGet, api("/products?session="+url.QueryEscape(signed.Header.Get("Poppy-Session"))),
			nil, opts{noSession: true})
		requireError(t, resp, http.StatusBadRequest, "invalid_session")
		require.Len(t, r.origin.Received(), calls)
	})

	t.Run("a Session header for another URL", func(t *testing.T) {
		req := r.request(t, http.MethodGet, api("/orders/o1"), nil, opts{token: ada})
		req.URL.Path = "/t/" + r.slug + api("/orders/o2")
		resp, err := r.client.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		requireError(t, &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw},
			http.StatusBadRequest, "invalid_session")
	})

	t.Run("a token of another client", func(t *testing.T) {
		resp := r.call(t, http.MethodGet, api("/orders"), nil, opts{token: otherClient})
		requireError(t, resp, http.StatusBadRequest, "invalid_session")
	})

	t.Run("another account in the Session", func(t *testing.T) {
		resp := r.call(t, http.MethodGet, api("/orders"), nil, opts{token: ada, sid: "sidTwoAccounts"})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		resp = r.call(t, http.MethodGet, api("/orders"), nil, opts{token: bob, sid: "sidTwoAccounts"})
		requireError(t, resp, http.StatusBadRequest, "session_ended")
		// Bob's token is good in a Session of his own.
		resp = r.call(t, http.MethodGet, api("/orders"), nil, opts{token: bob})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	})

	require.Equal(t, 3, r.origin.Calls(http.MethodGet, "/orders"), "only the three good calls reached the origin")
	require.Len(t, r.origin.Received(), 3)
}

// TestProxyPaths: the gateway forwards only the operations the description
// TestProxySessionStartsAfterTokenChecks: spec 5.3, "The Company MUST
// complete the following checks before relying on Session claims ...,
// including creating or continuing a Session", step 3 among them (the
// access token "was issued to the same client_id as iss"): a request whose
// access token is refused creates no Session and fixes no User to its sid.
func TestProxySessionStartsAfterTokenChecks(t *testing.T) {
	t.Parallel()
	r := newRig(t, "sessionorder")
	ada := r.signIn(t, r.agent, "ada", "orders:read")
	other := r.env.StartAgent(t, "agent-sessionorder-other.test")
	otherClient := r.signIn(t, other, "ada", "orders:read")
	sessionRows := func(sid string) int {
		var n int
		require.NoError(t, r.env.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM sessions WHERE company_id = $1 AND sid = $2`, r.companyID, sid).Scan(&n))
		return n
	}

	for _, tt := range []struct{ name, sid, token string }{
		{"an invalid access token", "sidOrderInvalid", "not-a-token"},
		{"another client's access token", "sidOrderOther", otherClient},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := r.call(t, http.MethodGet, api("/orders"), nil, opts{token: tt.token, sid: tt.sid, sub: "usr_one"})
			require.Contains(t, []int{http.StatusBadRequest, http.StatusUnauthorized}, resp.Status, "%s", resp.Body)
			require.Zero(t, sessionRows(tt.sid), "a refused request created the Session")
			// The sid was never taken by usr_one: another User starts it.
			resp = r.call(t, http.MethodGet, api("/orders"), nil, opts{token: ada, sid: tt.sid, sub: "usr_two"})
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			require.Equal(t, "usr_two", r.origin.Last().Claims.UserID)
			require.Equal(t, 1, sessionRows(tt.sid))
		})
	}
}

// declares, on paths that cannot escape the API at the origin.
func TestProxyPaths(t *testing.T) {
	t.Parallel()
	r := newRig(t, "paths")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")

	for _, tt := range []struct {
		name, method, path string
		status             int
		code, allow        string
	}{
		{"undeclared path", http.MethodGet, api("/admin"), http.StatusNotFound, "not_found", ""},
		{"undeclared deeper path", http.MethodGet, api("/orders/o1/items"), http.StatusNotFound, "not_found", ""},
		{"trailing slash", http.MethodGet, api("/orders/"), http.StatusNotFound, "not_found", ""},
		{"empty parameter", http.MethodGet, api("/orders//exchanges"), http.StatusNotFound, "not_found", ""},
		{"API root", http.MethodGet, api("/"), http.StatusNotFound, "not_found", ""},
		{"undeclared method", http.MethodDelete, api("/orders/o1"), http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{"undeclared method on a concrete path", http.MethodPost, api("/orders"), http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{"GET of a POST operation", http.MethodGet, api("/orders/o1/exchanges"), http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{"encoded dot segments", http.MethodGet, api("/orders/%2e%2e/admin"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded dot segments in capitals", http.MethodGet, api("/orders/%2E%2E/exchanges"), http.StatusBadRequest, "invalid_request", ""},
		{"half-encoded dot segment", http.MethodGet, api("/orders/.%2e"), http.StatusBadRequest, "invalid_request", ""},
		{"dot segments", http.MethodGet, api("/orders/../admin"), http.StatusBadRequest, "invalid_request", ""},
		{"dot segment", http.MethodGet, api("/orders/./o1"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded dot segment as the parameter", http.MethodGet, api("/orders/%2e"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded slash", http.MethodGet, api("/orders/a%2Fb"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded slash in lower case", http.MethodGet, api("/orders/..%2fadmin"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded backslash", http.MethodGet, api("/orders/..%5Cadmin"), http.StatusBadRequest, "invalid_request", ""},
		// One path rule (safehttp.ValidPath) with proposals: no control
		// characters, encoded ? or #, or leading //.
		{"encoded NUL", http.MethodGet, api("/orders/o1%00"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded CR LF", http.MethodGet, api("/orders/o1%0D%0AX-Injected:%201"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded question mark", http.MethodGet, api("/orders/o1%3Fadmin=1"), http.StatusBadRequest, "invalid_request", ""},
		{"encoded hash", http.MethodGet, api("/orders/o1%23x"), http.StatusBadRequest, "invalid_request", ""},
		{"leading double slash", http.MethodGet, api("//orders"), http.StatusBadRequest, "invalid_request", ""},
		{"unknown API", http.MethodGet, "/api/nope/orders", http.StatusNotFound, "not_found", ""},
		{"API name in another case", http.MethodGet, "/api/Orders-API/orders", http.StatusNotFound, "not_found", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body any
			if tt.method == http.MethodPost {
				body = `{}`
			}
			resp := r.call(t, tt.method, tt.path, body, opts{token: token})
			requireError(t, resp, tt.status, tt.code)
			require.Equal(t, tt.allow, resp.Header.Get("Allow"))
		})
	}
	require.Empty(t, r.origin.Received(), "the origin was never called")

	// The same paths, declared, are forwarded.
	resp := r.call(t, http.MethodGet, api("/orders/o1"), nil, opts{token: token})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, 1, r.origin.Calls(http.MethodGet, "/orders/o1"))
}

// TestProxyPathParameterDotSegments: "..;" is a dot segment to origins
// that strip path parameters before resolving dot segments (Tomcat,
// Jetty, Spring), so /orders/..;/exchanges reaches their /exchanges, a
// path the description does not declare.
func TestProxyPathParameterDotSegments(t *testing.T) {
	t.Parallel()
	r := newRig(t, "pathparams")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	for _, path := range []string{"/orders/..;/exchanges", "/orders/..;x=1/exchanges", "/orders/%2e%2e;/exchanges",
		"/orders/..%3B/exchanges", "/orders/.;"} {
		t.Run(path, func(t *testing.T) {
			method, body := http.MethodPost, any(`{}`)
			if !strings.HasSuffix(path, "/exchanges") {
				method, body = http.MethodGet, nil
			}
			resp := r.call(t, method, api(path), body, opts{token: token})
			requireError(t, resp, http.StatusBadRequest, "invalid_request")
			require.Zero(t, r.origin.Calls("", path), "the origin was called")
		})
	}
}

// TestProxyLimits: the API's request, response and time limits hold, and a
// failing origin gets a JSON error rather than a hung call.
func TestProxyLimits(t *testing.T) {
	t.Parallel()
	r := newRig(t, "limits")
	const reqMax, respMax = 1024, 4096
	r.putAPI(t, registry.API{Name: "limited", Origin: r.origin.BaseURL(), TimeoutSeconds: 1,
		MaxRequestBytes: reqMax, MaxResponseBytes: respMax})
	limited := func(path string) string { return "/api/limited" + path }
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	exchange := limited("/orders/o1/exchanges")
	jsonOf := func(n int) string { return `{"x":"` + strings.Repeat("x", n-8) + `"}` }

	t.Run("request bodies", func(t *testing.T) {
		require.Len(t, jsonOf(reqMax), reqMax)
		resp := r.call(t, http.MethodPost, exchange, jsonOf(reqMax), opts{token: token})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Len(t, r.origin.Last().Body, reqMax)

		resp = r.call(t, http.MethodPost, exchange, io.MultiReader(strings.NewReader(jsonOf(reqMax))), opts{token: token})
		require.Equal(t, http.StatusOK, resp.Status, "without a Content-Length: %s", resp.Body)
		require.Len(t, r.origin.Last().Body, reqMax)
		require.Equal(t, 2, r.origin.Calls(http.MethodPost, "/orders/o1/exchanges"))

		resp = r.call(t, http.MethodPost, exchange, jsonOf(reqMax+1), opts{token: token})
		requireError(t, resp, http.StatusRequestEntityTooLarge, "request_too_large")

		// Without a Content-Length the body is cut off at the limit: the
		// origin never gets a whole request.
		resp = r.call(t, http.MethodPost, exchange, io.MultiReader(strings.NewReader(jsonOf(4*reqMax))), opts{token: token})
		requireError(t, resp, http.StatusRequestEntityTooLarge, "request_too_large")
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, jsonOf(reqMax/2))
			time.Sleep(50 * time.Millisecond)
			_, _ = io.WriteString(pw, jsonOf(reqMax))
			_ = pw.Close()
		}()
		resp = r.call(t, http.MethodPost, exchange, pr, opts{token: token})
		requireError(t, resp, http.StatusRequestEntityTooLarge, "request_too_large")
		require.Equal(t, 2, r.origin.Calls(http.MethodPost, "/orders/o1/exchanges"), "the origin received no request over the limit")
	})

	t.Run("response bodies", func(t *testing.T) {
		r.origin.Handle(http.MethodGet, "/orders/fits", r.origin.Big(respMax))
		r.origin.Handle(http.MethodGet, "/orders/fits-chunked", r.origin.BigChunked(respMax))
		r.origin.Handle(http.MethodGet, "/orders/big", r.origin.Big(respMax+1))
		r.origin.Handle(http.MethodGet, "/orders/huge", r.origin.Big(64<<20))
		r.origin.Handle(http.MethodGet, "/orders/big-chunked", r.origin.BigChunked(4*respMax))

		for _, path := range []string{"/orders/fits", "/orders/fits-chunked"} {
			resp := r.call(t, http.MethodGet, limited(path), nil, opts{token: token})
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			require.Equal(t, strings.Repeat("x", respMax), string(resp.Body))
		}
		for _, path := range []string{"/orders/big", "/orders/huge"} {
			resp := r.call(t, http.MethodGet, limited(path), nil, opts{token: token})
			requireError(t, resp, http.StatusBadGateway, "origin_response_too_large")
		}

		// Past the headers, the only way to say the body is cut is to
		// abort the response, at once.
		start := time.Now()
		resp, err := r.client.Do(r.request(t, http.MethodGet, limited("/orders/big-chunked"), nil, opts{token: token}))
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Less(t, len(body), 4*respMax)
			require.LessOrEqual(t, len(body), respMax+1)
		}
		require.Error(t, err, "a body over the limit must not end like a whole one")
		require.Less(t, time.Since(start), 4*time.Second)
	})

	t.Run("slow origin", func(t *testing.T) {
		r.origin.Handle(http.MethodGet, "/orders/slow", r.origin.Slow(15*time.Second))
		start := time.Now()
		resp := r.call(t, http.MethodGet, limited("/orders/slow"), nil, opts{token: token})
		requireError(t, resp, http.StatusGatewayTimeout, "origin_timeout")
		require.Less(t, time.Since(start), 4*time.Second)

		// An origin that stops in the middle of its body.
		r.origin.Handle(http.MethodGet, "/orders/stalls", func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "partial")
			_ = http.NewResponseController(w).Flush()
			select {
			case <-req.Context().Done():
			case <-time.After(15 * time.Second):
			}
		})
		start = time.Now()
		stalled, err := r.client.Do(r.request(t, http.MethodGet, limited("/orders/stalls"), nil, opts{token: token}))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, stalled.StatusCode)
		body, err := io.ReadAll(stalled.Body)
		_ = stalled.Body.Close()
		require.Error(t, err, "got %q", body)
		require.Less(t, time.Since(start), 4*time.Second)

		// Time spent waiting is per wait, not for the whole call: a body
		// that keeps coming takes longer than the timeout.
		r.origin.Handle(http.MethodGet, "/orders/trickle", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
			for range 4 {
				_, _ = io.WriteString(w, "tick\n")
				_ = http.NewResponseController(w).Flush()
				time.Sleep(400 * time.Millisecond)
			}
		})
		resp = r.call(t, http.MethodGet, limited("/orders/trickle"), nil, opts{token: token})
		require.Equal(t, http.StatusOK, resp.Status)
		require.Equal(t, strings.Repeat("tick\n", 4), string(resp.Body))
	})

	t.Run("origin down", func(t *testing.T) {
		down := r.env.StartOrigin(t, "origin-limits-down.test", r.issuer, r.issuer)
		r.putAPI(t, registry.API{Name: "down", Origin: down.BaseURL(), TimeoutSeconds: 2})
		resp := r.call(t, http.MethodGet, "/api/down/products", nil, opts{})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		down.Close()
		start := time.Now()
		resp = r.call(t, http.MethodGet, "/api/down/products", nil, opts{})
		requireError(t, resp, http.StatusBadGateway, "origin_unreachable")
		require.Less(t, time.Since(start), 4*time.Second)
		require.NotContains(t, string(resp.Body), "origin-limits-down", "the error does not name the origin")
	})
}

// TestProxyRateLimit: a Session over the Company's per-Session budget gets
// 429 with Retry-After (spec 5.6), before the origin is called.
func TestProxyRateLimit(t *testing.T) {
	t.Parallel()
	r := newRig(t, "ratelimit")
	resp := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.slug,
		map[string]any{"rate_limits": map[string]any{"per_session": 3, "per_agent": 1000, "per_address": 1000}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	for i := range 3 {
		resp = r.call(t, http.MethodGet, api("/products"), nil, opts{sid: "sidRateLimited"})
		require.Equal(t, http.StatusOK, resp.Status, "call %d: %s", i+1, resp.Body)
	}
	resp = r.call(t, http.MethodGet, api("/products"), nil, opts{sid: "sidRateLimited"})
	requireError(t, resp, http.StatusTooManyRequests, "rate_limited")
	after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	require.Positive(t, after)
	require.Equal(t, 3, r.origin.Calls(http.MethodGet, "/products"))

	// Another Session has its own budget.
	resp = r.call(t, http.MethodGet, api("/products"), nil, opts{sid: "sidRateLimitedToo"})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// TestProxyTenancy: a Company's gateway serves only its own APIs and
// accepts only its own tokens and Sessions.
func TestProxyTenancy(t *testing.T) {
	t.Parallel()
	a := newRig(t, "tenancy")
	a.putAPI(t, registry.API{Name: "a-only", Origin: a.origin.BaseURL()})
	b := addCompany(t, a.env, a.agent, "other", "origin-tenancy-b.test")
	tokenA := a.signIn(t, a.agent, "ada", "orders:read")

	// orders-api is registered at both: at B it goes to B's origin,
	// vouched for by B.
	resp := b.call(t, http.MethodGet, api("/products"), nil, opts{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.NoError(t, b.origin.Last().VerifyErr)
	require.Equal(t, b.issuer, b.origin.Last().Claims.Issuer)
	require.Empty(t, a.origin.Received())

	// A's API name at B.
	for _, path := range []string{"/products", "/orders"} {
		resp = b.call(t, http.MethodGet, "/api/a-only"+path, nil, opts{token: tokenA})
		requireError(t, resp, http.StatusNotFound, "not_found")
	}
	resp = b.env.Do(t, http.MethodGet, b.issuer+"/openapi/a-only.json", nil)
	requireError(t, resp, http.StatusNotFound, "not_found")
	resp = a.env.Do(t, http.MethodGet, a.issuer+"/openapi/a-only.json", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	// A's token at B's gateway, with a Session at B.
	resp = b.call(t, http.MethodGet, api("/orders"), nil, opts{token: tokenA})
	requireChallenge(t, b, resp, http.StatusUnauthorized, "invalid_token", "")
	resp = b.call(t, http.MethodGet, api("/products"), nil, opts{token: tokenA})
	requireChallenge(t, b, resp, http.StatusUnauthorized, "invalid_token", "")

	// A Session header for A sent to B.
	resp = b.call(t, http.MethodGet, api("/products"), nil, opts{aud: a.issuer})
	requireError(t, resp, http.StatusBadRequest, "invalid_session")

	require.Empty(t, a.origin.Received())
	require.Len(t, b.origin.Received(), 1)

	// At A, the same token and name work.
	resp = a.call(t, http.MethodGet, "/api/a-only/orders", nil, opts{token: tokenA})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, a.issuer, a.origin.Last().Claims.Issuer)
	require.Equal(t, "a-only", a.origin.Last().Claims.API)
}

// TestProxyDescription: the published description names the gateway and
// the Company's issuer, never the origin or its own OAuth server.
func TestProxyDescription(t *testing.T) {
	t.Parallel()
	r := newRig(t, "description")
	resp := r.env.Do(t, http.MethodGet, r.issuer+"/openapi/"+proxyAPI+".json", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "public, max-age=300", resp.Header.Get("Cache-Control"))
	for _, s := range []string{"internal.example", r.origin.Host} {
		require.NotContains(t, string(resp.Body), s)
	}

	var doc struct {
		OpenAPI string `json:"openapi"`
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type  string                                `json:"type"`
				Flows map[string]map[string]json.RawMessage `json:"flows"`
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &doc))
	require.Equal(t, "3.0.3", doc.OpenAPI)
	require.Len(t, doc.Servers, 1)
	require.Equal(t, r.issuer+"/api/"+proxyAPI, doc.Servers[0].URL)
	require.Len(t, doc.Paths, 6)
	for path, item := range doc.Paths {
		require.NotContains(t, item, "servers", "path %s", path)
		for method, op := range item {
			var o map[string]json.RawMessage
			if json.Unmarshal(op, &o) == nil {
				require.NotContains(t, o, "servers", "%s %s", method, path)
			}
		}
	}
	require.JSONEq(t, `[{"oauth":["orders:read"]}]`, string(opOf(t, doc.Paths["/orders"]["get"])["security"]))
	require.JSONEq(t, `[{},{"oauth":[]}]`, string(opOf(t, doc.Paths["/status"]["get"])["security"]))
	require.NotContains(t, opOf(t, doc.Paths["/products"]["get"]), "security")
	oauth := doc.Components.SecuritySchemes["oauth"]
	require.Equal(t, "oauth2", oauth.Type)
	require.Len(t, oauth.Flows, 2, "both sign-in types are offered")
	flow := oauth.Flows["authorizationCode"]
	require.JSONEq(t, strconv.Quote(r.issuer+"/oauth/authorize"), string(flow["authorizationUrl"]))
	require.JSONEq(t, strconv.Quote(r.issuer+"/oauth/token"), string(flow["tokenUrl"]))
	require.JSONEq(t, `{"orders:read":"See your orders","orders:write":"Change your orders"}`, string(flow["scopes"]))
	device := oauth.Flows["x-deviceAuthorization"]
	require.JSONEq(t, strconv.Quote(r.issuer+"/oauth/device_authorization"), string(device["deviceAuthorizationUrl"]))
	require.JSONEq(t, string(flow["scopes"]), string(device["scopes"]))

	// The published servers URL is the gateway: a call there reaches the
	// origin.
	call := r.call(t, http.MethodGet, strings.TrimPrefix(doc.Servers[0].URL, r.issuer)+"/products", nil, opts{})
	require.Equal(t, http.StatusOK, call.Status, "%s", call.Body)

	resp = r.env.Do(t, http.MethodGet, r.issuer+"/openapi/nope.json", nil)
	requireError(t, resp, http.StatusNotFound, "not_found")
	require.Len(t, r.origin.Received(), 1, "only the call reached the origin")

	// Direct Sign-In off: the description no longer names the
	// authorization endpoint, which is off too (RFC 8414 §2 leaves it out
	// of the metadata when no grant uses it).
	patched := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.slug,
		map[string]any{"auth": map[string]any{"grant_types": []string{"urn:ietf:params:oauth:grant-type:device_code"}}})
	require.Equal(t, http.StatusOK, patched.Status, "%s", patched.Body)
	resp = r.env.Do(t, http.MethodGet, r.issuer+"/openapi/"+proxyAPI+".json", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.NotContains(t, string(resp.Body), "/oauth/authorize")
	require.NoError(t, json.Unmarshal(resp.Body, &doc))
	require.Len(t, doc.Components.SecuritySchemes["oauth"].Flows, 1)
	require.Contains(t, doc.Components.SecuritySchemes["oauth"].Flows, "x-deviceAuthorization")
}

func opOf(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var o map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &o), "%s", raw)
	return o
}

// TestProxyCache: a changed or removed registration takes effect within
// the cache's few seconds.
func TestProxyCache(t *testing.T) {
	t.Parallel()
	r := newRig(t, "cache")
	products := func() int { return r.call(t, http.MethodGet, api("/products"), nil, opts{}).Status }
	require.Equal(t, http.StatusOK, products())
	require.Equal(t, http.StatusOK, products(), "served from the cache")

	// eventually polls check until it holds, and returns how long it took.
	eventually := func(check func() bool, what string) time.Duration {
		t.Helper()
		start := time.Now()
		for !check() {
			require.Less(t, time.Since(start), 6*time.Second, "%s never happened", what)
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}

	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), OpenAPI: ordersDoc(t, "/products")})
	took := eventually(func() bool { return products() == http.StatusNotFound }, "removing /products")
	require.Less(t, took, 3500*time.Millisecond)
	resp := r.call(t, http.MethodGet, api("/products"), nil, opts{})
	requireError(t, resp, http.StatusNotFound, "not_found")

	// The description served follows too.
	desc := r.env.Do(t, http.MethodGet, r.issuer+"/openapi/"+proxyAPI+".json", nil)
	require.Equal(t, http.StatusOK, desc.Status)
	require.NotContains(t, string(desc.Body), `"/products"`)

	// A new origin takes effect the same way.
	moved := r.env.StartOrigin(t, "origin-cache-moved.test", r.issuer, r.issuer)
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: moved.BaseURL()})
	eventually(func() bool { return products() == http.StatusOK && moved.Calls(http.MethodGet, "/products") > 0 }, "moving the origin")
	require.NoError(t, moved.Last().VerifyErr)
	require.Equal(t, moved.BaseURL(), moved.Last().Claims.Audience)

	require.NoError(t, registry.NewStore(r.env.Pool).DeleteAPI(context.Background(), r.companyID, proxyAPI))
	eventually(func() bool { return products() == http.StatusNotFound }, "deleting the API")
	resp = r.call(t, http.MethodGet, api("/products"), nil, opts{})
	requireError(t, resp, http.StatusNotFound, "not_found")
	require.Contains(t, resp.JSON(t)["error_description"], "no API")
}
