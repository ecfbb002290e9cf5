package platform

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/pgxpoolprometheus"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/feedback"
	"github.com/poppyhost/poppyhost/internal/gateway"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/mcpserver"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/overload"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/replicas"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/website"
	"github.com/poppyhost/poppyhost/migrations"
)

// Options are what the platform is built from.
type Options struct {
	Pool    *pgxpool.Pool
	Logger  *slog.Logger
	URLs    tenant.URLs
	Proxies httpx.Proxies
	// AdminToken, when set, is stored as an operator token at start.
	AdminToken string
	// Sealer seals the Companies' secrets at rest (internal/sealing);
	// required.
	Sealer *sealing.Sealer
	// Fetch configures outbound fetches of URLs strangers give us.
	Fetch safehttp.Options
	// PasswordHashes bound the Argon2id hashing of sign-ins and password
	// changes (zero fields: defaults, see accounts.Limits).
	PasswordHashes accounts.Limits
	// LoginRates bound sign-in attempts per address and per Company
	// (zero fields: defaults, see issuer.LoginRates).
	LoginRates issuer.LoginRates
	// APIRates bound the admin and Company APIs per operator token and
	// per API key (zero fields: defaults, see tenant.APIRates).
	APIRates tenant.APIRates
	// Replicas times the heartbeat by which replicas count each other to
	// share every rate limit (zero fields: replicas' defaults).
	Replicas replicas.Options
	// Now is the clock [time.Now].
	Now func() time.Time
	// Bodies bounds how slowly request bodies may arrive; zero values
	// mean httpx's defaults (10 s, then 1 KiB/s on average).
	Bodies httpx.BodyTimeouts
	// RequireIfMatch refuses PATCH and PUT of existing admin and Company
	// API resources without If-Match (httpx.RequireIfMatch).
	RequireIfMatch bool
	// AuditRetention is how long audit log entries are kept [90 days].
	AuditRetention time.Duration
	// Overload says when the public listener sheds new requests
	// (overload.Options.Delay; zero: never). Its metrics, logger and
	// pool are the platform's.
	Overload overload.Options
}

// Platform is the assembled server.
type Platform struct {
	handler  http.Handler
	Tenants  *tenant.Store
	Accounts *accounts.Store
	Sessions *sessions.Store
	Issuer   *issuer.Server
	// Listener hears PostgreSQL notifications for this replica: the
	// conversation readers' wake-ups and the Company cache's changes. The
	// server starts it (Listener.Start).
	Listener *notify.Listener
	// Hub wakes conversation readers on this replica.
	Hub *conversations.Hub
	// Jobs runs background work; the server starts and stops it.
	Jobs *jobs.Client
	// Replicas counts the live replicas, among which every rate limit is
	// divided; the server starts its heartbeat (Replicas.Start).
	Replicas *replicas.Counter
	// Staff keeps the Companies' console staff (dev mode seeds its demo
	// owner).
	Staff *console.Store
	// Overload sheds the public listener's new requests while this
	// replica is overloaded; the server starts its sampling
	// (Overload.Start).
	Overload *overload.Shedder
	// ConnState counts the public listener's open connections; the
	// server sets it as its http.Server's ConnState.
	ConnState func(net.Conn, http.ConnState)

	ops      http.Handler
	draining atomic.Bool
	ready    readiness
}

// New builds the platform. It stores the bootstrap admin token.
func New(ctx context.Context, opts Options) (*Platform, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.Sealer == nil {
		return nil, errors.New("platform: no Sealer: secrets are stored only sealed")
	}
	p := &Platform{Tenants: tenant.NewStore(opts.Pool)}
	p.ready.pool = opts.Pool
	if opts.AdminToken != "" {
		if err := p.Tenants.EnsureOperatorToken(ctx, "bootstrap (POPPYHOST_ADMIN_TOKEN)", opts.AdminToken); err != nil {
			return nil, err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		pgxpoolprometheus.NewCollector(opts.Pool, map[string]string{"db": "poppyhost"}),
	)
	metrics := httpx.NewMetrics(reg)
	p.ConnState = metrics.ConnState
	shedding := opts.Overload
	shedding.Registerer, shedding.Logger = reg, logger
	shedding.Pool = func() overload.PoolStats {
		st := opts.Pool.Stat()
		return overload.PoolStats{Acquires: st.AcquireCount(), Took: st.AcquireDuration(), NewConns: st.NewConnsCount()}
	}
	p.Overload = overload.New(shedding)

	now := opts.Now
	if now == nil {
		now = time.Now
	}
	resolver := agentid.NewResolver(safehttp.New(opts.Fetch), agentid.Options{Now: now, Metrics: reg})
	// The one River client: built first, so that the packages that
	// insert jobs can take it; their workers and sweeps are added before
	// the server starts it.
	queue, err := jobs.New(opts.Pool, jobs.Options{Logger: logger, Now: now, Metrics: reg})
	if err != nil {
		return nil, err
	}
	p.Jobs = queue.Client
	p.Sessions = sessions.NewStore(opts.Pool)
	replays := clientauth.NewPGReplays(opts.Pool)
	keys := signing.NewKeys(opts.Pool, opts.Sealer, signing.Options{Now: now})
	p.Accounts = accounts.NewStore(opts.Pool, accounts.WithLimits(opts.PasswordHashes),
		accounts.WithMetrics(reg), accounts.WithSecrets(keys.Secret))
	joins := browserjoin.NewStore(opts.Pool)
	replicaOpts := opts.Replicas
	replicaOpts.Logger, replicaOpts.Metrics = logger, reg
	p.Replicas, err = replicas.New(opts.Pool, replicaOpts)
	if err != nil {
		return nil, err
	}
	// Every rate limit is divided between the live replicas, so it holds
	// across them (docs/operations.md, "Rate limits across replicas").
	limits := httpx.NewSharedLimiter(p.Replicas.Live)
	dpopJTIs := dpop.NewStore(opts.Pool)
	proofs := dpop.New(dpopJTIs, dpop.Options{Now: now, Nonces: dpop.NewNonces(keys.Secret, 0, now)})
	// Web Bot Auth (spec 5.3): a signed request's operator, recognised
	// before the address limit so that it is limited as its operator.
	botMetrics, err := botauth.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	recognize := botauth.Recognize(botauth.NewVerifier(safehttp.New(opts.Fetch), botauth.Options{Now: now}), botMetrics, logger)
	apis := registry.NewStore(opts.Pool)
	oauth := issuer.New(issuer.Options{
		Pool: opts.Pool, Keys: keys, Resolver: resolver, Replays: replays, Proofs: proofs, HasTools: apis.HasTools,
		Accounts: p.Accounts, URLs: opts.URLs, CompanyForAPIKey: p.Tenants.CompanyForAPIKey, Now: now,
		Limiter: limits, LoginRates: opts.LoginRates, Metrics: reg,
		Offers: func(grant string) func(http.Handler) http.Handler { return offered(offers(grant)) },
		// A joined browser stops acting for an account its agent signed
		// out of (spec 5.5, 6).
		SignedOut: joins.SignedOut,
	})
	p.Issuer = oauth
	tokens := bearer.New(keys, oauth.Store(), p.Sessions, proofs, opts.URLs, now)
	p.Listener = notify.New(opts.Pool, logger)
	// Verified access tokens are kept until they expire; revocations reach
	// this replica's cache when they commit here, and every replica's by
	// notification.
	if err := tokens.CacheTokens(p.Listener, notify.CacheOptions{Now: now}, reg); err != nil {
		return nil, err
	}
	oauth.Store().OnAccessRevoked(tokens.ForgetCompany)
	convMetrics := conversations.NewMetrics(reg)
	p.Hub = conversations.NewHub(p.Listener, conversations.HubMetrics(convMetrics))
	// Requests find their Company in this replica's cache, which every
	// replica's changes reach by notification.
	companies, err := tenant.NewCache(p.Tenants, p.Listener, tenant.CacheOptions{Now: now, Metrics: reg})
	if err != nil {
		return nil, err
	}
	// New events go to the Company Agent's webhook through River.
	delivery := conversations.NewDelivery(conversations.DeliveryOptions{
		Pool: opts.Pool, Jobs: queue.Client, Companies: p.Tenants, Keys: keys, Sealer: opts.Sealer, URLs: opts.URLs,
		Client: safehttp.New(opts.Fetch), Logger: logger, Metrics: convMetrics, Now: now,
	})
	delivery.AddWorkers(queue.Workers)
	// The backlogs an operator alerts on, read from PostgreSQL at each
	// scrape (docs/operations.md, "Dashboard and alerts in the chart").
	reg.MustRegister(jobs.BacklogCollector(opts.Pool, now), conversations.DeliveryLagCollector(opts.Pool, now),
		conversations.HandoffCollector(opts.Pool, now), operations.UnsettledCollector(opts.Pool, now), keys.Collector())
	sess := sessions.NewManager(sessions.NewVerifier(resolver, sessions.VerifierOptions{Now: now}), p.Sessions, opts.URLs,
		sessions.WithMetrics(reg))
	// session verifies the Session header once the body has arrived, or
	// its first 64 KiB: a body that never comes is refused (408) before
	// the Session's first use is recorded.
	session := func(next http.Handler) http.Handler {
		return httpx.ReadAhead(64 << 10)(sess.Require(limits)(next))
	}
	opStore := operations.NewStore(opts.Pool, operations.WithMetrics(reg))
	origins := opts.Fetch
	origins.MaxIdleConnsPerHost = 64
	originClient := safehttp.New(origins)
	caller := origin.New(origin.Options{Keys: keys, URLs: opts.URLs, Origins: originClient, Logger: logger,
		Metrics: reg, Now: now})
	gw, err := gateway.New(gateway.Options{Store: apis, Tokens: tokens, URLs: opts.URLs, Origins: caller,
		Session: session, Operations: opStore, Metrics: reg, Now: now})
	if err != nil {
		return nil, err
	}
	// The engine performs approved operations for every interface, where
	// origin.Router says.
	router := origin.Router{Registry: apis, Check: gw.CheckRequest}
	engine, err := operations.NewEngine(operations.EngineOptions{Store: opStore, Router: router, Origins: caller,
		Jobs: queue.Client, Companies: p.Tenants, Logger: logger,
		Registerer: reg, Now: now})
	if err != nil {
		return nil, err
	}
	gw.SetEngine(engine)
	engine.AddWorkers(queue.Workers)
	// A Company Agent's proposals are performed by the engine (DESIGN.md,
	// "Company Agent").
	convOps := conversations.NewOperations(conversations.OperationsOptions{
		CheckRequest: func(ctx context.Context, co *tenant.Company, req *operations.Request) error {
			return gw.CheckRequest(ctx, co, req, nil)
		},
		Operations: opStore, Performer: engine,
	}, delivery)
	convOps.AddWorkers(queue.Workers)
	convStore := conversations.NewStore(opts.Pool,
		conversations.StoreOptions{Enqueue: delivery, Operations: convOps, Metrics: convMetrics, Now: now})
	p.Tenants.OnModify(convStore.SettingsChanged)
	opHandler := operations.NewHandler(opStore, now)
	mcp := mcpserver.New(mcpserver.Options{Store: apis, Tokens: tokens, URLs: opts.URLs, Origins: caller,
		Session: session, Operations: opStore, Engine: engine, Logger: logger, Now: now})
	queue.AddSweeps(slices.Concat(sessions.Sweeps(p.Sessions), clientauth.Sweeps(replays), accounts.Sweeps(p.Accounts),
		signing.Sweeps(keys), issuer.Sweeps(oauth.Store()), browserjoin.Sweeps(joins),
		conversations.Sweeps(convStore), engine.Sweeps(), dpop.Sweeps(dpopJTIs),
		audit.Sweeps(audit.NewStore(opts.Pool, opts.AuditRetention)))...)
	reports := feedback.NewHandler(feedback.NewStore(opts.Pool))
	convs := conversations.NewAgentHandler(convStore, p.Hub, conversations.AgentOptions{Tokens: tokens,
		Middleware: []func(http.Handler) http.Handler{
			offered(func(s *tenant.Settings) bool { return s.Conversations.Enabled }), session,
		}})
	companyConvs := conversations.NewCompanyHandler(convStore, p.Hub, delivery)

	registrations := registry.NewHandler(registry.Options{Store: apis, Fetch: safehttp.New(opts.Fetch),
		AllowPrivate: opts.Fetch.AllowPrivate, Now: now})
	join := browserjoin.New(browserjoin.Options{Store: joins, Tokens: tokens, Logger: logger, Session: session, Now: now})
	web := website.New(website.Options{Origins: caller, Sessions: join, Session: session, Tokens: tokens,
		Operations: opStore, Engine: engine, Now: now})
	disc := discovery.NewHandler(opts.URLs, registry.Listings{Store: apis, URLs: opts.URLs})
	admin := tenant.NewAdmin(p.Tenants, p.Accounts, opts.URLs, opts.Fetch.AllowPrivate)
	// The Company console (docs/console.md): each page's services are
	// passed in console.Options.
	consoleApp, err := console.New(console.Options{Pool: opts.Pool, Passwords: p.Accounts, Sealer: opts.Sealer,
		Companies: companies, URLs: opts.URLs, Logger: logger, Now: now, LoginAllowed: oauth.LoginAllowed,
		SignedOut: tenant.LimitByAddress(limits),
		Settings:  admin, Tenants: p.Tenants, Registrations: apis, Webhooks: delivery,
		Operations: opStore, Feedback: feedback.NewStore(opts.Pool), Grants: oauth.Store(),
		Conversations: convStore, Hub: p.Hub})
	if err != nil {
		return nil, err
	}
	queue.AddSweeps(consoleApp.Sweeps()...)
	p.Staff = consoleApp.Staff()
	apiRates := opts.APIRates.WithDefaults()
	admin.LimitOperators(limits, apiRates.PerOperatorToken)

	// Health, readiness and metrics are served on the operations
	// listener only, never on a public host (docs/operations.md).
	ops := newRouter()
	ops.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	ops.Get("/readyz", p.readyz)
	ops.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	p.ops = httpx.Instrument(logger, metrics, ops)
	platform := newRouter()
	// The operator and Company APIs take no path or query text that
	// PostgreSQL would refuse.
	keyRoutes := signing.NewHandler(keys, oauth.SecretSignedUntil)
	ifMatch := httpx.RequireIfMatch(opts.RequireIfMatch)
	tenant.AdminAPI(platform.With(httpx.RequireText, ifMatch), p.Tenants, admin,
		admin, reports, sess, keyRoutes, registrations, opHandler, consoleApp)
	platform.Route("/company/v1", func(r chi.Router) {
		r.Use(httpx.RequireText, ifMatch, tenant.RequireAPIKey(p.Tenants), tenant.LimitByCredential(limits, apiRates.PerAPIKey))
		for _, h := range []httpx.CompanyAPIRoutes{admin, reports, sess, companyConvs, registrations, join, opHandler} {
			h.CompanyAPI(r)
		}
	})
	platform.With(tenant.BySlug(companies)).Get("/.well-known/oauth-authorization-server/t/{slug}", disc.ServeASMetadata)
	platform.With(tenant.BySlug(companies)).Get("/.well-known/oauth-protected-resource/t/{slug}/mcp", mcp.ServeMetadata)
	platform.Route("/t/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(companies), recognize, tenant.LimitByAddress(limits))
		disc.Public(r)
		// Feedback needs no account, but an access token sent with it must
		// still be valid and the Session's (spec 5.3 step 3).
		// The report is read whole before the Session is verified, so a
		// slow or oversized body is refused before the Session's first
		// use is recorded.
		r.With(offered(func(s *tenant.Settings) bool { return s.Feedback.Enabled }), reports.BufferReport,
			sess.Require(limits), tokens.Require(bearer.Resource{})).
			Post("/poppy/feedback", reports.ServeFeedback)
		// Website operations (extension 6): no scope, as an API otherwise.
		web.Public(r.With(offered(func(s *tenant.Settings) bool { return s.Operations.Enabled && s.Operations.Web })))
		// Every Company has signing keys: they sign Poppy-Verified for its
		// origin and agent webhook even without an issuer.
		keyRoutes.Public(r)
		r.Group(func(r chi.Router) {
			r.Use(offered(func(s *tenant.Settings) bool { return s.Auth.Issuer }))
			oauth.Public(r)
		})
		gw.Public(r)
		// MCP calls are the gateway's too, counted as such.
		mcp.Public(r.With(gw.CountMCP))
		convs.Public(r)
	})

	platform.Route("/console/{slug}", consoleApp.Mount)

	company := newRouter()
	company.Use(recognize, tenant.LimitByAddress(limits))
	disc.Domain(company)
	company.Group(func(r chi.Router) {
		r.Use(offered(func(s *tenant.Settings) bool { return s.Web.BrowserJoin }))
		join.Domain(r)
	})
	// Every other path of a Company domain is the Company's website,
	// proxied to web.origin (404 without one). A path above asked with
	// another method stays ours: 405.
	web.Domain(company)

	host := tenant.HostRouter(companies, opts.URLs.Public.Hostname(), platform, company)
	// An overloaded replica sheds new requests before anything else runs
	// (internal/overload). Event streams wait outside the rest of the
	// chain (conversations.ParkStreams); every other request's stack grows
	// once, while shallow, before the routers (httpx.GrowStack).
	p.handler = httpx.Instrument(logger, metrics, p.Overload.Middleware(
		conversations.ParkStreams(httpx.GrowStack(httpx.PaceBodies(opts.Bodies)(opts.Proxies.Middleware(host))))))
	return p, nil
}

func newRouter() *chi.Mux {
	r := chi.NewRouter()
	r.Use(httpx.RecordRoute, httpx.OneAuthorization, middleware.GetHead)
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed(r))
	return r
}

// offers reports whether a Company offers a sign-in grant type.
func offers(grant string) func(*tenant.Settings) bool {
	return func(s *tenant.Settings) bool { return slices.Contains(s.Auth.OfferedGrantTypes(), grant) }
}

// offered answers 404 for a route whose feature the Company's settings do
// not offer, before anything else runs.
func offered(on func(*tenant.Settings) bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !on(&tenant.FromContext(r.Context()).Settings) {
				httpx.NotFound(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Handler is the platform's HTTP handler: the public listener's.
func (p *Platform) Handler() http.Handler { return p.handler }

// OpsHandler serves /healthz, /readyz and /metrics, whatever the host, for
// the operations listener: a private address that probes and scrapers
// reach and the public does not.
func (p *Platform) OpsHandler() http.Handler { return p.ops }

// Drain marks the platform as shutting down: /readyz answers 503 so load
// balancers stop sending new requests while in-flight ones finish, and
// conversation streams and long-polls end so they do not hold the
// shutdown.
func (p *Platform) Drain() {
	p.draining.Store(true)
	p.Hub.Drain()
}

func (p *Platform) readyz(w http.ResponseWriter, r *http.Request) {
	if p.draining.Load() {
		httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	if err := p.ready.check(r.Context()); err != nil {
		if httpx.ClientGone(r) {
			// The prober hung up (a load balancer's check timing out):
			// that says nothing about the database.
			httpx.WriteError(w, r, err)
			return
		}
		httpx.Logger(r.Context()).WarnContext(r.Context(), "not ready", slog.Any("err", err))
		httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readiness checks that the database answers on every call, and that its
// schema is current at most every schemaEvery (the check reads two tables).
type readiness struct {
	pool *pgxpool.Pool

	mu        sync.Mutex
	checkedAt time.Time
}

const schemaEvery = 30 * time.Second

func (rd *readiness) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rd.pool.Ping(ctx); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			// The request was cancelled, not the database lost.
			return ctx.Err()
		}
		return errDatabase
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if time.Since(rd.checkedAt) < schemaEvery {
		return nil
	}
	m, err := migrations.New(rd.pool, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Check(ctx); err != nil {
		return err
	}
	rd.checkedAt = time.Now()
	return nil
}

type readyError string

func (e readyError) Error() string { return string(e) }

const errDatabase = readyError("database unreachable")
