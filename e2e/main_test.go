// Package e2e holds black-box tests of the built binaries: TestMain builds
// cmd/server, cmd/migrate, cmd/demo-origin and cmd/poppy-agent with `go build`, and the
// tests run them as separate processes against real PostgreSQL, talking to
// them only over HTTPS, signals and the database.
package e2e

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
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/subproc"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

const (
	publicHost = "poppyhost.test"
	// publicURL has no port: clients reach the replicas as a load balancer
	// on 443 would, and the test dials each replica's own port.
	publicURL  = "https://" + publicHost
	adminToken = "e2e-admin-token-0123456789"
)

// bins holds the paths of the built binaries; buildErr fails every test.
var (
	serverBin, migrateBin, demoOriginBin, poppyAgentBin string
	buildErr                                            error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "poppyhost-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	serverBin = filepath.Join(dir, "server")
	migrateBin = filepath.Join(dir, "migrate")
	demoOriginBin = filepath.Join(dir, "demo-origin")
	poppyAgentBin = filepath.Join(dir, "poppy-agent")
	for out, pkg := range map[string]string{serverBin: "./cmd/server", migrateBin: "./cmd/migrate",
		demoOriginBin: "./cmd/demo-origin", poppyAgentBin: "./cmd/poppy-agent"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = ".." // the module root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
			break
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireBuilt fails the test when the binaries did not build.
func requireBuilt(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	port, err := subproc.FreePort()
	require.NoError(t, err)
	return port
}

// testKEKs is the key-encryption key of every server of the run: those
// on one database must share it.
var testKEKs = sealing.NewKEK("e2e")

// migrateUp runs the built `migrate up` on dbURL.
func migrateUp(t *testing.T, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, migrateBin, "up")
	cmd.Env = subproc.Env(map[string]string{"POPPYHOST_DATABASE_URL": dbURL})
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "migrate up: %s", out)
	require.Contains(t, string(out), "is up to date")
}

// server is one running process of the built server binary.
type server struct {
	name string
	port string
	// opsPort is the operations listener's: /healthz, /readyz and
	// /metrics over plain HTTP.
	opsPort string
	cmd     *exec.Cmd
	stderr  *peers.SyncBuffer
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, set before done closes

	// client dials this replica whatever the URL's host, and trusts the
	// dev CA for poppyhost.test.
	client *http.Client
}

// startServer starts the server binary on a fresh port with the dev CA in
// caDir, killed when the test ends; its stderr is printed if the test fails.
func startServer(t *testing.T, name, dbURL, caDir string, ca *devca.CA) *server {
	t.Helper()
	return startServerEnv(t, name, dbURL, caDir, ca, nil)
}

// startServerEnv is startServer with more environment variables.
func startServerEnv(t *testing.T, name, dbURL, caDir string, ca *devca.CA, extra map[string]string) *server {
	t.Helper()
	s := &server{name: name, port: freePort(t), opsPort: freePort(t), stderr: &peers.SyncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(serverBin)
	env := map[string]string{
		"POPPYHOST_PUBLIC_URL":          publicURL,
		"POPPYHOST_LISTEN_ADDR":         "127.0.0.1:" + s.port,
		"POPPYHOST_OPS_ADDR":            "127.0.0.1:" + s.opsPort,
		"POPPYHOST_DATABASE_URL":        dbURL,
		"POPPYHOST_DEV_CA_DIR":          caDir,
		"POPPYHOST_ADMIN_TOKEN":         adminToken,
		"POPPYHOST_KEKS":                testKEKs,
		"POPPYHOST_ALLOW_PRIVATE_FETCH": "true",
		"POPPYHOST_SHUTDOWN_TIMEOUT":    "15s",
		// A loaded test machine must not shed the tests' requests;
		// shedding has its own tests (internal/overload, internal/platform).
		"POPPYHOST_OVERLOAD_DELAY": "0s",
		// The test Personal Agent's certificate comes from the dev CA,
		// which a server with POPPYHOST_DEV_CA_DIR trusts for fetches too.
	}
	maps.Copy(env, extra)
	s.cmd.Env = subproc.Env(env)
	s.cmd.Stdout = s.stderr
	s.cmd.Stderr = s.stderr
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
			t.Logf("---- %s (port %s) output ----\n%s", s.name, s.port, s.stderr.String())
		}
	})

	addr := "127.0.0.1:" + s.port
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), ServerName: publicHost, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	s.client = &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return s
}

func (s *server) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// probe sends GET path to the operations listener on a new connection (as
// a load balancer's health check does) and returns the status, or 0 when
// no connection was made.
func (s *server) probe(path string) int {
	resp, err := s.probeGet(path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// probeGet sends GET path to the operations listener on a new connection.
func (s *server) probeGet(path string) (*http.Response, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	return c.Get("http://" + net.JoinHostPort("127.0.0.1", s.opsPort) + path)
}

// waitReady polls /readyz until it answers 200.
func (s *server) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if s.probe("/readyz") == http.StatusOK {
			return
		}
		if !s.running() {
			t.Fatalf("%s exited before it was ready: %v", s.name, s.err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s", s.name, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// response is a finished exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the "error" member of a JSON error body.
func (r *response) errorCode() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

// do sends req to this replica and reads the whole response.
func (s *server) do(t *testing.T, req *http.Request) *response {
	t.Helper()
	resp, err := s.client.Do(req)
	require.NoError(t, err, "%s %s on %s", req.Method, req.URL, s.name)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &response{status: resp.StatusCode, header: resp.Header, body: body}
}

// admin sends an admin API request (body as JSON unless nil) to this
// replica.
func (s *server) admin(t *testing.T, method, path string, body any) *response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, publicURL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return s.do(t, req)
}

// terminate sends SIGTERM.
func (s *server) terminate(t *testing.T) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
}

// waitExit waits for the process to exit and returns Wait's error.
func (s *server) waitExit(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(within):
		t.Fatalf("%s still running %s after SIGTERM", s.name, within)
		return nil
	}
}

// companyBody is the admin API body of a Company with feedback on.
func companyBody(slug string) map[string]any {
	return map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": slug, "domain": slug + ".example"},
		"feedback":     map[string]any{"enabled": true},
	}
}
