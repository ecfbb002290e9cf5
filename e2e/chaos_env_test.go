package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The Company of the chaos test and its API.
const (
	chaosSlug     = "chaos"
	chaosIssuer   = publicURL + "/t/" + chaosSlug
	chaosAPI      = "orders"
	chaosScope    = "orders:read"
	chaosUser     = "ada"
	chaosPassword = "chaos-password-0123456789"
	// chaosOriginTimeout is the API's timeout in seconds: a stalled
	// origin outlasts it.
	chaosOriginTimeout = 2
)

// chaosEnv is two replicas of the built server on a PostgreSQL cluster of
// the test's own (so it can be restarted), behind a load balancer, with
// the Company's origin, a Personal Agent signed in as one User, and the
// conversations the readers follow.
type chaosEnv struct {
	t      *testing.T
	pg     *pgControl
	dbURL  string
	caDir  string
	ca     *devca.CA
	lb     *balancer
	origin *chaosOrigin
	agent  *peers.Agent
	token  string // ada's access token
	pool   *pgxpool.Pool
}

// startChaos starts the cluster, the replicas and the peers, and
// configures the Company.
func startChaos(t *testing.T) *chaosEnv {
	t.Helper()
	requireBuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &chaosEnv{t: t, caDir: t.TempDir()}

	var dir string
	_, dir, e.dbURL = startPrivateCluster(ctx, t)
	e.pg = newPGControl(t, dir)
	// After a restart by pg_ctl, the cluster's own Stop does nothing.
	t.Cleanup(func() { _ = e.pg.stop("fast") })
	var err error
	e.pool, err = pgxpool.New(ctx, e.dbURL)
	require.NoError(t, err)
	t.Cleanup(e.pool.Close)

	e.ca, err = devca.Load(e.caDir)
	require.NoError(t, err)
	e.lb = newBalancer(t, e.ca)
	var wg sync.WaitGroup
	for i, name := range []string{"replica A", "replica B"} {
		s := startServer(t, name, e.dbURL, e.caDir, e.ca)
		e.lb.slots[i].Store(s)
		wg.Go(func() { s.waitReadyErr(t, 30*time.Second) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	e.origin = startChaosOrigin(t, e.ca)
	e.agent = peers.StartAgent(t, e.ca, peers.AgentOptions{Host: "localhost"})
	e.configure(t)
	site := &peers.Site{Client: e.lb.client}
	e.token = site.SignIn(t, e.agent, chaosIssuer, chaosUser, chaosPassword, []string{chaosScope}, "").AccessToken
	return e
}

// configure creates the Company (operations on, limits the load does not
// reach), its account and its API.
func (e *chaosEnv) configure(t *testing.T) {
	s := tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "Chaos Outfitters", Domain: "chaos.example"}
	s.Auth.Scopes = map[string]string{chaosScope: "See your orders"}
	s.RateLimits = tenant.RateLimits{PerAgent: 1_000_000, PerSession: 1_000_000, PerAddress: 1_000_000}
	s.Operations.Enabled = true
	company, err := json.Marshal(struct {
		Slug string `json:"slug"`
		tenant.Settings
	}{chaosSlug, s})
	require.NoError(t, err)
	a := e.lb.slots[0].Load()
	resp := a.admin(t, http.MethodPost, "/admin/v1/companies", json.RawMessage(company))
	require.Equal(t, http.StatusCreated, resp.status, "create the Company: %s", resp.body)
	resp = a.admin(t, http.MethodPost, "/admin/v1/companies/"+chaosSlug+"/accounts",
		map[string]string{"username": chaosUser, "password": chaosPassword})
	require.Equal(t, http.StatusCreated, resp.status, "create the account: %s", resp.body)

	oauth := map[string]any{"type": "oauth2", "flows": map[string]any{"authorizationCode": map[string]any{
		"authorizationUrl": "https://chaos.example/authorize", "tokenUrl": "https://chaos.example/token",
		"scopes": map[string]string{chaosScope: "See your orders"}}}}
	id := []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}}
	doc := map[string]any{
		"openapi":    "3.1.0",
		"info":       map[string]any{"title": "Orders", "version": "1"},
		"components": map[string]any{"securitySchemes": map[string]any{"shop": oauth}},
		"paths": map[string]any{
			"/orders/{id}": map[string]any{"get": map[string]any{"parameters": id,
				"security":  []any{map[string]any{"shop": []string{chaosScope}}},
				"responses": map[string]any{"200": map[string]any{"description": "OK"}}}},
			"/orders/{id}/exchanges": map[string]any{"post": map[string]any{"parameters": id,
				"security": []any{map[string]any{}},
				"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{
					"schema": map[string]any{"type": "object"}}}},
				"responses": map[string]any{"201": map[string]any{"description": "Created"}}}},
		},
	}
	resp = a.admin(t, http.MethodPut, "/admin/v1/companies/"+chaosSlug+"/apis/"+chaosAPI, map[string]any{
		"origin": e.origin.url, "openapi": doc, "timeout_seconds": chaosOriginTimeout})
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, resp.status, "register the API: %s", resp.body)
}

// balancer spreads new connections over the replicas in turn, as a load
// balancer in front of them would, and passes a replica that refuses one
// (killed, or not started yet) for the other.
type balancer struct {
	slots [2]atomic.Pointer[server]
	next  atomic.Uint64
	// client is for ordinary requests; stream has no timeout, for
	// server-sent events.
	client, stream *http.Client
}

func newBalancer(t *testing.T, ca *devca.CA) *balancer {
	lb := &balancer{}
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: publicHost, MinVersion: tls.VersionTLS12},
		// HTTP/1.1, so that connections, and with them requests, spread.
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConnsPerHost: 32,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			first := lb.next.Add(1)
			var err error
			for i := range uint64(len(lb.slots)) {
				s := lb.slots[(first+i)%uint64(len(lb.slots))].Load()
				var c net.Conn
				if c, err = dialer.DialContext(ctx, network, "127.0.0.1:"+s.port); err == nil {
					return c, nil
				}
			}
			return nil, err
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	lb.client = &http.Client{Transport: tr, Timeout: 20 * time.Second, CheckRedirect: noRedirect}
	lb.stream = &http.Client{Transport: tr, CheckRedirect: noRedirect}
	return lb
}

// do sends req and reads the whole answer.
func (lb *balancer) do(req *http.Request) (*response, error) {
	resp, err := lb.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// chaosOrigin is the Company's origin. An approved call (one with an
// Idempotency-Key) performs the exchange at once, once per key, and only
// then waits out a stall; a proposal and a read wait out the stall first.
// It answers a key it has seen with the answer it gave.
type chaosOrigin struct {
	url string

	mu    sync.Mutex
	stall chan struct{} // non-nil while stalled; closed when it answers again
	// performed holds each order's exchanges by Idempotency-Key.
	performed map[string]map[string]string
	reads     map[string]int // GET path -> times answered or held
}

func startChaosOrigin(t *testing.T, ca *devca.CA) *chaosOrigin {
	o := &chaosOrigin{performed: map[string]map[string]string{}, reads: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", o.read)
	mux.HandleFunc("POST /orders/{id}/exchanges", o.exchange)
	srv := peers.Start(t, ca, mux)
	// Registered first, so it runs after the server's Close: nothing stays
	// held when the test ends.
	t.Cleanup(func() { o.setStall(false) })
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	o.url = "https://localhost:" + port
	return o
}

// setStall stops answering (on) or answers again, the held requests too.
func (o *chaosOrigin) setStall(on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case on && o.stall == nil:
		o.stall = make(chan struct{})
	case !on && o.stall != nil:
		close(o.stall)
		o.stall = nil
	}
}

// wait holds r while the origin is stalled; false when the platform gave
// up on it meanwhile.
func (o *chaosOrigin) wait(r *http.Request) bool {
	o.mu.Lock()
	ch := o.stall
	o.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (o *chaosOrigin) read(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.reads[r.URL.Path]++
	o.mu.Unlock()
	if !o.wait(r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"order_id": %q, "status": "shipped"}`, r.PathValue("id"))
}

func (o *chaosOrigin) exchange(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id, key := r.PathValue("id"), r.Header.Get("Idempotency-Key")
	if key == "" {
		if !o.wait(r) {
			return
		}
		w.Header().Set("Content-Type", "application/poppy-proposal+json")
		_, _ = fmt.Fprintf(w, `{"action_key": "exchange %s", "summary": "Exchange the jacket in order %s.",
			"terms": {"order_id": %q, "replacement_sku": "stormline-insulated-m"}}`, id, id, id)
		return
	}
	o.mu.Lock()
	keys := o.performed[id]
	if keys == nil {
		keys = map[string]string{}
		o.performed[id] = keys
	}
	answer, ok := keys[key]
	if !ok {
		answer = fmt.Sprintf(`{"exchange_id": "ex_%s_%d"}`, id, len(keys)+1)
		keys[key] = answer
	}
	o.mu.Unlock()
	if !o.wait(r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

// exchanges returns the answers the origin gave order id's exchanges, by
// Idempotency-Key: one per time the action was performed.
func (o *chaosOrigin) exchanges(id string) map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]string{}
	for k, v := range o.performed[id] {
		out[k] = v
	}
	return out
}

// readsOf returns how many reads of path reached the origin.
func (o *chaosOrigin) readsOf(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reads[path]
}

// performedOrders returns the orders whose exchange the origin performed.
func (o *chaosOrigin) performedOrders() map[string]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]bool{}
	for id, keys := range o.performed {
		if len(keys) > 0 {
			out[id] = true
		}
	}
	return out
}
