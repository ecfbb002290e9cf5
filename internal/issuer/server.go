package issuer

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Resolver resolves client metadata documents (agentid.Resolver): a
// Personal Agent's with its keys, and any client's, public MCP clients
// included (spec 7, "Other MCP clients").
type Resolver interface {
	clientauth.Resolver
	AnyClient(ctx context.Context, clientID string) (*agentid.Client, error)
}

// Options are what a Server is built from.
type Options struct {
	Pool     *pgxpool.Pool
	Keys     Keys
	Resolver Resolver
	// HasTools says whether a Company has a hosted MCP server, which MCP
	// clients that are not Personal Agents sign in for; nil: every
	// Company has one.
	HasTools func(ctx context.Context, companyID int64) (bool, error)
	Replays  clientauth.ReplayStore
	// Proofs checks the DPoP proofs of token requests (RFC 9449 §5).
	Proofs   *dpop.Verifier
	Accounts *accounts.Store
	URLs     tenant.URLs
	// CompanyForAPIKey authenticates callers of the introspection
	// endpoint (tenant.Store.CompanyForAPIKey).
	CompanyForAPIKey func(ctx context.Context, key string) (*tenant.Company, error)
	// SignedOut, when set, is told of every sign-out (Store.SignedOut).
	SignedOut SignedOut
	// Limiter counts sign-in attempts against LoginRates; nil makes one.
	Limiter *httpx.Limiter
	// LoginRates bound sign-in attempts (zero fields: defaults).
	LoginRates LoginRates
	// Metrics, when set, gets the sign-in metrics.
	Metrics prometheus.Registerer
	// Offers, when set, is the middleware of the routes of a sign-in
	// grant type, which answers 404 when the Company in the context does
	// not offer it; without it every grant type's routes are served.
	Offers func(grant string) func(http.Handler) http.Handler
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Server is every Company's OAuth issuer.
type Server struct {
	store    *Store
	provider *fosite.Fosite
	codes    *oauth2.HMACSHAStrategyUnPrefixed
	verifier *clientauth.Verifier
	resolver Resolver
	hasTools func(ctx context.Context, companyID int64) (bool, error)
	proofs   *dpop.Verifier
	accounts *accounts.Store
	keys     Keys
	urls     tenant.URLs
	apiKey   func(ctx context.Context, key string) (*tenant.Company, error)
	limiter  *httpx.Limiter
	rates    LoginRates
	metrics  *metrics
	offers   func(grant string) func(http.Handler) http.Handler
	now      func() time.Time
}

// New returns a Server.
func New(opts Options) *Server {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Server{
		store:    &Store{pool: opts.Pool, signedOut: opts.SignedOut},
		resolver: opts.Resolver,
		hasTools: opts.HasTools,
		proofs:   opts.Proofs,
		accounts: opts.Accounts,
		keys:     opts.Keys,
		urls:     opts.URLs,
		apiKey:   opts.CompanyForAPIKey,
		limiter:  opts.Limiter,
		rates:    opts.LoginRates.withDefaults(),
		metrics:  newMetrics(opts.Metrics),
		offers:   opts.Offers,
		now:      now,
	}
	if s.offers == nil {
		s.offers = func(string) func(http.Handler) http.Handler {
			return func(next http.Handler) http.Handler { return next }
		}
	}
	if s.limiter == nil {
		s.limiter = httpx.NewLimiter()
	}
	s.verifier = clientauth.NewVerifier(opts.Resolver, clientauth.Options{Now: now, Replays: opts.Replays})
	s.store.clients = s.getClient
	access := &accessTokens{keys: opts.Keys, issuer: opts.URLs.Issuer, now: now}
	s.provider, s.codes = newProvider(s.store, opts.Keys, access, &deviceGrant{now: now}, s.authenticateClient)
	return s
}

// Store is the Server's grant storage.
func (s *Server) Store() *Store { return s.store }

// Public mounts the issuer's endpoints and pages under {issuer}, that is
// {PUBLIC_URL}/t/{slug} (httpx.PublicRoutes); the routes of a grant type
// run behind Options.Offers.
func (s *Server) Public(r chi.Router) {
	offers := s.offers
	r.Post("/oauth/token", s.token)
	r.Post("/oauth/revoke", s.revoke)
	r.Post("/oauth/introspect", s.introspect)
	r.With(offers(tenant.GrantAuthorizationCode)).HandleFunc("/oauth/authorize", s.authorize)
	r.With(offers(tenant.GrantAuthorizationCode)).Post("/oauth/register", s.register)
	r.With(offers(tenant.GrantDeviceCode)).Post("/oauth/device_authorization", s.deviceAuthorization)
	r.With(offers(tenant.GrantDeviceCode)).HandleFunc("/device", s.devicePage)
	r.HandleFunc("/account", s.accountPage)
}

// authenticateClient is fosite's client authentication: private_key_jwt
// with spec 4.1's rules (internal/clientauth), then the Company's policy;
// or, for a request with client_id and no assertion, a public MCP client
// (token_endpoint_auth_method none) where the Company accepts them.
func (s *Server) authenticateClient(ctx context.Context, r *http.Request, form url.Values) (fosite.Client, error) {
	c := tenant.FromContext(ctx)
	if form.Get("client_assertion") == "" && form.Get("client_assertion_type") == "" && form.Get("client_id") != "" {
		if client, ok, err := s.publicClient(ctx, r, form.Get("client_id")); ok || err != nil {
			return client, err
		}
	}
	agent, err := s.verifier.Verify(ctx, s.urls.Issuer(c), form)
	if err != nil {
		return nil, clientAuthError(err)
	}
	if !c.Settings.Agents.Accepts(agent.ClientID) {
		return nil, fosite.ErrInvalidClient.WithHint("This Company does not accept this Personal Agent.")
	}
	return newClient(agent, c), nil
}

// clientAuthError is fosite's error for an error of client
// authentication (internal/clientauth).
func clientAuthError(err error) error {
	var ce *clientauth.Error
	if errors.As(err, &ce) && ce.Code == clientauth.CodeInvalidClient {
		return fosite.ErrInvalidClient.WithHint(ce.Description).WithWrap(err)
	}
	return fosite.ErrServerError.WithWrap(err)
}

// getClient resolves a client_id for the authorization endpoint.
func (s *Server) getClient(ctx context.Context, id string) (fosite.Client, error) {
	agent, err := s.resolveAgent(ctx, id)
	if err != nil {
		return nil, err
	}
	return newClient(agent, tenant.FromContext(ctx)), nil
}

// publicClient authenticates a token request that names a client_id and
// no assertion: ok when the document is a public client's, which the
// Company accepts (token_endpoint_auth_method none); not ok, with no
// error, for a Personal Agent, whose missing assertion the verifier then
// refuses with spec 4.1's error.
func (s *Server) publicClient(ctx context.Context, r *http.Request, id string) (fosite.Client, bool, error) {
	var agent *agentid.Client
	switch {
	case isRegistered(id):
		reg, err := s.registeredClient(ctx, id)
		if err != nil {
			return nil, true, err
		}
		agent = reg
	case agentid.CheckClientID(id) != nil:
		return nil, false, nil
	default:
		doc, err := s.resolver.AnyClient(ctx, id)
		if err != nil || !doc.Public {
			// The verifier fetches the same document from the cache and
			// says what is wrong.
			return nil, false, nil
		}
		if err := s.acceptPublic(ctx); err != nil {
			return nil, true, err
		}
		agent = doc
	}
	if _, _, basic := r.BasicAuth(); basic {
		return nil, true, fosite.ErrInvalidClient.WithHint("A public client sends client_id in the body and no credentials (token_endpoint_auth_method none).")
	}
	return newClient(agent, tenant.FromContext(ctx)), true, nil
}

// acceptPublic applies the Company's setting to a public MCP client: it
// signs in only where the Company lets clients that are not Personal
// Agents use its hosted MCP server (tenant.MCP.OtherClients).
func (s *Server) acceptPublic(ctx context.Context) error {
	c := tenant.FromContext(ctx)
	refused := fosite.ErrInvalidClient.WithHint("This Company signs in only Personal Agents (spec 4.1): public clients are accepted for its MCP server only, where it allows them.")
	if !c.Settings.MCP.AcceptsOtherClients() {
		return refused
	}
	if s.hasTools != nil {
		ok, err := s.hasTools(ctx, c.ID)
		if err != nil {
			return fosite.ErrServerError.WithWrap(err)
		}
		if !ok {
			return refused
		}
	}
	return nil
}

// resolveAgent fetches a client's metadata document and applies the
// Company's policy; errors are *fosite.RFC6749Error with a description
// fit for the User's error page. A public MCP client is returned where
// the Company accepts them (acceptPublic); Personal Agents follow spec 4.1.
func (s *Server) resolveAgent(ctx context.Context, id string) (*agentid.Client, error) {
	if isRegistered(id) {
		return s.registeredClient(ctx, id)
	}
	if err := agentid.CheckClientID(id); err != nil {
		return nil, fosite.ErrInvalidClient.WithHint(err.Error())
	}
	agent, err := s.resolver.AnyClient(ctx, id)
	var invalid *agentid.InvalidError
	switch {
	case errors.As(err, &invalid):
		httpx.Logger(ctx).InfoContext(ctx, "client metadata refused", slog.String("client_id", id), slog.String("reason", invalid.Reason))
		return nil, fosite.ErrInvalidClient.WithHintf("The Personal Agent's client metadata is not valid: %s", invalid.Reason)
	case errors.Is(err, agentid.ErrUnavailable):
		// The agent's fault, not ours: a client we cannot identify is an
		// invalid client (RFC 6749 §4.1.2.1), shown to the User.
		httpx.Logger(ctx).InfoContext(ctx, "client metadata unavailable", slog.String("client_id", id), slog.Any("err", err))
		return nil, fosite.ErrInvalidClient.WithHint("The Personal Agent's client metadata could not be fetched.").WithWrap(err)
	case err != nil:
		return nil, fosite.ErrServerError.WithWrap(err)
	}
	if agent.Public {
		if err := s.acceptPublic(ctx); err != nil {
			return nil, err
		}
		return agent, nil
	}
	if !tenant.FromContext(ctx).Settings.Agents.Accepts(agent.ClientID) {
		return nil, fosite.ErrInvalidClient.WithHint("This Company does not accept this Personal Agent.")
	}
	return agent, nil
}

// logFailure logs a server-side failure behind an OAuth error.
func logFailure(r *http.Request, err error) {
	var rfc *fosite.RFC6749Error
	if errors.As(err, &rfc) && rfc.CodeField < 500 {
		return
	}
	httpx.Logger(r.Context()).ErrorContext(r.Context(), "issuer failure", slog.Any("err", err))
}
