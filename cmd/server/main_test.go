package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

const testToken = "server-test-admin-token"

// testKEKs is the KEK the test servers seal secrets with.
var testKEKs = sealing.NewKEK("test-1")

type server struct {
	addr   string
	ops    string
	client *http.Client
	logs   *peers.SyncBuffer
	stop   context.CancelFunc
	done   chan error
}

// start runs the real server in-process with settings, on a free port.
func start(t *testing.T, settings map[string]string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{logs: &peers.SyncBuffer{}, stop: cancel, done: make(chan error, 1)}
	listening := make(chan [2]net.Addr, 1)
	if _, ok := settings["POPPYHOST_OVERLOAD_DELAY"]; !ok {
		// A loaded test machine must not shed the tests' requests.
		settings["POPPYHOST_OVERLOAD_DELAY"] = "0s"
	}
	go func() {
		s.done <- run(ctx, runEnv{
			args: []string{"--listen-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0"}, getenv: func(k string) string { return settings[k] },
			stdout: io.Discard, stderr: s.logs,
			onListen: func(a, ops net.Addr) { listening <- [2]net.Addr{a, ops} },
		})
	}()
	select {
	case a := <-listening:
		s.addr, s.ops = a[0].String(), a[1].String()
	case err := <-s.done:
		t.Fatalf("server did not start: %v\n%s", err, s.logs)
	case <-time.After(60 * time.Second):
		t.Fatal("server did not start in time")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	pool := x509.NewCertPool()
	if dir := settings["POPPYHOST_DEV_CA_DIR"]; dir != "" {
		pem, err := os.ReadFile(filepath.Join(dir, "dev-ca.pem"))
		require.NoError(t, err)
		pool.AppendCertsFromPEM(pem)
	}
	s.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, s.addr)
		},
	}}
	return s
}

func (s *server) do(t *testing.T, method, url, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// probe sends GET path to the operations listener.
func (s *server) probe(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.ops + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func tlsSettings(t *testing.T, dbURL string) map[string]string {
	return map[string]string{
		"POPPYHOST_PUBLIC_URL":   "https://poppyhost.test",
		"POPPYHOST_DATABASE_URL": dbURL,
		"POPPYHOST_DEV_CA_DIR":   t.TempDir(),
		"POPPYHOST_ADMIN_TOKEN":  testToken,
		"POPPYHOST_KEKS":         testKEKs,
	}
}

func TestServes(t *testing.T) {
	t.Parallel()
	settings := tlsSettings(t, testdb.NewDatabase(t))
	settings["POPPYHOST_OVERLOAD_DELAY"] = "250ms"
	s := start(t, settings)

	code, body := s.probe(t, "/healthz")
	require.Equal(t, 200, code, body)
	code, body = s.probe(t, "/readyz")
	require.Equal(t, 200, code, body)
	// Not on the public listener, under any host.
	for _, u := range []string{"https://poppyhost.test/healthz", "https://poppyhost.test/readyz", "https://poppyhost.test/metrics",
		"https://127.0.0.1/metrics"} {
		code, _, body = s.do(t, "GET", u, "")
		require.Equal(t, 404, code, "%s: %s", u, body)
	}

	code, _, body = s.do(t, "POST", "https://poppyhost.test/admin/v1/companies",
		`{"slug":"shop","organization":{"name":"Shop","domain":"shop.example"}}`, "Authorization", "Bearer "+testToken)
	require.Equal(t, 201, code, body)
	code, hdr, body := s.do(t, "GET", "https://shop.example/.well-known/poppy.json", "")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"domain":"shop.example"`)
	require.NotEmpty(t, hdr.Get("X-Request-ID"))

	code, body = s.probe(t, "/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, `poppyhost_http_requests_total{method="GET",route="/.well-known/poppy.json",status="200"} 1`)
	require.Contains(t, body, `poppyhost_http_request_duration_seconds_bucket`)
	require.Contains(t, body, `pgxpool_`)
	// The client keeps its connections (one per host it asked): the
	// public listener counts them open.
	open := regexp.MustCompile(`(?m)^poppyhost_http_connections_open (\d+)$`).FindStringSubmatch(body)
	require.NotNil(t, open, "the open connections are exported")
	n, err := strconv.Atoi(open[1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)

	// Log lines are JSON, carry the request ID, and never the admin token.
	logs := s.logs.String()
	require.NotContains(t, logs, testToken)
	require.NotContains(t, logs, "s3cret")
	var sawRequest bool
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		if m["msg"] == "request" {
			sawRequest = true
			require.NotEmpty(t, m["request_id"])
		}
	}
	require.True(t, sawRequest)
	// The shedding runs, with the delay configured (internal/overload).
	require.Regexp(t, `"msg":"overload: [^"]*","delay":250000000`, logs)
}

// TestDrains stops the server while a request is still arriving: the
// request completes and run returns cleanly.
func TestDrains(t *testing.T) {
	t.Parallel()
	s := start(t, tlsSettings(t, testdb.NewDatabase(t)))
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", "https://poppyhost.test/admin/v1/companies", pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := s.client.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		resp.Body.Close()
		res <- result{code: resp.StatusCode}
	}()
	_, err = pw.Write([]byte(`{"slug":"slow","organization":`))
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)

	s.stop()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-s.done:
		t.Fatalf("server stopped with a request in flight: %v", err)
	default:
	}
	_, err = pw.Write([]byte(`{"name":"Slow","domain":"slow.example"}}`))
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, 201, r.code)
	select {
	case err := <-s.done:
		require.NoError(t, err)
		s.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop after draining")
	}
}

func TestRefusesUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	settings := tlsSettings(t, testdb.NewEmptyDatabase(t))
	err := run(context.Background(), runEnv{args: []string{"--listen-addr", "127.0.0.1:0"},
		getenv: func(k string) string { return settings[k] }, stdout: io.Discard, stderr: io.Discard})
	require.Error(t, err)
	require.Contains(t, err.Error(), "migrate up")
}

// TestRefusesWrongKEK: once a secret is sealed, a server given no KEK, or
// KEKs that do not open the data keys, refuses to start; the right KEK
// among others starts it.
func TestRefusesWrongKEK(t *testing.T) {
	t.Parallel()
	settings := tlsSettings(t, testdb.NewDatabase(t))
	s := start(t, settings)
	code, _, body := s.do(t, "POST", "https://poppyhost.test/admin/v1/companies",
		`{"slug":"shop","organization":{"name":"Shop","domain":"shop.example"}}`, "Authorization", "Bearer "+testToken)
	require.Equal(t, 201, code, body)
	code, _, body = s.do(t, "GET", "https://poppyhost.test/t/shop/oauth/jwks.json", "")
	require.Equal(t, 200, code, body)
	s.stop()
	<-s.done
	s.done <- nil // for the cleanup

	runWith := func(keks string) error {
		settings["POPPYHOST_KEKS"] = keks
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		return run(ctx, runEnv{args: []string{"--listen-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0"},
			getenv: func(k string) string { return settings[k] }, stdout: io.Discard, stderr: io.Discard,
			onListen: func(net.Addr, net.Addr) { cancel() }})
	}
	require.ErrorContains(t, runWith(""), "POPPYHOST_KEKS is required")
	require.ErrorContains(t, runWith("test-1:"+sealing.NewKEK("x")[2:]), "do not open the stored data keys")
	require.ErrorContains(t, runWith(sealing.NewKEK("test-2")), `sealed under KEK "test-1", which is not configured`)
	require.NoError(t, runWith(testKEKs+","+sealing.NewKEK("test-2")))
}

func TestRefusesBadConfig(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	err := run(context.Background(), runEnv{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: &stderr})
	require.Error(t, err)
	require.Contains(t, err.Error(), "POPPYHOST_PUBLIC_URL")
}

// TestBehindProxy serves plain HTTP and honours X-Forwarded-Host only from
// trusted proxies.
func TestBehindProxy(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewDatabase(t)
	for _, tc := range []struct {
		trusted          string
		wantCreate, want int
	}{{"127.0.0.1/32", 201, 200}, {"10.0.0.0/8", 404, 404}} {
		s := start(t, map[string]string{
			"POPPYHOST_PUBLIC_URL": "https://poppyhost.test", "POPPYHOST_DATABASE_URL": dbURL,
			"POPPYHOST_PLAIN_HTTP": "true", "POPPYHOST_TRUSTED_PROXIES": tc.trusted, "POPPYHOST_ADMIN_TOKEN": testToken,
			"POPPYHOST_KEKS": testKEKs,
		})
		code, _, body := s.do(t, "POST", "http://internal/admin/v1/companies",
			fmt.Sprintf(`{"slug":"p%d","organization":{"name":"P","domain":"p%d.example"}}`, tc.want, tc.want),
			"Authorization", "Bearer "+testToken, "X-Forwarded-Host", "poppyhost.test")
		require.Equal(t, tc.wantCreate, code, body)
		code, _, body = s.do(t, "GET", "http://internal/.well-known/poppy.json", "",
			"X-Forwarded-Host", fmt.Sprintf("p%d.example", tc.want))
		require.Equal(t, tc.want, code, body)
		s.stop()
	}
}

// TestBoundsConnections: with POPPYHOST_MAX_CONNECTIONS=2 and two
// connections open, a third is not served (its TLS handshake gets no
// answer) until one of the two closes; then it is.
func TestBoundsConnections(t *testing.T) {
	t.Parallel()
	settings := tlsSettings(t, testdb.NewDatabase(t))
	settings["POPPYHOST_MAX_CONNECTIONS"] = "2"
	s := start(t, settings)
	pem, err := os.ReadFile(filepath.Join(settings["POPPYHOST_DEV_CA_DIR"], "dev-ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	dial := func(within time.Duration) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: within}
		conn, err := d.Dial("tcp", s.addr)
		if err != nil {
			return nil, err
		}
		require.NoError(t, conn.SetDeadline(time.Now().Add(within)))
		c := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "poppyhost.test"})
		if err := c.Handshake(); err != nil {
			conn.Close()
			return nil, err
		}
		require.NoError(t, conn.SetDeadline(time.Time{}))
		return c, nil
	}
	first, err := dial(30 * time.Second)
	require.NoError(t, err)
	second, err := dial(30 * time.Second)
	require.NoError(t, err)
	defer second.Close()

	_, err = dial(time.Second)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "a third connection waits to be accepted")
	require.True(t, ne.Timeout(), "%v", err)

	first.Close()
	third, err := dial(30 * time.Second)
	require.NoError(t, err, "one closed: the next is accepted")
	third.Close()
}
