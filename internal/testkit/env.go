package testkit

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// PublicHost is the platform's host name in tests.
const PublicHost = "poppyhost.test"

// AdminToken is the bootstrap operator token in tests.
const AdminToken = "test-admin-token-0123456789"

// Env is a running platform on its own database.
type Env struct {
	Pool     *pgxpool.Pool
	Platform *platform.Platform
	CA       *devca.CA
	// Site serves every host name on one port: its Client reaches them
	// over HTTPS.
	*peers.Site
	// URLs derives Company URLs the way the server does.
	URLs tenant.URLs
	// Hosts resolves the test's host names (its Personal Agents) for the
	// platform's outbound fetches.
	Hosts *peers.Hosts
	// Ops is the operations listener's base URL (plain HTTP on loopback),
	// where /healthz, /readyz and /metrics answer.
	Ops string
}

// StartAgent starts a test Personal Agent on host (default agent.test)
// that the platform can fetch.
func (e *Env) StartAgent(t testing.TB, host string) *peers.Agent {
	t.Helper()
	a := peers.StartAgent(t, e.CA, peers.AgentOptions{Host: host})
	e.Hosts.Add(a.Host)
	return a
}

// Setup starts the platform over HTTPS on a fresh database.
func Setup(t testing.TB) *Env {
	t.Helper()
	return SetupWith(t, Options{})
}

// Options change what SetupWith starts.
type Options struct {
	// Logs, when set, gets the platform's log as JSON lines at LogLevel;
	// otherwise warnings and errors go to the test log.
	Logs     io.Writer
	LogLevel slog.Level
	// Bodies bounds slow request bodies (platform.Options.Bodies).
	Bodies httpx.BodyTimeouts
	// Platform, when set, changes the platform's options before it is
	// built.
	Platform func(*platform.Options)
	// Tracer, when set, sees every statement of the platform's pool
	// (plancheck.Recorder).
	Tracer pgx.QueryTracer
}

// SetupWith is Setup with options.
func SetupWith(t testing.TB, o Options) *Env {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.NewDatabase(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = o.Tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ca, err := devca.New()
	require.NoError(t, err)

	// The public URL names the port the server gets, so listen first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	urls := tenant.URLs{Public: &url.URL{Scheme: "https", Host: PublicHost + ":" + port}}

	hosts := &peers.Hosts{}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.Logs != nil {
		logger = slog.New(slog.NewJSONHandler(o.Logs, &slog.HandlerOptions{Level: o.LogLevel}))
	}
	opts := platform.Options{
		Pool:       pool,
		Logger:     logger,
		Bodies:     o.Bodies,
		URLs:       urls,
		AdminToken: AdminToken,
		Sealer:     testdb.Sealer(pool),
		// Test peers listen on loopback under names only Hosts knows.
		Fetch: safehttp.Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: hosts},
	}
	if o.Platform != nil {
		o.Platform(&opts)
	}
	p, err := platform.New(context.Background(), opts)
	require.NoError(t, err)

	t.Cleanup(p.Listener.Start(context.Background()))
	t.Cleanup(p.Replicas.Start(context.Background()))
	t.Cleanup(p.Overload.Start(context.Background()))
	ops := httptest.NewServer(p.OpsHandler())
	t.Cleanup(ops.Close)

	return &Env{
		Pool: pool, Platform: p, CA: ca, URLs: urls, Hosts: hosts, Ops: ops.URL,
		Site: peers.ServeSite(t, ca, ln, p.Handler()),
	}
}

// Probe sends GET path to the operations listener, as a probe or a
// metrics scraper does.
func (e *Env) Probe(t testing.TB, path string) *peers.Response {
	t.Helper()
	return peers.Send(t, http.DefaultClient, peers.NewRequest(t, http.MethodGet, e.Ops+path, nil))
}

// testWriter sends server logs to the test log, shown only on failure.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// HTTP1Client reaches every host name on the test server over HTTPS
// with HTTP/1.1 only, as Client does over HTTP/2.
func (e *Env) HTTP1Client(t testing.TB) *http.Client {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", e.Port)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.CA.Pool(), MinVersion: tls.VersionTLS12},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// PublicURL returns the https URL of path on the platform's own host.
func (e *Env) PublicURL(path string) string { return e.URL(PublicHost, path) }

// Admin sends a request to the admin API with the bootstrap token.
func (e *Env) Admin(t testing.TB, method, path string, body any) *peers.Response {
	t.Helper()
	return e.Do(t, method, e.PublicURL(path), body, "Authorization", "Bearer "+AdminToken)
}

// CreateCompany creates a Company through the admin API and fails the test
// unless it answers 201.
func (e *Env) CreateCompany(t testing.TB, body any) map[string]any {
	t.Helper()
	resp := e.Admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.Status, "create company: %s", resp.Body)
	return resp.JSON(t)
}

// StartOrigin starts a Company origin on host (default origin.test) that
// the platform can reach. base is the Company's {PUBLIC_URL}/t/{slug},
// whose /oauth/jwks.json it fetches through e.Client; identifier is the iss
// to expect.
func (e *Env) StartOrigin(t testing.TB, host, base, identifier string) *peers.Origin {
	t.Helper()
	o := peers.StartOrigin(t, e.CA, peers.OriginOptions{
		Host:    host,
		Issuer:  identifier,
		JWKSURL: strings.TrimSuffix(base, "/") + "/oauth/jwks.json",
		Client:  e.Client,
	})
	e.Hosts.Add(o.Host)
	return o
}
