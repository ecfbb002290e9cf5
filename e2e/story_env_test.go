package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/subproc"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// The demo Company of the story tests. Every process of the story reaches
// the others as "localhost" (the only name this machine resolves for
// them), so the platform's public URL is https://localhost:{port}; the
// Company's domain is reached by the Personal Agent and its browser alone,
// through the agent's host map.
const (
	storySlug   = "stormline"
	storyDomain = "stormline.test"
	storyAPI    = "orders"
)

// storyEnv is the demo as dev mode runs it, built from the binaries: the
// server on a fresh database, the demo origin (cmd/demo-origin) and the
// demo Company Agent, seeded through the admin and Company APIs.
type storyEnv struct {
	ca      *devca.CA
	calls   *callCounter // the approved calls that reached the demo origin
	srv     *server
	public  string // https://localhost:{port}
	issuer  string // {public}/t/stormline
	control string // the demo origin's control handler, http://127.0.0.1:{port}
	client  *http.Client
}

// startStory starts and seeds the demo; everything stops when t ends.
func startStory(t *testing.T) *storyEnv {
	t.Helper()
	requireBuilt(t)
	dbURL, caDir := testdb.NewEmptyDatabase(t), t.TempDir()
	migrateUp(t, dbURL)
	ca, err := devca.Load(caDir)
	require.NoError(t, err)
	e := &storyEnv{ca: ca}
	e.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	t.Cleanup(e.client.CloseIdleConnections)

	e.srv = startLocalServer(t, dbURL, caDir, ca)
	e.public = "https://localhost:" + e.srv.port
	e.issuer = e.public + "/t/" + storySlug
	e.srv.waitReady(t, 30*time.Second)

	resp := e.admin(t, http.MethodPost, "/admin/v1/companies", storySettings(t))
	require.Equal(t, http.StatusCreated, resp.status, "create the demo Company: %s", resp.body)
	var key struct {
		Key string `json:"key"`
	}
	resp = e.admin(t, http.MethodPost, "/admin/v1/companies/"+storySlug+"/api-keys", map[string]string{"name": "demo"})
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	require.NoError(t, json.Unmarshal(resp.body, &key))

	e.startOrigin(t, caDir)
	var reg struct {
		API       map[string]any            `json:"api"`
		Tools     map[string]map[string]any `json:"tools"`
		WebOrigin string                    `json:"web_origin"`
	}
	e.controlDo(t, http.MethodGet, "/registration", nil, &reg)
	e.company(t, key.Key, http.MethodPut, "/apis/"+storyAPI, reg.API, nil)
	for name, tool := range reg.Tools {
		e.company(t, key.Key, http.MethodPut, "/tools/"+name, tool, nil)
	}
	var secret struct {
		Secret string `json:"secret"`
	}
	e.company(t, key.Key, http.MethodPost, "/conversations/webhook-secret", nil, &secret)
	hook := e.startCompanyAgent(t, secret.Secret, key.Key)

	resp = e.admin(t, http.MethodPatch, "/admin/v1/companies/"+storySlug, map[string]any{
		"conversations": map[string]any{"agent_webhook": hook},
		"web":           map[string]any{"origin": reg.WebOrigin, "browser_join": true, "landing_path": "/orders"},
		"operations":    map[string]any{"enabled": true, "web": true},
		"mcp":           map[string]any{"signed_out": true, "description": "Stormline's shop: product search, size help, exchanges"},
	})
	require.Equal(t, http.StatusOK, resp.status, "configure the demo Company: %s", resp.body)
	return e
}

// storySettings is Stormline Outfitters as dev mode makes it, with the
// operations extension on (on the website too once it has an origin).
func storySettings(t *testing.T) json.RawMessage {
	t.Helper()
	yes := true
	s := tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "Stormline Outfitters", Domain: storyDomain}
	s.Auth.Scopes = map[string]string{
		"orders:read":  "See your orders, returns, and bookings",
		"orders:write": "Exchange or return items, and change bookings",
	}
	s.Auth.ScopeHints = map[string]tenant.ScopeHint{
		"orders:read":  {Changes: "none", PersonalData: &yes},
		"orders:write": {Changes: "irreversible", PersonalData: &yes},
	}
	s.Operations.Enabled = true
	// The story runs with DPoP-bound tokens (spec 4.5): every signed-in
	// request carries a proof of the agent's DPoP key, with the server
	// nonce the Company hands out (RFC 9449 §8, §9).
	s.Auth.DPoP = tenant.DPoPRequired
	s.Auth.DPoPNonce = true
	raw, err := json.Marshal(struct {
		Slug string `json:"slug"`
		tenant.Settings
	}{storySlug, s})
	require.NoError(t, err)
	return raw
}

// startLocalServer starts the built server with https://localhost:{port}
// as its public URL, killed when the test ends.
func startLocalServer(t *testing.T, dbURL, caDir string, ca *devca.CA) *server {
	t.Helper()
	s := &server{name: "server", port: freePort(t), opsPort: freePort(t), stderr: &peers.SyncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(serverBin)
	s.cmd.Env = subproc.Env(map[string]string{
		"POPPYHOST_PUBLIC_URL":          "https://localhost:" + s.port,
		"POPPYHOST_LISTEN_ADDR":         "127.0.0.1:" + s.port,
		"POPPYHOST_OPS_ADDR":            "127.0.0.1:" + s.opsPort,
		"POPPYHOST_DATABASE_URL":        dbURL,
		"POPPYHOST_DEV_CA_DIR":          caDir,
		"POPPYHOST_ADMIN_TOKEN":         adminToken,
		"POPPYHOST_KEKS":                testKEKs,
		"POPPYHOST_ALLOW_PRIVATE_FETCH": "true",
		"POPPYHOST_OVERLOAD_DELAY":      "0s", // as startServerEnv
	})
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	require.NoError(t, s.cmd.Start())
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		if s.running() {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("---- server (port %s) output ----\n%s", s.port, s.stderr.String())
		}
	})
	// ServerName also names the server for probes of its IP address.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	s.client = &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return s
}

// startOrigin runs the built demo origin on a loopback port with a dev CA
// certificate for localhost, behind the counter, and its control handler
// on another port.
func (e *storyEnv) startOrigin(t *testing.T, caDir string) {
	t.Helper()
	dir := t.TempDir()
	cert, err := e.ca.Issue("localhost")
	require.NoError(t, err)
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	files := map[string][]byte{
		"cert.pem": chain,
		"key.pem":  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"ca.pem":   e.ca.CertPEM(),
	}
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	port, controlPort := freePort(t), freePort(t)
	e.control = "http://127.0.0.1:" + controlPort
	base := e.startCounter(t, "127.0.0.1:"+port)
	cmd := exec.Command(demoOriginBin,
		"-addr", "127.0.0.1:"+port, "-base-url", base,
		"-issuer", e.issuer, "-tls-cert", filepath.Join(dir, "cert.pem"), "-tls-key", filepath.Join(dir, "key.pem"),
		"-control-addr", "127.0.0.1:"+controlPort)
	// The origin fetches the Company's key set from the platform, whose
	// certificate the dev CA issued.
	cmd.Env = subproc.Env(map[string]string{"SSL_CERT_FILE": filepath.Join(dir, "ca.pem")})
	out, done := startProcess(t, "demo origin", cmd)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(e.control + "/registration")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("the demo origin exited: %s", out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "the demo origin did not start: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
}

// startProcess starts cmd with its output in out, killed when the test
// ends, its output logged then if the test failed; done closes when it
// has exited.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) (out *peers.SyncBuffer, done chan struct{}) {
	t.Helper()
	out, done = &peers.SyncBuffer{}, make(chan struct{})
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("---- %s output ----\n%s", name, out.String())
		}
	})
	return out, done
}

// startCompanyAgent serves the demo Company Agent in this process on a
// loopback TLS port and returns its webhook URL.
func (e *storyEnv) startCompanyAgent(t *testing.T, secret, key string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	hook := "https://localhost:" + port + "/poppy/webhook"
	a, err := demoagent.New(demoagent.Options{Secret: secret, APIKey: key, BaseURL: e.public, Client: e.client,
		OrdersAPI: storyAPI, JoinDelay: 100 * time.Millisecond,
		JWKSURL: e.issuer + "/oauth/jwks.json", Issuer: e.issuer, WebhookURL: hook})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /poppy/webhook", a)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(tls.NewListener(ln, e.ca.ServerTLSConfig())) }()
	t.Cleanup(func() {
		a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return hook
}

// admin sends an admin API request with a JSON body (unless nil).
func (e *storyEnv) admin(t *testing.T, method, path string, body any) *response {
	t.Helper()
	return e.send(t, method, e.public+path, adminToken, body)
}

// company sends a Company API request and decodes a 2xx answer into out.
func (e *storyEnv) company(t *testing.T, key, method, path string, body, out any) {
	t.Helper()
	resp := e.send(t, method, e.public+"/company/v1"+path, key, body)
	require.Equal(t, 2, resp.status/100, "%s %s: %d %s", method, path, resp.status, resp.body)
	if out != nil {
		require.NoError(t, json.Unmarshal(resp.body, out))
	}
}

func (e *storyEnv) send(t *testing.T, method, url, token string, body any) *response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, ok := body.(json.RawMessage)
		if !ok {
			var err error
			raw, err = json.Marshal(body)
			require.NoError(t, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.srv.do(t, req)
}

// controlDo calls the demo origin's control handler.
func (e *storyEnv) controlDo(t *testing.T, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body == nil && method == http.MethodPost {
		body = struct{}{}
	}
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.control+path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 2, resp.StatusCode/100, "%s %s: %d %s", method, path, resp.StatusCode, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out))
	}
}

// passwordPrefix starts every password of the story's Users, so a
// transcript can be searched for them.
const passwordPrefix = "story-secret-"

// newUser creates an account of the demo Company, gives it the shop's
// demo orders, and returns its username and password.
func (e *storyEnv) newUser(t *testing.T, name string) (username, password string) {
	t.Helper()
	username, password = name, passwordPrefix+name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)
	resp := e.admin(t, http.MethodPost, "/admin/v1/companies/"+storySlug+"/accounts",
		map[string]string{"username": username, "password": password})
	require.Equal(t, http.StatusCreated, resp.status, "create account: %s", resp.body)
	var acct struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &acct))
	e.controlDo(t, http.MethodPost, "/seed", map[string]string{"account": strconv.FormatInt(acct.ID, 10)}, nil)
	return username, password
}

// operations lists the demo Company's operations as the admin API shows
// them: operation_id -> status.
func (e *storyEnv) operations(t *testing.T) map[string]string {
	t.Helper()
	resp := e.admin(t, http.MethodGet, "/admin/v1/companies/"+storySlug+"/operations", nil)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	var page struct {
		Operations []struct {
			OperationID string `json:"operation_id"`
			Status      string `json:"status"`
		} `json:"operations"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &page))
	out := map[string]string{}
	for _, o := range page.Operations {
		out[o.OperationID] = o.Status
	}
	return out
}

// String is the demo's base URLs, for logs.
func (e *storyEnv) String() string {
	return fmt.Sprintf("platform %s, issuer %s, Company domain %s", e.public, e.issuer, storyDomain)
}
