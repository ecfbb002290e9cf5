package issuer_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// publicHost is the platform's host name in these tests.
const publicHost = "poppyhost.test"

// adminToken is the operator token of the admin API in these tests.
const adminToken = "test-admin-token-0123456789"

// options change what newEnv serves.
type options struct {
	// Logs, when set, gets the log as JSON lines at LogLevel; otherwise
	// warnings and errors go to the test log.
	Logs     io.Writer
	LogLevel slog.Level
	// PasswordHashes and LoginRates bound sign-ins (zero: defaults).
	PasswordHashes accounts.Limits
	LoginRates     issuer.LoginRates
	// Proxies are the trusted proxies that name the client's address.
	Proxies httpx.Proxies
	// Now is the issuer's clock [time.Now]; the signing keys keep the
	// real one.
	Now func() time.Time
	// Tracer, when set, sees every statement of the database pool.
	Tracer pgx.QueryTracer
	// CachedCompanies has requests find their Company in a tenant.Cache,
	// kept fresh by notifications, as the platform does; otherwise each
	// request reads it.
	CachedCompanies bool
}

// issuerEnv serves the issuer over HTTPS on a fresh database, as the
// platform mounts it under {PUBLIC_URL}/t/{slug} (every Company's grants
// offered), with the Companies' signing keys, the admin API that creates
// Companies, their accounts, API keys and key rotations, the sign-in
// metrics, and poppy.json on the Company domains.
type issuerEnv struct {
	*peers.Site
	Pool     *pgxpool.Pool
	CA       *devca.CA
	URLs     tenant.URLs
	Hosts    *peers.Hosts
	Tenants  *tenant.Store
	Accounts *accounts.Store
	Issuer   *issuer.Server
}

func newEnv(t testing.TB, o options) *issuerEnv {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	cfg, err := pgxpool.ParseConfig(testdb.NewDatabase(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = o.Tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e := &issuerEnv{Pool: pool, CA: ca, Hosts: &peers.Hosts{},
		URLs: tenant.URLs{Public: &url.URL{Scheme: "https", Host: publicHost + ":" + port}}}
	e.Tenants = tenant.NewStore(e.Pool)
	require.NoError(t, e.Tenants.EnsureOperatorToken(context.Background(), "test", adminToken))
	h := e.Handler(t, o)
	e.Site = peers.ServeSite(t, ca, ln, h)
	return e
}

// Handler builds the issuer's routes on e's database with o; newEnv
// serves the first.
func (e *issuerEnv) Handler(t testing.TB, o options) http.Handler {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.Logs != nil {
		logger = slog.New(slog.NewJSONHandler(o.Logs, &slog.HandlerOptions{Level: o.LogLevel}))
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	reg := prometheus.NewRegistry()
	keys := signing.NewKeys(e.Pool, testdb.Sealer(e.Pool), signing.Options{})
	accts := accounts.NewStore(e.Pool, accounts.WithLimits(o.PasswordHashes), accounts.WithMetrics(reg),
		accounts.WithSecrets(keys.Secret))
	limits := httpx.NewLimiter()
	// Test agents listen on loopback under names only Hosts knows.
	fetch := safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: e.CA.Pool(), Resolver: e.Hosts})
	srv := issuer.New(issuer.Options{
		Pool: e.Pool, Keys: keys, Resolver: agentid.NewResolver(fetch, agentid.Options{Now: now}),
		Replays: clientauth.NewPGReplays(e.Pool), Accounts: accts, URLs: e.URLs,
		Proofs: dpop.New(dpop.NewStore(e.Pool), dpop.Options{Now: now,
			Nonces: dpop.NewNonces(keys.Secret, 0, now)}),
		CompanyForAPIKey: e.Tenants.CompanyForAPIKey, Now: now,
		Limiter: limits, LoginRates: o.LoginRates, Metrics: reg,
	})
	if e.Issuer == nil {
		e.Issuer, e.Accounts = srv, accts
	}

	site := newRouter()
	site.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	admin := tenant.NewAdmin(e.Tenants, accts, e.URLs, true)
	keyRoutes := signing.NewHandler(keys, srv.SecretSignedUntil)
	tenant.AdminAPI(site.With(httpx.RequireText), e.Tenants, admin, admin, keyRoutes)
	site.Route("/t/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(e.companies(t, o)), tenant.LimitByAddress(limits))
		keyRoutes.Public(r)
		// Which grants a Company offers is the platform's wiring, tested
		// there.
		srv.Public(r)
	})
	company := newRouter()
	discovery.NewHandler(e.URLs, nil).Domain(company)
	host := tenant.HostRouter(e.Tenants, publicHost, site, company)
	return httpx.Instrument(logger, httpx.NewMetrics(prometheus.NewRegistry()), o.Proxies.Middleware(host))
}

// companies is where requests find their Company: e.Tenants, or with
// o.CachedCompanies a tenant.Cache on it whose listener is connected.
func (e *issuerEnv) companies(t testing.TB, o options) tenant.Lookup {
	t.Helper()
	if !o.CachedCompanies {
		return e.Tenants
	}
	l := notify.New(e.Pool, nil)
	cache, err := tenant.NewCache(e.Tenants, l, tenant.CacheOptions{})
	require.NoError(t, err)
	t.Cleanup(l.Start(context.Background()))
	for !l.Connected() {
		time.Sleep(10 * time.Millisecond)
	}
	return cache
}

// newRouter is a router as the platform builds one.
func newRouter() *chi.Mux {
	r := chi.NewRouter()
	r.Use(httpx.RecordRoute, httpx.OneAuthorization, middleware.GetHead)
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed(r))
	return r
}

// testWriter sends server logs to the test log, shown only on failure.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// StartAgent starts a test Personal Agent on host (default agent.test)
// that the issuer can fetch.
func (e *issuerEnv) StartAgent(t testing.TB, host string) *peers.Agent {
	t.Helper()
	a := peers.StartAgent(t, e.CA, peers.AgentOptions{Host: host})
	e.Hosts.Add(a.Host)
	return a
}

// PublicURL returns the https URL of path on the platform's own host.
func (e *issuerEnv) PublicURL(path string) string { return e.URL(publicHost, path) }

// Admin sends a request to the admin API with the operator token.
func (e *issuerEnv) Admin(t testing.TB, method, path string, body any) *peers.Response {
	t.Helper()
	return e.Do(t, method, e.PublicURL(path), body, "Authorization", "Bearer "+adminToken)
}

// CreateCompany creates a Company through the admin API and fails the test
// unless it answers 201.
func (e *issuerEnv) CreateCompany(t testing.TB, body any) map[string]any {
	t.Helper()
	resp := e.Admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.Status, "create company: %s", resp.Body)
	return resp.JSON(t)
}
