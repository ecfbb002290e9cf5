package conversations_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// publicHost is the platform's host name in these tests.
const publicHost = "poppyhost.test"

// adminToken is the operator token of the admin API in these tests.
const adminToken = "test-admin-token-0123456789"

// rig serves conversations over HTTPS on a database of the test's own, as
// the platform mounts them: the Personal Agent side at
// {PUBLIC_URL}/t/{slug}/poppy/conversations behind the real Session check
// (the body read ahead, then sessions.Manager) with access tokens checked
// by bearer, and the Company side under /company/v1 behind a Company API
// key. Beside them: the issuer that signs Personal Agents in and the
// Companies' key sets (/t/{slug}/oauth/...), and the admin API that makes
// Companies, accounts and API keys. Operations in conversations need the
// gateway and the engine: their tests are the platform's
// (internal/platform, conversations_operations_*_wiring_test.go).
type rig struct {
	*peers.Site
	Pool *pgxpool.Pool
	CA   *devca.CA
	// Hosts resolves the test's peers for the rig's outbound fetches.
	Hosts *peers.Hosts
	URLs  tenant.URLs
	// Hub wakes the readers of the replica the site serves.
	Hub *conversations.Hub
	// Jobs is that replica's River client, with the delivery workers; it
	// works jobs once started (startJobs).
	Jobs *jobs.Client
	// Cached: the replicas find Companies through tenant.Cache, as the
	// platform does, rather than reading them for every request
	// (newBenchRig).
	Cached bool
	// Commits notes when the pool last read the reply of a message's
	// commit, for the wake-up benchmarks (nil on a rig of newRigOn).
	Commits *commitClock
}

// commitClock is a pgx tracer that notes when the reply of a commit that
// sends a notification was read: a COMMIT's, or that of a statement that
// notifies on its own (a message's one statement commits by itself). It
// is the point from which a bare NOTIFY is timed.
type commitClock struct{ last atomic.Int64 }

// notifies marks a statement's context when the statement notifies.
type notifies struct{}

func (*commitClock) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "pg_notify(") {
		return context.WithValue(ctx, notifies{}, true)
	}
	return ctx
}

func (c *commitClock) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil {
		return
	}
	// Inside a transaction the COMMIT that follows is what delivers.
	own := ctx.Value(notifies{}) != nil && conn.PgConn().TxStatus() == 'I'
	if own || data.CommandTag.String() == "COMMIT" {
		c.last.Store(time.Now().UnixNano())
	}
}

// At is when the last such reply was read.
func (c *commitClock) At() time.Time { return time.Unix(0, c.last.Load()) }

// newRig starts the rig, on a pool that notes its commits (Commits).
func newRig(t testing.TB) *rig {
	t.Helper()
	return newCommitsRig(t, false)
}

// newBenchRig is newRig whose replicas find Companies as the platform's
// do, through tenant.Cache: what a benchmark of a request measures. The
// tests' rig reads them for every request, so that a change made through
// one replica is seen by the next request on another without waiting for
// the notification.
func newBenchRig(b *testing.B) *rig {
	b.Helper()
	return newCommitsRig(b, true)
}

func newCommitsRig(t testing.TB, cached bool) *rig {
	t.Helper()
	commits := &commitClock{}
	cfg, err := pgxpool.ParseConfig(testdb.NewDatabase(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = commits
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	r := newRigOn(t, pool, cached)
	r.Commits = commits
	return r
}

// newRigOn starts the rig on pool, a fresh database's; cached as in
// newBenchRig.
func newRigOn(t testing.TB, pool *pgxpool.Pool, cached bool) *rig {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	// The public URL names the port the server gets, so listen first.
	ln := peers.Listen(t)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	r := &rig{Pool: pool, CA: ca, Hosts: &peers.Hosts{}, Cached: cached,
		URLs: tenant.URLs{Public: &url.URL{Scheme: "https", Host: publicHost + ":" + port}}}
	require.NoError(t, tenant.NewStore(r.Pool).EnsureOperatorToken(context.Background(), "test", adminToken))
	h, hub, queue := r.replica(t)
	r.Hub, r.Jobs = hub, queue.Client
	r.Site = peers.ServeSite(t, ca, ln, h)
	return r
}

// replica builds the routes on the rig's database with a hub, River
// client, caches and limits of their own: another replica behind the same
// name each time it is called. Its hub runs until the test ends.
func (r *rig) replica(t testing.TB) (http.Handler, *conversations.Hub, *jobs.Queue) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	now := time.Now
	// Test peers listen on loopback under names only Hosts knows.
	fetch := safehttp.Options{AllowPrivate: true, RootCAs: r.CA.Pool(), Resolver: r.Hosts}
	resolver := agentid.NewResolver(safehttp.New(fetch), agentid.Options{Now: now})
	queue, err := jobs.New(r.Pool, jobs.Options{Logger: logger, Now: now})
	require.NoError(t, err)
	tenants := tenant.NewStore(r.Pool)
	sessionStore := sessions.NewStore(r.Pool)
	keys := signing.NewKeys(r.Pool, testdb.Sealer(r.Pool), signing.Options{Now: now})
	accts := accounts.NewStore(r.Pool, accounts.WithSecrets(keys.Secret))
	limits := httpx.NewLimiter()
	oauth := issuer.New(issuer.Options{
		Pool: r.Pool, Keys: keys, Resolver: resolver, Replays: clientauth.NewPGReplays(r.Pool),
		Accounts: accts, URLs: r.URLs, CompanyForAPIKey: tenants.CompanyForAPIKey, Now: now, Limiter: limits,
	})
	tokens := bearer.New(keys, oauth.Store(), sessionStore, dpop.New(dpop.NewStore(r.Pool), dpop.Options{Now: now}), r.URLs, now)
	listener := notify.New(r.Pool, logger)
	hub := conversations.NewHub(listener)
	var lookup tenant.Lookup = tenants
	if r.Cached {
		cache, err := tenant.NewCache(tenants, listener, tenant.CacheOptions{Now: now})
		require.NoError(t, err)
		lookup = cache
	}
	t.Cleanup(listener.Start(context.Background()))
	delivery := conversations.NewDelivery(conversations.DeliveryOptions{
		Pool: r.Pool, Jobs: queue.Client, Companies: tenants, Keys: keys, Sealer: testdb.Sealer(r.Pool), URLs: r.URLs,
		Client: safehttp.New(fetch), Logger: logger, Now: now,
	})
	delivery.AddWorkers(queue.Workers)
	sess := sessions.NewManager(sessions.NewVerifier(resolver, sessions.VerifierOptions{Now: now}), sessionStore, r.URLs)
	// The Session is verified once the body has arrived, or its first
	// 64 KiB, as the platform does.
	session := func(next http.Handler) http.Handler {
		return httpx.ReadAhead(64 << 10)(sess.Require(limits)(next))
	}
	store := conversations.NewStore(r.Pool, conversations.StoreOptions{Enqueue: delivery, Now: now})
	agents := conversations.NewAgentHandler(store, hub, conversations.AgentOptions{Tokens: tokens,
		Middleware: []func(http.Handler) http.Handler{session}})
	companies := conversations.NewCompanyHandler(store, hub, delivery)
	admin := tenant.NewAdmin(tenants, accts, r.URLs, true)
	keyRoutes := signing.NewHandler(keys, oauth.SecretSignedUntil)

	site := newRouter()
	tenant.AdminAPI(site.With(httpx.RequireText), tenants, admin, admin)
	site.Route("/company/v1", func(cr chi.Router) {
		cr.Use(httpx.RequireText, tenant.RequireAPIKey(tenants))
		companies.CompanyAPI(cr)
	})
	site.Route("/t/{slug}", func(tr chi.Router) {
		tr.Use(tenant.BySlug(lookup), tenant.LimitByAddress(limits))
		keyRoutes.Public(tr)
		oauth.Public(tr)
		agents.Public(tr)
	})
	host := tenant.HostRouter(lookup, publicHost, site, newRouter())
	h := httpx.Instrument(logger, httpx.NewMetrics(prometheus.NewRegistry()),
		conversations.ParkStreams(httpx.PaceBodies(httpx.BodyTimeouts{})(host)))
	return h, hub, queue
}

// newRouter is a router with the platform's common middleware and error
// answers.
func newRouter() *chi.Mux {
	r := chi.NewRouter()
	r.Use(httpx.RecordRoute, httpx.OneAuthorization, middleware.GetHead)
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed(r))
	return r
}

// StartAgent starts a test Personal Agent on host (default agent.test)
// that the rig can fetch.
func (r *rig) StartAgent(t testing.TB, host string) *peers.Agent {
	t.Helper()
	a := peers.StartAgent(t, r.CA, peers.AgentOptions{Host: host})
	r.Hosts.Add(a.Host)
	return a
}

// startWebhook starts a Company Agent's webhook on hooks.test that the
// rig can post to.
func (r *rig) startWebhook(t testing.TB) *peers.Webhook {
	t.Helper()
	h := peers.StartWebhook(t, r.CA, "")
	r.Hosts.Add(h.Host)
	return h
}

// PublicURL returns the https URL of path on the platform's own host.
func (r *rig) PublicURL(path string) string { return r.URL(publicHost, path) }

// Admin sends a request to the admin API with the operator token.
func (r *rig) Admin(t testing.TB, method, path string, body any) *peers.Response {
	t.Helper()
	return r.Do(t, method, r.PublicURL(path), body, "Authorization", "Bearer "+adminToken)
}

// CreateCompany creates a Company through the admin API and fails the test
// unless it answers 201.
func (r *rig) CreateCompany(t testing.TB, body any) map[string]any {
	t.Helper()
	resp := r.Admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.Status, "create company: %s", resp.Body)
	return resp.JSON(t)
}

// startJobs runs the rig's River client until the test ends.
func startJobs(t *testing.T, r *rig) {
	t.Helper()
	require.NoError(t, r.Jobs.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Jobs.Stop(ctx)
	})
}
