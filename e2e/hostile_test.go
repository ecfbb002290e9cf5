package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// Bounds of the hostile sweep (docs/operations.md, "Hostile input"): every
// answer within hostileBound, the whole sweep within hostileBudget.
const (
	hostileBound  = 2 * time.Second
	hostileBudget = 60 * time.Second
)

// probe is one hostile request.
type probe struct {
	name   string
	method string
	url    string
	body   []byte
	// bodyLen, when not 0, overrides the declared length (-1: unknown).
	bodyLen int64
	header  []string // name, value pairs
	// sign adds a valid Session header of the sweep's Personal Agent,
	// with claims changed by claims when set.
	sign   bool
	claims func(*peers.SessionClaims)
	// raw, when set, is sent as is over a new HTTP/1.1 connection.
	raw []byte
	// protocolStatus, when set, is the one answer allowed: net/http's own
	// to a request HTTP/1.1 says to refuse with that status, 5xx included,
	// before any handler runs.
	protocolStatus int
	// cancelAfter, when set, cancels the request (an HTTP/2 stream
	// reset) after that long; its answer is not checked, the server's
	// log and metrics are.
	cancelAfter time.Duration
}

// probeResult is what a probe got.
type probeResult struct {
	p       probe
	id      string // its X-Request-ID
	status  int    // 0: no answer (refused by the client library, or the connection closed)
	err     error
	elapsed time.Duration
}

// TestHostileSweep sends a few hundred hostile requests to the built
// server, at discovery, the issuer, feedback, conversations, the gateway,
// and the admin and Company APIs: malformed and oversized headers, JWT
// tricks, bad bodies, odd paths, structured-header garbage and cancelled
// HTTP/2 streams. It fails on any 5xx, any answer slower than
// hostileBound, any panic in the server's log, and any ERROR log line.
// All traffic goes to 127.0.0.1.
func TestHostileSweep(t *testing.T) {
	t.Parallel()
	requireBuilt(t)
	dbURL := testdb.NewEmptyDatabase(t)
	migrateUp(t, dbURL)
	caDir := t.TempDir()
	ca, err := devca.Load(caDir)
	require.NoError(t, err)
	s := startServer(t, "sweep", dbURL, caDir, ca)
	s.waitReady(t, 30*time.Second)
	sw := setupSweep(t, s, ca)

	probes := sw.probes()
	require.GreaterOrEqual(t, len(probes), 250, "a few hundred probes")
	start := time.Now()
	results := sw.run(t, probes)
	took := time.Since(start)
	t.Logf("%d probes in %s", len(probes), took.Round(time.Millisecond))
	require.Less(t, took, hostileBudget, "the sweep's time budget")

	statuses := map[int]int{}
	for _, r := range results {
		statuses[r.status]++
		if r.p.cancelAfter > 0 {
			continue
		}
		switch {
		case r.p.protocolStatus != 0:
			if r.status != r.p.protocolStatus {
				t.Errorf("%s: answered %d, not %d", r.p.name, r.status, r.p.protocolStatus)
			}
		case r.status >= 500:
			t.Errorf("%s: %s %s answered %d", r.p.name, r.p.method, clip(r.p.url), r.status)
		}
		if r.elapsed > hostileBound {
			t.Errorf("%s: answered after %s, over the %s bound", r.p.name, r.elapsed.Round(time.Millisecond), hostileBound)
		}
	}
	t.Logf("statuses (0: refused by the client or connection closed): %v", statuses)

	// Let cancelled requests finish on the server before reading its log.
	time.Sleep(500 * time.Millisecond)
	log := s.stderr.String()
	for line := range strings.Lines(log) {
		if strings.Contains(line, "panic") || strings.HasPrefix(line, "goroutine ") {
			t.Errorf("panic in the server's log: %s", clip(line))
		}
		if !strings.Contains(line, `"level":"ERROR"`) {
			continue
		}
		t.Errorf("ERROR in the server's log: %s", clip(line))
	}
	metricsResp, err := s.probeGet("/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(metricsResp.Body)
	metricsResp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, metricsResp.StatusCode)
	metrics := string(body)
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "poppyhost_http_requests_total") && strings.Contains(line, `status="499"`) {
			t.Logf("metrics: %s", strings.TrimSpace(line))
		}
	}
	require.Contains(t, metrics, `status="499"`, "cancelled requests are counted as 499")
}

// sweep is the server under attack and what the probes need.
type sweep struct {
	s      *server
	agent  *peers.Agent
	apiKey string
	convID string
	origin *peers.Origin
}

const sweepCompany = publicURL + "/t/shop"

func setupSweep(t *testing.T, s *server, ca *devca.CA) *sweep {
	t.Helper()
	sw := &sweep{s: s, agent: peers.StartAgent(t, ca, peers.AgentOptions{Host: "localhost"})}
	body := companyBody("shop")
	body["auth"] = map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}}
	resp := s.admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	resp = s.admin(t, http.MethodPost, "/admin/v1/companies/shop/api-keys", map[string]any{"name": "sweep"})
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	var key struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &key))
	sw.apiKey = key.Key

	// The Company's origin, which holds /slow for a while so that a
	// cancelled call is cut mid-way.
	sw.origin = peers.StartOrigin(t, ca, peers.OriginOptions{Host: "localhost", Issuer: sweepCompany,
		JWKSURL: sweepCompany + "/oauth/jwks.json", Client: s.client})
	sw.origin.Handle(http.MethodGet, "/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	})
	doc := map[string]any{
		"openapi": "3.0.3", "info": map[string]any{"title": "Orders", "version": "1"},
		"paths": map[string]any{
			"/items/{id}": map[string]any{"parameters": []any{map[string]any{"name": "id", "in": "path", "required": true,
				"schema": map[string]any{"type": "string"}}},
				"get": map[string]any{"responses": map[string]any{"200": map[string]any{"description": "OK"}}}},
			"/items": map[string]any{"post": map[string]any{"responses": map[string]any{"200": map[string]any{"description": "OK"}}}},
			"/slow":  map[string]any{"get": map[string]any{"responses": map[string]any{"204": map[string]any{"description": "OK"}}}},
		},
	}
	req := mustRequest(t, http.MethodPut, publicURL+"/company/v1/apis/orders", map[string]any{"origin": sw.origin.BaseURL(), "openapi": doc})
	req.Header.Set("Authorization", "Bearer "+sw.apiKey)
	resp = s.do(t, req)
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)

	// A conversation, for long-polls to cancel.
	req = mustRequest(t, http.MethodPost, sweepCompany+"/poppy/conversations", message("m1"))
	sw.agent.Sign(t, req, peers.SessionClaims{Aud: sweepCompany, SID: "sweep-session-000000"}, peers.SessionOptions{})
	resp = s.do(t, req)
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	var conv struct {
		ID string `json:"conversation_id"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &conv))
	sw.convID = conv.ID
	return sw
}

func mustRequest(t *testing.T, method, url string, body any) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// jwt builds a compact JWS from a header and claims as given, with sig as
// its signature segment.
func jwt(header, claims, sig string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(claims)) + "." + sig
}

// probes lists the sweep.
func (sw *sweep) probes() []probe {
	now := time.Now().Unix()
	claims := func(extra string) string {
		return fmt.Sprintf(`{"iss":"https://localhost","aud":%q,"iat":%d,"jti":"j%d","sid":"s1","sub":"usr_1","htm":"POST","htu":"x"%s}`,
			sweepCompany, now, now, extra)
	}
	deepJSON := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	jwts := map[string]string{
		"alg none":          jwt(`{"alg":"none","typ":"poppy-session+jwt"}`, claims(""), ""),
		"alg none signed":   jwt(`{"alg":"none"}`, claims(""), "c2ln"),
		"alg HS256":         jwt(`{"alg":"HS256","typ":"poppy-session+jwt"}`, claims(""), "c2lnbmF0dXJl"),
		"huge":              jwt(`{"alg":"EdDSA"}`, claims(`,"pad":"`+strings.Repeat("A", 40_000)+`"`), "c2ln"),
		"NUL in sub":        jwt(`{"alg":"EdDSA","typ":"poppy-session+jwt"}`, strings.Replace(claims(""), `"usr_1"`, `"usr\u0000"`, 1), "c2ln"),
		"NUL in sid":        jwt(`{"alg":"EdDSA","typ":"poppy-session+jwt"}`, strings.Replace(claims(""), `"s1"`, `"s\u0000"`, 1), "c2ln"),
		"bad base64":        "!!!.@@@.###",
		"two segments":      "eyJhbGciOiJub25lIn0.e30",
		"many dots":         strings.Repeat(".", 5000),
		"header not JSON":   base64.RawURLEncoding.EncodeToString([]byte("{{{")) + ".e30.c2ln",
		"kid path":          jwt(`{"alg":"EdDSA","kid":"../../../../etc/passwd"}`, claims(""), "c2ln"),
		"jku elsewhere":     jwt(`{"alg":"RS256","jku":"https://127.0.0.1:1/jwks"}`, claims(""), "c2ln"),
		"exp overflow":      jwt(`{"alg":"EdDSA"}`, `{"exp":1e400,"iat":-1e400}`, "c2ln"),
		"claims an array":   jwt(`{"alg":"EdDSA"}`, `[1,2,3]`, "c2ln"),
		"deeply nested":     jwt(`{"alg":"EdDSA"}`, strings.Repeat(`{"a":`, 5000)+"1"+strings.Repeat("}", 5000), "c2ln"),
		"invalid UTF-8":     jwt("{\"alg\":\"EdDSA\",\"kid\":\"\xff\xfe\"}", claims(""), "c2ln"),
		"signature garbage": jwt(`{"alg":"EdDSA"}`, claims(""), strings.Repeat("_", 3000)),
	}
	bodies := map[string][]byte{
		"invalid JSON":      []byte(`{"task": "x",`),
		"deep nesting":      []byte(deepJSON),
		"NUL bytes":         []byte("{\"task\":\"a\x00b\",\"description\":\"\x00\"}"),
		"escaped NUL":       []byte(`{"task":"a\u0000b","description":"d\u0000","message":{"id":"\u0000","text":"\u0000"}}`),
		"huge":              bytes.Repeat([]byte("a"), 3<<20),
		"huge JSON string":  []byte(`{"task":"` + strings.Repeat("é", 400_000) + `"}`),
		"number overflow":   []byte(`{"task":1e999999,"limit":-99999999999999999999999}`),
		"duplicate members": []byte(`{"task":"a","task":"b","task":{"x":1}}`),
		"invalid UTF-8":     []byte("{\"task\":\"\xff\xfe\xfd\"}"),
		"array not object":  []byte(`[[[[[]]]]]`),
		"empty":             {},
	}
	type target struct {
		name, method, url string
		signable          bool // takes a Session header
		bearer            bool // takes an access token or API key
		header            []string
	}
	api := []string{"Authorization", "Bearer " + sw.apiKey}
	admin := []string{"Authorization", "Bearer " + adminToken}
	targets := []target{
		{name: "discovery", method: http.MethodGet, url: "https://shop.example/.well-known/poppy.json"},
		{name: "discovery metadata", method: http.MethodGet, url: publicURL + "/.well-known/oauth-authorization-server/t/shop"},
		{name: "issuer token", method: http.MethodPost, url: sweepCompany + "/oauth/token",
			header: []string{"Content-Type", "application/x-www-form-urlencoded"}},
		{name: "issuer authorize", method: http.MethodGet, url: sweepCompany + "/oauth/authorize?client_id=https%3A%2F%2F127.0.0.1%3A1%2Fx&response_type=code"},
		{name: "feedback", method: http.MethodPost, url: sweepCompany + "/poppy/feedback", signable: true},
		{name: "conversations", method: http.MethodPost, url: sweepCompany + "/poppy/conversations", signable: true},
		{name: "conversation events", method: http.MethodGet, url: sweepCompany + "/poppy/conversations/" + sw.convID + "/events?cursor=%00&wait=-1", signable: true},
		{name: "gateway", method: http.MethodPost, url: sweepCompany + "/api/orders/items", signable: true, bearer: true},
		{name: "gateway description", method: http.MethodGet, url: sweepCompany + "/openapi/orders.json"},
		{name: "admin", method: http.MethodPost, url: publicURL + "/admin/v1/companies", header: admin, bearer: true},
		{name: "admin patch", method: http.MethodPatch, url: publicURL + "/admin/v1/companies/shop", header: admin},
		{name: "company API", method: http.MethodPut, url: publicURL + "/company/v1/apis/x", header: api, bearer: true},
		{name: "company feedback", method: http.MethodGet, url: publicURL + "/company/v1/feedback?limit=1e99&before=-1", header: api},
	}
	var ps []probe
	add := func(p probe) { ps = append(ps, p) }
	for _, tg := range targets {
		base := func(name string) probe {
			return probe{name: tg.name + ": " + name, method: tg.method, url: tg.url, header: append([]string(nil), tg.header...)}
		}
		// Headers.
		p := base("oversized header")
		p.header = append(p.header, "X-Junk", strings.Repeat("a", 70<<10))
		add(p)
		p = base("many headers")
		for i := range 300 {
			p.header = append(p.header, fmt.Sprintf("X-H%d", i), "v")
		}
		add(p)
		p = base("junk Authorization")
		p.header = []string{"Authorization", "Bearer " + strings.Repeat("x", 10_000)}
		add(p)
		p = base("Authorization without scheme")
		p.header = []string{"Authorization", "Basic ::::"}
		add(p)
		p = base("junk Host")
		p.header = append(p.header, "Host", "shop.example:99999")
		add(p)
		p = base("Content-Type garbage")
		p.header = append(p.header, "Content-Type", "application/json; charset=\"; boundary=((")
		p.body = []byte(`{}`)
		add(p)
		// JWT tricks, in the Session header and as an access token.
		for jname, tok := range jwts {
			if tg.signable {
				p = base("Session JWT with " + jname)
				p.header = append(p.header, "Poppy-Session", tok)
				p.body = []byte(`{"task":"t","description":"d"}`)
				add(p)
			}
			if tg.bearer {
				p = base("access token " + jname)
				p.header = []string{"Authorization", "Bearer " + tok}
				add(p)
			}
		}
		// Validly signed Session JWTs with hostile claims.
		if tg.signable {
			for cname, change := range map[string]func(*peers.SessionClaims){
				"NUL in sub":      func(c *peers.SessionClaims) { c.Sub = "usr_\x00" },
				"NUL in agent_id": func(c *peers.SessionClaims) { c.AgentID = "https://localhost/\x00" },
				"long sub":        func(c *peers.SessionClaims) { c.Sub = strings.Repeat("u", 20_000) },
				"invalid UTF-8":   func(c *peers.SessionClaims) { c.Sub = "usr_\xff\xfe" },
				"odd sid":         func(c *peers.SessionClaims) { c.SID = "../../\u202e" },
			} {
				p = base("signed Session JWT with " + cname)
				p.body = []byte(`{"task":"t","description":"d"}`)
				p.sign, p.claims = true, change
				add(p)
			}
		}
		// Structured-header garbage.
		if tg.signable || tg.name == "discovery" {
			for i, v := range []string{`;;;,,,=`, `"unterminated`, `a=?1;b=(`, `operations;v="3";` + strings.Repeat("x=1;", 3000),
				strings.Repeat("a,", 20_000), `(((((`, `@@@`, "\u00e9t\u00e9"} {
				p = base(fmt.Sprintf("Poppy-Extensions garbage %d", i))
				p.header = append(p.header, "Poppy-Extensions", v, "Poppy-Approval", v)
				p.sign = tg.signable
				add(p)
			}
		}
		// Bodies, with a valid Session where the route wants one.
		if tg.method != http.MethodGet {
			for bname, b := range bodies {
				p = base("body " + bname)
				p.body = b
				p.sign = tg.signable
				add(p)
			}
			p = base("body of unknown length, stalled 0.3 s")
			p.body = []byte(`{"task":"t"`)
			p.bodyLen = -1
			p.sign = tg.signable
			add(p)
		}
		// Odd paths.
		for i, suffix := range []string{"/../../admin/v1/companies", "/%2e%2e/%2e%2e/admin", "/%00", "/a%00b", "//", "/" + strings.Repeat("a", 8000),
			"/%ff%fe", "/;x=1", "/..;/", "?" + strings.Repeat("q=%00&", 500)} {
			p = base(fmt.Sprintf("odd path %d", i))
			p.url = tg.url + suffix
			p.sign = tg.signable
			add(p)
		}
	}
	// Malformed requests only a raw connection can send.
	for i, raw := range []string{
		"GET / HTTP/1.1\r\nHost: poppyhost.test\r\nX-Bad: a\x00b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: poppyhost.test\r\nBad Header: x\r\n\r\n",
		"GET /" + strings.Repeat("a", 100_000) + " HTTP/1.1\r\nHost: poppyhost.test\r\n\r\n",
		"POST /t/shop/poppy/feedback HTTP/1.1\r\nHost: poppyhost.test\r\nContent-Length: -5\r\n\r\n",
		"POST /t/shop/poppy/feedback HTTP/1.1\r\nHost: poppyhost.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
		"POST /t/shop/poppy/feedback HTTP/1.1\r\nHost: poppyhost.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",

		"GET /t/shop/.well-known/../../admin/v1/companies HTTP/1.1\r\nHost: poppyhost.test\r\n\r\n",
		"GET http://evil.example/admin/v1/companies HTTP/1.1\r\nHost: poppyhost.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: \r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"BREW / HTTP/1.1\r\nHost: poppyhost.test\r\n\r\n",

		"GET /\x00 HTTP/1.1\r\nHost: poppyhost.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: poppyhost.test\r\nX-Long: " + strings.Repeat("b", 80<<10) + "\r\n\r\n",
	} {
		add(probe{name: fmt.Sprintf("raw %d", i), raw: []byte(raw)})
	}
	// A transfer coding it does not know gets 501 (RFC 9112 §6.1), a
	// major version it does not speak 505 (RFC 9110 §15.6.6).
	add(probe{name: "raw unknown transfer coding", protocolStatus: http.StatusNotImplemented,
		raw: []byte("POST /admin/v1/companies HTTP/1.1\r\nHost: poppyhost.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")})
	add(probe{name: "raw HTTP/9.9", protocolStatus: http.StatusHTTPVersionNotSupported,
		raw: []byte("GET / HTTP/9.9\r\nHost: poppyhost.test\r\n\r\n")})
	// Cancelled requests: HTTP/2 stream resets while handlers wait on the
	// database, a long-poll and the origin.
	for i := range 40 {
		after := time.Duration(i%8) * 3 * time.Millisecond
		if i%4 == 3 {
			after = 150 * time.Millisecond
		}
		for _, c := range []struct {
			name, method, url string
			sign              bool
			header            []string
			body              []byte
		}{
			{"feedback", http.MethodPost, sweepCompany + "/poppy/feedback", true, nil, []byte(`{"task":"t","description":"d"}`)},
			{"long-poll", http.MethodGet, sweepCompany + "/poppy/conversations/" + sw.convID + "/events?wait=10", true, nil, nil},
			{"gateway", http.MethodGet, sweepCompany + "/api/orders/slow", true, nil, nil},
			{"admin", http.MethodGet, publicURL + "/admin/v1/companies", false, []string{"Authorization", "Bearer " + adminToken}, nil},
		} {
			if i >= 10 && c.name != "gateway" && c.name != "long-poll" {
				continue
			}
			add(probe{name: fmt.Sprintf("cancelled %s %d", c.name, i), method: c.method, url: c.url, sign: c.sign,
				header: c.header, body: c.body, cancelAfter: after})
		}
	}
	return ps
}

// run sends the probes, a few at a time.
func (sw *sweep) run(t *testing.T, probes []probe) []probeResult {
	results := make([]probeResult, len(probes))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(probes) {
					return
				}
				results[i] = sw.send(t, probes[i], i)
			}
		})
	}
	wg.Wait()
	return results
}

func (sw *sweep) send(t *testing.T, p probe, i int) probeResult {
	res := probeResult{p: p, id: fmt.Sprintf("sweep-%d", i)}
	start := time.Now()
	defer func() { res.elapsed = time.Since(start) }()
	if p.raw != nil {
		res.status, res.err = sendRaw(sw.s, p.raw)
		return res
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*hostileBound)
	defer cancel()
	var body io.Reader
	if p.body != nil {
		body = bytes.NewReader(p.body)
	}
	if p.bodyLen == -1 {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(p.body)
			time.Sleep(300 * time.Millisecond)
			_ = pw.Close()
		}()
		body = pr
	}
	req, err := http.NewRequestWithContext(ctx, p.method, p.url, body)
	if err != nil {
		res.err = err
		return res
	}
	if p.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for j := 0; j+1 < len(p.header); j += 2 {
		if p.header[j] == "Host" {
			req.Host = p.header[j+1]
			continue
		}
		req.Header.Set(p.header[j], p.header[j+1])
	}
	req.Header.Set("X-Request-ID", res.id)
	if p.sign && req.Header.Get("Poppy-Session") == "" {
		// A fresh Session per probe, so that no rate limit of one
		// Session hides what a handler does.
		c := peers.SessionClaims{Aud: sweepCompany, SID: fmt.Sprintf("sweep-%06d-abcdefgh", i)}
		if p.claims != nil {
			p.claims(&c)
		}
		sw.agent.Sign(t, req, c, peers.SessionOptions{})
	}
	if p.cancelAfter > 0 {
		time.AfterFunc(p.cancelAfter, cancel)
	}
	resp, err := sw.s.client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	_, res.err = io.Copy(io.Discard, resp.Body)
	res.status = resp.StatusCode
	return res
}

// sendRaw writes raw to a new HTTP/1.1 connection to s and returns the
// answer's status, 0 when the server closed the connection without one.
func sendRaw(s *server, raw []byte) (int, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: hostileBound}, "tcp", "127.0.0.1:"+s.port, &tls.Config{
		RootCAs: s.client.Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: publicHost,
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(hostileBound))
	if _, err := conn.Write(raw); err != nil {
		return 0, nil
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, nil
	}
	var status int
	if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &status); err != nil {
		return 0, fmt.Errorf("status line %q", line)
	}
	return status, nil
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
