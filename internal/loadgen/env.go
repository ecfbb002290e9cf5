package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/subproc"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The platform's public host and the Company the load runs against. The
// client dials the replicas whatever a URL's host, as a load balancer
// would be dialled.
const (
	publicURL  = "https://poppyhost.test"
	slug       = "loadgen"
	domain     = "loadgen.example"
	issuer     = publicURL + "/t/" + slug
	apiName    = "bench"
	toolName   = "search"
	adminToken = "loadgen-admin-token-0123456789"
	scopeRead  = "orders:read"
)

// Setup says what to start.
type Setup struct {
	// ServerBin and MigrateBin are the built cmd/server and cmd/migrate.
	ServerBin, MigrateBin string
	// DatabaseURL is an empty database the servers may use.
	DatabaseURL string
	// Replicas is how many server processes share the database [1].
	Replicas int
	// Output receives the servers' logs; nil discards them.
	Output io.Writer
	// ServerEnv is more configuration for every server, as environment
	// variables (POPPYHOST_OVERLOAD_DELAY, say); it may not replace what
	// the run itself sets.
	ServerEnv map[string]string
}

// env is the running platform: its processes, the origin behind it, the
// Personal Agent and the HTTP client that reaches the replicas.
type env struct {
	ca      *devca.CA
	servers []*exec.Cmd
	addrs   []string // each replica's 127.0.0.1:port
	// opsAddrs are the replicas' operations listeners, in the same order.
	opsAddrs []string
	client   *http.Client
	origin   *http.Server
	// originURL is the origin's base URL, https://localhost:{port}.
	originURL string
	agent     *agent
	cleanup   []func()
}

// start migrates the database and starts the replicas, the origin and the
// agent, and configures the Company. close stops them.
func start(ctx context.Context, s Setup) (_ *env, err error) {
	if s.Replicas < 1 {
		s.Replicas = 1
	}
	if s.Output == nil {
		s.Output = io.Discard
	}
	e := &env{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	caDir, err := os.MkdirTemp("", "poppyhost-loadgen-ca")
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, func() { os.RemoveAll(caDir) })
	if e.ca, err = devca.Load(caDir); err != nil {
		return nil, err
	}
	mig := exec.CommandContext(ctx, s.MigrateBin, "up")
	mig.Env = subproc.Env(map[string]string{"POPPYHOST_DATABASE_URL": s.DatabaseURL})
	if out, err := mig.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("migrate up: %w: %s", err, out)
	}
	out := &lockedWriter{w: s.Output}
	// One key-encryption key for the replicas, which share the database.
	keks := sealing.NewKEK("loadgen")
	for range s.Replicas {
		port, err := subproc.FreePort()
		if err != nil {
			return nil, err
		}
		opsPort, err := subproc.FreePort()
		if err != nil {
			return nil, err
		}
		addr, opsAddr := "127.0.0.1:"+port, "127.0.0.1:"+opsPort
		cmd := exec.Command(s.ServerBin)
		settings := maps.Clone(s.ServerEnv)
		if settings == nil {
			settings = map[string]string{}
		}
		maps.Copy(settings, map[string]string{
			"POPPYHOST_PUBLIC_URL":          publicURL,
			"POPPYHOST_LISTEN_ADDR":         addr,
			"POPPYHOST_OPS_ADDR":            opsAddr,
			"POPPYHOST_DATABASE_URL":        s.DatabaseURL,
			"POPPYHOST_DEV_CA_DIR":          caDir,
			"POPPYHOST_ADMIN_TOKEN":         adminToken,
			"POPPYHOST_KEKS":                keks,
			"POPPYHOST_ALLOW_PRIVATE_FETCH": "true",
			// Each User signs in from an address of its own (signIn), as
			// a load balancer on this host would say.
			"POPPYHOST_TRUSTED_PROXIES": "127.0.0.1/32",
		})
		cmd.Env = subproc.Env(settings)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		e.servers = append(e.servers, cmd)
		e.addrs = append(e.addrs, addr)
		e.opsAddrs = append(e.opsAddrs, opsAddr)
	}
	e.client = e.newClient()
	for _, addr := range e.opsAddrs {
		if err := e.waitReady(ctx, addr, time.Minute); err != nil {
			return nil, err
		}
	}
	if err := e.startOrigin(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{TLSConfig: e.ca.ServerTLSConfig(), ReadHeaderTimeout: 10 * time.Second}
	if e.agent, err = startAgent(ln, srv); err != nil {
		ln.Close()
		return nil, err
	}
	e.cleanup = append(e.cleanup, func() { _ = srv.Close() })
	return e, e.configure(ctx)
}

// close stops the servers (SIGTERM, then a kill after 15 s) and the rest.
func (e *env) close() {
	for _, cmd := range e.servers {
		_ = cmd.Process.Signal(os.Interrupt)
	}
	for _, cmd := range e.servers {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

// pids are the server processes' IDs.
func (e *env) pids() []int {
	var out []int
	for _, cmd := range e.servers {
		out = append(out, cmd.Process.Pid)
	}
	return out
}

// newClient returns the client of the load: HTTP/1.1 with keep-alive, so
// that connections (and with them requests) spread over the replicas in
// turn, trusting the dev CA.
func (e *env) newClient() *http.Client {
	var next atomic.Uint64
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: e.ca.Pool(), MinVersion: tls.VersionTLS12},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // no HTTP/2
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := e.addrs[next.Add(1)%uint64(len(e.addrs))]
			return dialer.DialContext(ctx, network, addr)
		},
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// waitReady polls /readyz on one replica's operations listener (plain
// HTTP) until it answers 200.
func (e *env) waitReady(ctx context.Context, opsAddr string, within time.Duration) error {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get("http://" + opsAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server with operations listener %s is not ready after %s (%v)", opsAddr, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startOrigin serves the Company's API and tool: every call is answered
// at once with a small JSON body, so the figures are the platform's.
func (e *env) startOrigin() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	body := []byte(`{"id":"ord_1","status":"shipped","items":[{"sku":"JKT-M","quantity":1}]}`)
	e.origin = &http.Server{TLSConfig: e.ca.ServerTLSConfig(), ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		})}
	go func() { _ = e.origin.ServeTLS(ln, "", "") }()
	e.cleanup = append(e.cleanup, func() { _ = e.origin.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	e.originURL = "https://localhost:" + port
	return nil
}

// configure creates the Company with limits the load does not reach, and
// registers the API and the tool.
func (e *env) configure(ctx context.Context) error {
	s := tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "Load Generator Outfitters", Domain: domain}
	s.Auth.Scopes = map[string]string{scopeRead: "See your orders"}
	s.RateLimits = tenant.RateLimits{PerAgent: 1_000_000, PerSession: 1_000_000, PerAddress: 1_000_000}
	s.Auth.TokenLifetimes.AccessSeconds = 3600 // longer than any run
	s.MCP.SignedOut = true
	s.MCP.Description = "Catalog search"
	company, err := json.Marshal(struct {
		Slug string `json:"slug"`
		tenant.Settings
	}{slug, s})
	if err != nil {
		return err
	}
	if err := e.admin(ctx, http.MethodPost, "/admin/v1/companies", json.RawMessage(company), nil); err != nil {
		return err
	}
	oauth := map[string]any{"type": "oauth2", "flows": map[string]any{"authorizationCode": map[string]any{
		"authorizationUrl": "https://" + domain + "/authorize", "tokenUrl": "https://" + domain + "/token",
		"scopes": map[string]string{scopeRead: "See your orders"}}}}
	ok := map[string]any{"200": map[string]any{"description": "OK"}}
	api := map[string]any{"origin": e.originURL + "/v1", "description": "Orders", "timeout_seconds": 10,
		"openapi": map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "Orders", "version": "1"},
			"components": map[string]any{"securitySchemes": map[string]any{"shop": oauth}},
			"security":   []any{map[string]any{"shop": []string{scopeRead}}},
			"paths": map[string]any{
				"/products": map[string]any{"get": map[string]any{"security": []any{map[string]any{}}, "responses": ok}},
				"/orders/{id}": map[string]any{"get": map[string]any{"responses": ok, "parameters": []any{map[string]any{
					"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}}}},
			}}}
	if err := e.admin(ctx, http.MethodPut, "/admin/v1/companies/"+slug+"/apis/"+apiName, api, nil); err != nil {
		return err
	}
	tool := map[string]any{"title": "Search", "description": "Searches the catalog.", "scopes": []string{},
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}},
		"annotations":  map[string]any{"readOnlyHint": true}, "url": e.originURL + "/tools/search", "timeout_seconds": 10}
	return e.admin(ctx, http.MethodPut, "/admin/v1/companies/"+slug+"/tools/"+toolName, tool, nil)
}

// admin sends an operator request with a JSON body and decodes a 2xx
// answer into out (when not nil).
func (e *env) admin(ctx context.Context, method, path string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, publicURL+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	return e.doJSON(req, out)
}

// doJSON sends req and decodes a 2xx JSON answer into out (when not nil);
// another status is an error.
func (e *env) doJSON(req *http.Request, out any) error {
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// lockedWriter serialises the servers' writes to one output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
