package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// BenchmarkGateway measures what the gateway adds to a call: the same
// small GET answered by the same origin, once called directly by the
// Personal Agent's HTTP client and once through {issuer}/api/{name}/...,
// side by side in one process so that the ratio compares like with like.
// docs/benchmarks.md reports it.
//
//   - direct: the Personal Agent's client calls the origin itself over
//     HTTPS (HTTP/2, one connection).
//   - gateway-signed-out: GET of an operation with no security through the
//     gateway, with a Poppy-Session header of a known, already-started
//     Session. The gateway looks up the Company, verifies the Session JWT
//     (delegation cached) and records its jti, signs Poppy-Verified and
//     forwards the call over its own HTTP/2 connection to the origin.
//   - gateway-signed-in: the same with a warm access token (Direct Sign-In
//     before the timer, the Session already bound to its account) carrying
//     the scope the operation needs: the gateway also validates the token
//     (signature and revocation lookup).
//   - gateway-dpop: the same with a DPoP-bound token (RFC 9449) and a
//     DPoP proof on every call: the gateway also verifies the proof and
//     records its jti. Proofs are made before the timer, like the Session
//     JWTs.
//
// Each runs one request at a time (serial: ns/op is the latency) and with
// 4×GOMAXPROCS clients (parallel: ns/op is the inverse of throughput).
// Client, gateway and origin share the process and its cores, so every
// figure includes the client's and the origin's work too; allocs/op counts
// all three. Every Session JWT is signed before the timer starts (the
// gateway refuses a jti it has seen, so each request needs its own): the
// client's signing is not in the figures, and since the JWTs must be used
// within the verifier's one-minute window, keep -benchtime under about 20s.
//
// Besides ns/op each reports req/s, the p50 and p99 latency of single
// requests, and the CPU time per request of this process (go-cpu) and of
// the test database's PostgreSQL backends (pg-cpu), steadier under load
// than the times; the gateway variants also report x-direct, their ns/op
// over the median ns/op of the direct runs of the same mode in this
// process (run first), and, serially, added-µs/op, the difference.
func BenchmarkGateway(b *testing.B) {
	g := newGatewayBench(b, testkit.Options{})
	for _, mode := range []string{"serial", "parallel"} {
		var direct benchBaseline
		b.Run(mode+"/direct", func(b *testing.B) {
			direct.start(b)
			g.run(b, mode, g.direct, nil)
			direct.end(b)
		})
		direct.close()
		b.Run(mode+"/gateway-signed-out", func(b *testing.B) { g.run(b, mode, g.signedOut, &direct) })
		b.Run(mode+"/gateway-signed-in", func(b *testing.B) { g.run(b, mode, g.signedIn, &direct) })
		b.Run(mode+"/gateway-dpop", func(b *testing.B) { g.run(b, mode, g.dpop, &direct) })
	}
}

// BenchmarkGatewayRounds is BenchmarkGateway's parallel signed-in call
// (Session, jti, access token) five times back to back on one database
// that is never analyzed (the test server runs without autovacuum),
// after one run of the direct baseline: every round's Session jtis and
// tokens stay, so a plan that read a Company's rows instead of one would
// slow each round down (issue 24). x-direct is as in BenchmarkGateway.
func BenchmarkGatewayRounds(b *testing.B) {
	g := newGatewayBench(b, testkit.Options{})
	var direct benchBaseline
	b.Run("direct", func(b *testing.B) {
		direct.start(b)
		g.run(b, "parallel", g.direct, nil)
		direct.end(b)
	})
	direct.close()
	for i := 1; i <= 5; i++ {
		b.Run("round="+strconv.Itoa(i), func(b *testing.B) { g.run(b, "parallel", g.signedIn, &direct) })
	}
}

const (
	benchParallelism = 4 // clients per GOMAXPROCS in the parallel mode
	benchAPI         = "shop"
	benchScope       = "orders:read"
	benchUser        = "bench-user"
	benchPassword    = "correct horse battery staple"
)

// benchBody is the origin's answer, 227 bytes of JSON.
var benchBody = []byte(`{"id":"42","status":"shipped","placed_at":"2026-10-30T09:12:00Z",` +
	`"items":[{"sku":"TENT-2P","name":"Two-person tent","quantity":1,"price":"189.00"}],` +
	`"total":"189.00","currency":"EUR","carrier":"DHL","tracking":"JD014600006281"}` + "\n")

// benchOpenAPI declares GET /status for anyone with a Session and
// GET /orders/{id} for an access token with orders:read.
const benchOpenAPI = `{
  "openapi": "3.0.3",
  "info": {"title": "Shop", "version": "1"},
  "paths": {
    "/status": {"get": {"security": [], "responses": {"200": {"description": "the shop's status"}}}},
    "/orders/{id}": {"get": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "security": [{"shop_oauth": ["orders:read"]}],
      "responses": {"200": {"description": "an order"}}
    }}
  },
  "components": {"securitySchemes": {"shop_oauth": {"type": "oauth2", "flows": {"authorizationCode": {
    "authorizationUrl": "https://shop.example/authorize", "tokenUrl": "https://shop.example/token",
    "scopes": {"orders:read": "See your orders"}}}}}}
}`

// gatewayBench is a Company with an issuer, one registered API on a plain
// HTTPS origin, and one Personal Agent User with two started Sessions.
type gatewayBench struct {
	env   *testkit.Env
	agent *peers.Agent
	aud   string
	sub   string
	// header is a Session JWT header with its delegation (pap_dlg): every
	// request reuses it, as a Personal Agent does between delegations.
	header map[string]any
	n      atomic.Int64

	origin                            *benchOrigin
	direct, signedOut, signedIn, dpop *benchCaller
}

// benchCaller is one of the three ways of making the call.
type benchCaller struct {
	client *http.Client
	url    string
	sid    string // the Session's; "" calls without Poppy-Session
	token  string // the access token; "" signed out
	// proofKey makes the DPoP proofs of a DPoP-bound token; nil for Bearer.
	proofKey *dpoptest.Key
}

// benchCreds are the headers of one call: Poppy-Session, and DPoP.
type benchCreds struct{ session, proof string }

// benchOrigin is a Company origin that answers every request with
// benchBody, without checking Poppy-Verified beyond counting it: the
// testkit origin fetches the key set on every request, which would be
// most of what this measures. newGatewayBench verifies one forwarded
// Poppy-Verified of each gateway variant in full instead.
type benchOrigin struct {
	addr     string
	base     string // https://{host}:{port}/v1, the API's origin
	verified atomic.Int64
	mu       sync.Mutex
	last     string // the latest Poppy-Verified received
}

func (o *benchOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if v := r.Header.Get(verified.Header); v != "" {
		o.verified.Add(1)
		if r.Header.Get("X-Bench-Keep") != "" {
			o.mu.Lock()
			o.last = v
			o.mu.Unlock()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(benchBody)))
	_, _ = w.Write(benchBody)
}

func startBenchOrigin(b testing.TB, env *testkit.Env, host string) *benchOrigin {
	o := &benchOrigin{}
	srv := httptest.NewUnstartedServer(o)
	srv.TLS = env.CA.ServerTLSConfig()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	env.Hosts.Add(host)
	o.addr = srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(o.addr)
	o.base = "https://" + net.JoinHostPort(host, port) + "/v1"
	return o
}

// newGatewayBench creates the Company (issuer on, rate limits too high to
// answer 429), its account and API, starts the origin, signs in, and
// starts both Sessions with a first request each.
func newGatewayBench(b testing.TB, o testkit.Options) *gatewayBench {
	b.Helper()
	ctx := context.Background()
	env := testkit.SetupWith(b, o)
	agent := env.StartAgent(b, "agent.test")
	slug := "shop" + strings.ToLower(rand.Text())[:8]
	view := env.CreateCompany(b, map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Shop " + slug, "domain": slug + ".example"},
		"auth": map[string]any{"issuer": true, "scopes": map[string]any{benchScope: "See your orders"},
			"token_lifetimes": map[string]any{"access_seconds": 3600}, "dpop": "allowed"},
		"rate_limits": map[string]any{"per_address": 1_000_000, "per_agent": 1_000_000, "per_session": 1_000_000},
	})
	aud, _ := view["identifier"].(string)
	require.NotEmpty(b, aud)
	resp := env.Admin(b, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
		map[string]any{"username": benchUser, "password": benchPassword})
	require.Equal(b, http.StatusCreated, resp.Status, "%s", resp.Body)

	origin := startBenchOrigin(b, env, "shop-origin.test")
	_, err := registry.Compile(ctx, []byte(benchOpenAPI))
	require.NoError(b, err)
	var companyID int64
	require.NoError(b, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&companyID))
	_, err = registry.NewStore(env.Pool).PutAPI(ctx, companyID, &registry.API{
		Name: benchAPI, Origin: origin.base, Description: "Orders", OpenAPI: json.RawMessage(benchOpenAPI),
		TimeoutSeconds:   registry.DefaultTimeoutSeconds,
		MaxRequestBytes:  registry.DefaultMaxRequestBytes,
		MaxResponseBytes: registry.DefaultMaxResponseBytes,
	}, time.Now())
	require.NoError(b, err)

	issuer := env.PublicURL("/t/" + slug)
	tok := env.SignIn(b, agent, issuer, benchUser, benchPassword, []string{benchScope}, "")
	// A second sign-in, whose refresh with a proof binds its tokens (a
	// refresh revokes the grant's earlier access tokens).
	proofKey := dpoptest.NewKey()
	bound := benchBoundToken(b, env, agent, issuer,
		env.SignIn(b, agent, issuer, benchUser, benchPassword, []string{benchScope}, "").RefreshToken, proofKey)

	// The Personal Agent's own client for the origin, built as env.Client
	// is for the platform: HTTP/2 over TLS to the test CA.
	addr := origin.addr
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: env.CA.Pool(), MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	b.Cleanup(tr.CloseIdleConnections)

	g := &gatewayBench{
		env: env, agent: agent, aud: aud, sub: "usr_bench", origin: origin,
		direct:    &benchCaller{client: &http.Client{Transport: tr}, url: origin.base + "/orders/42"},
		signedOut: &benchCaller{client: env.Client, url: issuer + "/api/" + benchAPI + "/status", sid: benchID()},
		signedIn: &benchCaller{client: env.Client, url: issuer + "/api/" + benchAPI + "/orders/42", sid: benchID(),
			token: tok.AccessToken},
		dpop: &benchCaller{client: env.Client, url: issuer + "/api/" + benchAPI + "/orders/42", sid: benchID(),
			token: bound, proofKey: proofKey},
	}
	first := agent.SessionJWT(b, peers.SessionClaims{Aud: aud, URL: g.signedOut.url, Sub: g.sub, SID: g.signedOut.sid},
		peers.SessionOptions{})
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(first, ".")[0])
	require.NoError(b, err)
	require.NoError(b, json.Unmarshal(raw, &g.header))

	// Start both Sessions (the signed-in one binds its account) and check
	// what the origin receives: a valid Poppy-Verified with the facts.
	set := benchCompanyKeys(b, env, issuer)
	for _, c := range []*benchCaller{g.signedOut, g.signedIn, g.dpop} {
		req := g.request(b, c, g.sign(b, c))
		req.Header.Set("X-Bench-Keep", "1")
		status, body := benchSend(c.client, req)
		require.Equal(b, http.StatusOK, status, "%s", body)
		require.Equal(b, string(benchBody), body)
		origin.mu.Lock()
		last := origin.last
		origin.mu.Unlock()
		claims, err := verified.Verify(last, set, aud, origin.base, time.Now())
		require.NoError(b, err)
		require.Equal(b, c.sid, claims.SID)
		if c.token == "" {
			require.Empty(b, claims.Account)
		} else {
			require.NotEmpty(b, claims.Account)
			require.Equal(b, []string{benchScope}, claims.Scopes)
		}
	}
	return g
}

// benchBoundToken refreshes the sign-in with a DPoP proof of key, which
// gets a token bound to key (the Company allows DPoP).
func benchBoundToken(b testing.TB, env *testkit.Env, agent *peers.Agent, issuer, refresh string, key *dpoptest.Key) string {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "client_id": {agent.ClientID},
		"client_assertion_type": {clientauth.AssertionType}, "client_assertion": {agent.ClientAssertion(b, issuer)}}
	resp := env.Do(b, http.MethodPost, issuer+"/oauth/token", form.Encode(),
		"Content-Type", "application/x-www-form-urlencoded",
		"DPoP", key.Valid(http.MethodPost, issuer+"/oauth/token", "", time.Now()))
	require.Equal(b, http.StatusOK, resp.Status, "%s", resp.Body)
	body := resp.JSON(b)
	require.Equal(b, "DPoP", body["token_type"])
	return body["access_token"].(string)
}

// benchCompanyKeys fetches the Company's key set, which signs
// Poppy-Verified.
func benchCompanyKeys(b testing.TB, env *testkit.Env, issuer string) jwk.Set {
	resp := env.Do(b, http.MethodGet, issuer+"/oauth/jwks.json", nil)
	require.Equal(b, http.StatusOK, resp.Status, "%s", resp.Body)
	set, err := jwk.Parse(resp.Body)
	require.NoError(b, err)
	return set
}

func benchID() string { return strings.ToLower(rand.Text())[:22] }

// sign returns a fresh Poppy-Session for a call of c, or none for a call
// without one, and a DPoP proof for a DPoP-bound token.
func (g *gatewayBench) sign(b testing.TB, c *benchCaller) benchCreds {
	if c.sid == "" {
		return benchCreds{}
	}
	claims := map[string]any{"iss": g.agent.ClientID, "aud": g.aud, "sid": c.sid, "sub": g.sub,
		"htm": http.MethodGet, "htu": c.url, "iat": time.Now().Unix(),
		"jti": "b" + strconv.FormatInt(g.n.Add(1), 10) + "_" + benchID()[:8]}
	if c.token != "" {
		sum := sha256.Sum256([]byte(c.token))
		claims["ath"] = base64.RawURLEncoding.EncodeToString(sum[:])
	}
	creds := benchCreds{session: peers.SignJWT(b, "ES256", g.agent.DelegatedKey(g.sub), g.header, claims)}
	if c.proofKey != nil {
		creds.proof = c.proofKey.Valid(http.MethodGet, c.url, c.token, time.Now())
	}
	return creds
}

// signAll signs n Poppy-Session headers for c, none when c has no Session.
func (g *gatewayBench) signAll(b testing.TB, c *benchCaller, n int) []benchCreds {
	if c.sid == "" {
		return nil
	}
	out := make([]benchCreds, n)
	for i := range out {
		out[i] = g.sign(b, c)
	}
	return out
}

func (g *gatewayBench) request(b testing.TB, c *benchCaller, creds benchCreds) *http.Request {
	req, err := http.NewRequest(http.MethodGet, c.url, nil)
	if err != nil {
		b.Fatal(err)
	}
	if creds.session != "" {
		req.Header.Set("Poppy-Session", creds.session)
	}
	switch {
	case c.proofKey != nil:
		req.Header.Set("Authorization", "DPoP "+c.token)
		req.Header.Set("DPoP", creds.proof)
	case c.token != "":
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req
}

// send makes the call and reads the whole answer.
func benchSend(client *http.Client, req *http.Request) (int, string) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(raw)
}

// call makes the call and fails unless it answers benchBody.
func (g *gatewayBench) call(b *testing.B, c *benchCaller, creds benchCreds) bool {
	status, body := benchSend(c.client, g.request(b, c, creds))
	if status != http.StatusOK || len(body) != len(benchBody) {
		b.Errorf("GET %s: status %d: %s", c.url, status, body)
		return false
	}
	return true
}

// run measures c in mode: b.N calls, one at a time or from
// benchParallelism×GOMAXPROCS goroutines.
func (g *gatewayBench) run(b *testing.B, mode string, c *benchCaller, direct *benchBaseline) {
	clients := 1
	if mode == "parallel" {
		clients = benchParallelism * runtime.GOMAXPROCS(0)
	}
	// Warm up: as many calls at once as the run makes, so that the
	// database pool and the origin connections are open.
	warm := g.signAll(b, c, 2*clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			g.call(b, c, benchAt(warm, 2*i))
			g.call(b, c, benchAt(warm, 2*i+1))
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}

	sessions := g.signAll(b, c, b.N)
	took := make([]time.Duration, b.N)
	verifiedBefore := g.origin.verified.Load()
	pgBefore := g.pgCPU(b)
	goBefore := benchGoCPU()
	b.ReportAllocs()
	b.ResetTimer()
	if mode == "serial" {
		for i := range b.N {
			start := time.Now()
			if !g.call(b, c, benchAt(sessions, i)) {
				b.FailNow()
			}
			took[i] = time.Since(start)
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(next.Add(1) - 1)
				start := time.Now()
				if !g.call(b, c, benchAt(sessions, i)) {
					return
				}
				took[i] = time.Since(start)
			}
		})
	}
	b.StopTimer()
	goUsed := benchGoCPU() - goBefore
	pgUsed := g.pgCPU(b).since(pgBefore)
	if b.Failed() {
		return
	}
	if c.sid != "" && g.origin.verified.Load()-verifiedBefore != int64(b.N) {
		b.Fatalf("the origin got Poppy-Verified on %d of %d calls", g.origin.verified.Load()-verifiedBefore, b.N)
	}

	nsop := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(1e9/nsop, "req/s")
	benchReportLatencies(b, took)
	b.ReportMetric(float64(goUsed.Nanoseconds())/1e3/float64(b.N), "go-cpu-µs/op")
	b.ReportMetric(float64(pgUsed.Nanoseconds())/1e3/float64(b.N), "pg-cpu-µs/op")
	if direct != nil {
		if base := direct.median(); base > 0 {
			b.ReportMetric(nsop/base, "x-direct")
			if mode == "serial" {
				b.ReportMetric((nsop-base)/1e3, "added-µs/op")
			}
		}
	}
}

func benchAt(s []benchCreds, i int) benchCreds {
	if s == nil {
		return benchCreds{}
	}
	return s[i]
}

// goCPU is the CPU time this process has used: client, gateway and
// origin together.
func benchGoCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPGTimes is the CPU time of each PostgreSQL backend on the test
// database, by process ID.
type benchPGTimes map[int32]time.Duration

// pgCPU reads the CPU time of the test database's backends from
// /proc/{pid}/stat (the server runs on this machine); none where it
// cannot be read.
func (g *gatewayBench) pgCPU(b *testing.B) benchPGTimes {
	var pids []int32
	err := g.env.Pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE datname = current_database()`).Scan(&pids)
	require.NoError(b, err)
	t := benchPGTimes{}
	for _, pid := range pids {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
		if err != nil {
			continue
		}
		// utime and stime are fields 14 and 15, in clock ticks of 10 ms;
		// count from the end of the command name, which may hold spaces.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		t[pid] = time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return t
}

// since is the CPU time the backends used after before; a backend that
// started in between counts from zero.
func (t benchPGTimes) since(before benchPGTimes) time.Duration {
	var d time.Duration
	for pid, cpu := range t {
		d += cpu - before[pid]
	}
	return d
}

// benchReportLatencies reports the median and 99th percentile of ds in µs.
func benchReportLatencies(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	q := func(p float64) float64 {
		i := max(int(math.Ceil(p*float64(len(ds))))-1, 0)
		return float64(ds[i].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// benchBaseline keeps the ns/op of the direct variant's finished runs: with
// -count, a benchmark function is called again with b.N = 1 for each new
// run, so the call before that one (or before b.Run returns) is the run's
// last, whose figures go to the output.
type benchBaseline struct {
	last    float64
	pending bool
	runs    []float64
}

func (bl *benchBaseline) start(b *testing.B) {
	if b.N == 1 {
		bl.close()
	}
}

func (bl *benchBaseline) end(b *testing.B) {
	if !b.Failed() {
		bl.last, bl.pending = float64(b.Elapsed().Nanoseconds())/float64(b.N), true
	}
}

func (bl *benchBaseline) close() {
	if bl.pending {
		bl.runs = append(bl.runs, bl.last)
		bl.pending = false
	}
}

// median is the median ns/op of the finished runs, 0 without any.
func (bl *benchBaseline) median() float64 {
	if len(bl.runs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(bl.runs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkOperations measures the Operations extension at the gateway
// (extension 4, 6, 7) on the Company of BenchmarkGateway with operations
// on, signed in with the same warm access token and Session:
//
//   - plain: POST {issuer}/api/ops/orders/42/notes, which the origin
//     performs directly (no proposal, no approval): the gateway's
//     operations path reads the body and forwards the call.
//   - approved: POST .../orders/42/exchanges with Poppy-Approval for an
//     operation proposed for it before (each iteration its own, with a
//     distinct action_key from a counter in the body; the proposing
//     request runs with the timer stopped). Timed: the approval's check,
//     the claim, the origin's call with the approval in Poppy-Verified and
//     Idempotency-Key, and the stored answer. x-plain is its ns/op over
//     the median ns/op of the plain runs.
//   - approved-parallel: b.N operations proposed before the timer, then
//     approved from 4×GOMAXPROCS clients, each once: req/s is the
//     throughput of concurrent distinct approved calls.
//   - approved-async-commit: approved again, last, after the test
//     database's connections are made anew with synchronous_commit off,
//     so that its commits do not wait for the WAL flush. A measurement
//     only, of how much of approved's time over plain's is those waits,
//     which at-most-once needs; the platform never runs so. x-plain is
//     over the same plain runs.
//
// Each reports req/s, p50 and p99, and the CPU per request of this process
// and of PostgreSQL, as BenchmarkGateway does.
func BenchmarkOperations(b *testing.B) {
	g := newGatewayBench(b, testkit.Options{})
	o := newOpsBench(b, g)
	var plain benchBaseline
	b.Run("plain", func(b *testing.B) {
		plain.start(b)
		o.runPlain(b)
		plain.end(b)
	})
	plain.close()
	b.Run("approved", func(b *testing.B) { o.runApproved(b, &plain) })
	b.Run("approved-parallel", func(b *testing.B) { o.runApprovedParallel(b) })
	o.commitWithoutWaiting(b)
	b.Run("approved-async-commit", func(b *testing.B) { o.runApproved(b, &plain) })
}

// commitWithoutWaiting makes the test database's commits return before
// the WAL is flushed (synchronous_commit off) on every connection of the
// platform's pool from now on: BenchmarkOperations' comparison only.
func (s *opsBench) commitWithoutWaiting(b *testing.B) {
	ctx := context.Background()
	pool := s.g.env.Pool
	var name string
	require.NoError(b, pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
	_, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET synchronous_commit = off`)
	require.NoError(b, err)
	pool.Reset()
	var setting string
	require.NoError(b, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting))
	require.Equal(b, "off", setting)
}

const opsBenchAPI = "ops"

// opsBenchOpenAPI declares the two POSTs, for an access token with
// orders:read (the scope the bench's token carries).
const opsBenchOpenAPI = `{
  "openapi": "3.0.3",
  "info": {"title": "Shop operations", "version": "1"},
  "paths": {
    "/orders/{id}/notes": {"post": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "security": [{"shop_oauth": ["orders:read"]}],
      "responses": {"201": {"description": "a note"}}
    }},
    "/orders/{id}/exchanges": {"post": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "security": [{"shop_oauth": ["orders:read"]}],
      "responses": {"201": {"description": "an exchange"}}
    }}
  },
  "components": {"securitySchemes": {"shop_oauth": {"type": "oauth2", "flows": {"authorizationCode": {
    "authorizationUrl": "https://shop.example/authorize", "tokenUrl": "https://shop.example/token",
    "scopes": {"orders:read": "See your orders"}}}}}}
}`

// opsBenchAnswer is the origin's answer to a performed POST.
var opsBenchAnswer = []byte(`{"id":"ex_42","status":"accepted","order_id":"42"}` + "\n")

// opsOrigin answers /v1/orders/42/notes with opsBenchAnswer, and
// /v1/orders/42/exchanges as an origin under the origin contract does: a
// proposal when Poppy-Verified states no operation_id (its payload is
// decoded, not verified, as benchOrigin does not either), opsBenchAnswer
// when it does, counting the approved calls that carry the operation's
// Idempotency-Key.
type opsOrigin struct {
	performed, plain atomic.Int64
}

func (o *opsOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/orders/42/notes" {
		o.plain.Add(1)
		opsWrite(w, http.StatusCreated, "application/json", opsBenchAnswer)
		return
	}
	var claims struct {
		OperationID string `json:"operation_id"`
		Revision    string `json:"revision"`
	}
	if parts := strings.Split(r.Header.Get(verified.Header), "."); len(parts) == 3 {
		if payload, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil {
			_ = json.Unmarshal(payload, &claims)
		}
	}
	if claims.OperationID == "" {
		var body struct {
			N int64 `json:"n"`
		}
		_ = json.Unmarshal(raw, &body)
		n := strconv.FormatInt(body.N, 10)
		opsWrite(w, http.StatusOK, "application/poppy-proposal+json", []byte(`{"action_key":"exchange 42 n`+n+
			`","summary":"Exchange item `+n+` of order 42.","terms":{"order_id":"42","n":`+n+`}}`))
		return
	}
	if r.Header.Get("Idempotency-Key") == claims.OperationID+"."+claims.Revision {
		o.performed.Add(1)
	}
	opsWrite(w, http.StatusCreated, "application/json", opsBenchAnswer)
}

func opsWrite(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// opsBench is BenchmarkGateway's Company with operations on and a second
// API, ops, on its own origin.
type opsBench struct {
	g         *gatewayBench
	origin    *opsOrigin
	notes     string // the plain POST's URL
	exchanges string // the operation's URL
	n         atomic.Int64
}

// opsProposed is an operation proposed for the body {"n": n}.
type opsProposed struct {
	body     string
	approval string
}

func newOpsBench(b testing.TB, g *gatewayBench) *opsBench {
	b.Helper()
	ctx := context.Background()
	env := g.env
	issuer := strings.TrimSuffix(g.signedIn.url, "/api/"+benchAPI+"/orders/42")
	slug := issuer[strings.LastIndexByte(issuer, '/')+1:]
	resp := env.Admin(b, http.MethodPatch, "/admin/v1/companies/"+slug,
		map[string]any{"operations": map[string]any{"enabled": true}})
	require.Equal(b, http.StatusOK, resp.Status, "%s", resp.Body)

	o := &opsOrigin{}
	srv := httptest.NewUnstartedServer(o)
	srv.TLS = env.CA.ServerTLSConfig()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	env.Hosts.Add("ops-origin.test")
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	base := "https://" + net.JoinHostPort("ops-origin.test", port) + "/v1"

	_, err := registry.Compile(ctx, []byte(opsBenchOpenAPI))
	require.NoError(b, err)
	var companyID int64
	require.NoError(b, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&companyID))
	_, err = registry.NewStore(env.Pool).PutAPI(ctx, companyID, &registry.API{
		Name: opsBenchAPI, Origin: base, Description: "Exchanges", OpenAPI: json.RawMessage(opsBenchOpenAPI),
		TimeoutSeconds:   registry.DefaultTimeoutSeconds,
		MaxRequestBytes:  registry.DefaultMaxRequestBytes,
		MaxResponseBytes: registry.DefaultMaxResponseBytes,
	}, time.Now())
	require.NoError(b, err)

	s := &opsBench{g: g, origin: o,
		notes:     issuer + "/api/" + opsBenchAPI + "/orders/42/notes",
		exchanges: issuer + "/api/" + opsBenchAPI + "/orders/42/exchanges"}
	// Check the exchange once: proposed, approved, performed once, and the
	// same stored answer on a retry without calling the origin.
	p := s.propose(b)
	for range 2 {
		status, body := benchSend(g.env.Client, s.request(b, s.exchanges, p.body, p.approval))
		require.Equal(b, http.StatusCreated, status, "%s", body)
		require.Equal(b, string(opsBenchAnswer), body)
	}
	require.Equal(b, int64(1), o.performed.Load())
	return s
}

// sign returns a fresh Poppy-Session for a POST to url in the signed-in
// Session of the gateway bench.
func (s *opsBench) sign(b testing.TB, url string) string {
	g, c := s.g, s.g.signedIn
	sum := sha256.Sum256([]byte(c.token))
	claims := map[string]any{"iss": g.agent.ClientID, "aud": g.aud, "sid": c.sid, "sub": g.sub,
		"htm": http.MethodPost, "htu": url, "iat": time.Now().Unix(),
		"jti": "o" + strconv.FormatInt(g.n.Add(1), 10) + "_" + benchID()[:8],
		"ath": base64.RawURLEncoding.EncodeToString(sum[:])}
	return peers.SignJWT(b, "ES256", g.agent.DelegatedKey(g.sub), g.header, claims)
}

// request is a signed-in POST of body to url, declaring the extension and
// carrying approval when there is one.
func (s *opsBench) request(b testing.TB, url, body, approval string) *http.Request {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Poppy-Session", s.sign(b, url))
	req.Header.Set("Authorization", "Bearer "+s.g.signedIn.token)
	if url == s.exchanges {
		req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
	}
	if approval != "" {
		req.Header.Set("Poppy-Approval", approval)
	}
	return req
}

// propose proposes a new operation, with its own action_key, and returns
// the body and approval that perform it.
func (s *opsBench) propose(b testing.TB) opsProposed {
	body := `{"item_id":"itm_4Qa","n":` + strconv.FormatInt(s.n.Add(1), 10) + `}`
	status, raw := benchSend(s.g.env.Client, s.request(b, s.exchanges, body, ""))
	var answer struct {
		Error     string `json:"error"`
		Operation struct {
			OperationID string `json:"operation_id"`
			Revision    string `json:"revision"`
		} `json:"operation"`
	}
	if status != http.StatusForbidden || json.Unmarshal([]byte(raw), &answer) != nil ||
		answer.Error != "approval_required" || answer.Operation.OperationID == "" {
		b.Fatalf("propose: status %d: %s", status, raw)
	}
	return opsProposed{body: body, approval: `operation_id="` + answer.Operation.OperationID + `", revision="` +
		answer.Operation.Revision + `", approver="user"`}
}

// call sends req and fails unless it answers opsBenchAnswer with 201.
func (s *opsBench) call(b testing.TB, req *http.Request) bool {
	status, body := benchSend(s.g.env.Client, req)
	if status != http.StatusCreated || body != string(opsBenchAnswer) {
		b.Errorf("POST %s: status %d: %s", req.URL, status, body)
		return false
	}
	return true
}

// opsMeasure brackets a timed section: CPU of this process and of
// PostgreSQL, and the figures to report after it.
type opsMeasure struct {
	goBefore time.Duration
	pgBefore benchPGTimes
}

func (s *opsBench) startMeasure(b *testing.B) opsMeasure {
	m := opsMeasure{pgBefore: s.g.pgCPU(b), goBefore: benchGoCPU()}
	b.ReportAllocs()
	b.ResetTimer()
	return m
}

func (s *opsBench) report(b *testing.B, m opsMeasure, took []time.Duration) float64 {
	b.StopTimer()
	goUsed := benchGoCPU() - m.goBefore
	pgUsed := s.g.pgCPU(b).since(m.pgBefore)
	nsop := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(1e9/nsop, "req/s")
	benchReportLatencies(b, took)
	b.ReportMetric(float64(goUsed.Nanoseconds())/1e3/float64(b.N), "go-cpu-µs/op")
	b.ReportMetric(float64(pgUsed.Nanoseconds())/1e3/float64(b.N), "pg-cpu-µs/op")
	return nsop
}

func (s *opsBench) runPlain(b *testing.B) {
	for range 2 {
		if !s.call(b, s.request(b, s.notes, `{"text":"warm"}`, "")) {
			b.FailNow()
		}
	}
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		reqs[i] = s.request(b, s.notes, `{"text":"leave it at the door"}`, "")
	}
	took := make([]time.Duration, b.N)
	before := s.origin.plain.Load()
	m := s.startMeasure(b)
	for i := range b.N {
		start := time.Now()
		if !s.call(b, reqs[i]) {
			b.FailNow()
		}
		took[i] = time.Since(start)
	}
	s.report(b, m, took)
	if got := s.origin.plain.Load() - before; got != int64(b.N) {
		b.Fatalf("the origin got %d of %d calls", got, b.N)
	}
}

// runApproved: serially, each iteration proposes a new operation with the
// timer stopped, then times the approved call that performs it. StopTimer
// keeps the proposing out of ns/op and allocs/op; its Go and PostgreSQL
// CPU is measured around it and subtracted.
func (s *opsBench) runApproved(b *testing.B, plain *benchBaseline) {
	took := make([]time.Duration, b.N)
	before := s.origin.performed.Load()
	var goOut, pgOut time.Duration
	m := s.startMeasure(b)
	for i := range b.N {
		b.StopTimer()
		// Both readings of the backends' CPU are inside the stopped part.
		g0, p0 := benchGoCPU(), s.g.pgCPU(b)
		p := s.propose(b)
		req := s.request(b, s.exchanges, p.body, p.approval)
		pgOut += s.g.pgCPU(b).since(p0)
		goOut += benchGoCPU() - g0
		b.StartTimer()
		start := time.Now()
		if !s.call(b, req) {
			b.FailNow()
		}
		took[i] = time.Since(start)
	}
	m.goBefore += goOut
	nsop := s.reportExcluding(b, m, took, pgOut)
	if got := s.origin.performed.Load() - before; got != int64(b.N) {
		b.Fatalf("the origin performed %d of %d operations", got, b.N)
	}
	if base := plain.median(); base > 0 {
		b.ReportMetric(nsop/base, "x-plain")
		b.ReportMetric((nsop-base)/1e3, "added-µs/op")
	}
}

// reportExcluding is report, less pgOut of PostgreSQL CPU spent outside
// the timed sections.
func (s *opsBench) reportExcluding(b *testing.B, m opsMeasure, took []time.Duration, pgOut time.Duration) float64 {
	b.StopTimer()
	goUsed := benchGoCPU() - m.goBefore
	pgUsed := s.g.pgCPU(b).since(m.pgBefore) - pgOut
	nsop := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(1e9/nsop, "req/s")
	benchReportLatencies(b, took)
	b.ReportMetric(float64(goUsed.Nanoseconds())/1e3/float64(b.N), "go-cpu-µs/op")
	b.ReportMetric(float64(pgUsed.Nanoseconds())/1e3/float64(b.N), "pg-cpu-µs/op")
	return nsop
}

func (s *opsBench) runApprovedParallel(b *testing.B) {
	clients := benchParallelism * runtime.GOMAXPROCS(0)
	// Warm up as many connections as the run uses.
	warm := make([]opsProposed, clients)
	for i := range warm {
		warm[i] = s.propose(b)
	}
	var wg sync.WaitGroup
	for _, p := range warm {
		wg.Go(func() { s.call(b, s.request(b, s.exchanges, p.body, p.approval)) })
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		p := s.propose(b)
		reqs[i] = s.request(b, s.exchanges, p.body, p.approval)
	}
	took := make([]time.Duration, b.N)
	before := s.origin.performed.Load()
	var next atomic.Int64
	m := s.startMeasure(b)
	b.SetParallelism(benchParallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) - 1)
			start := time.Now()
			if !s.call(b, reqs[i]) {
				return
			}
			took[i] = time.Since(start)
		}
	})
	s.report(b, m, took)
	if b.Failed() {
		return
	}
	if got := s.origin.performed.Load() - before; got != int64(b.N) {
		b.Fatalf("the origin performed %d of %d operations", got, b.N)
	}
}
