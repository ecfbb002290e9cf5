package registry_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// publicHost is the platform's host name in these tests.
const publicHost = "poppyhost.test"

// adminToken is the operator token of the admin API in these tests.
const adminToken = "test-admin-token-0123456789"

// env serves the registration API over HTTPS on a database of the test's
// own, mounted as the platform mounts it: under /company/v1 behind an API
// key and under /admin/v1/companies/{slug} beside the admin API's own
// routes, which create Companies and their API keys. Descriptions given by
// URL are fetched from loopback servers under names only Hosts knows, as
// in development (AllowPrivate). What poppy.json and the API proxy make of
// registrations is tested in internal/platform.
type env struct {
	*peers.Site
	Pool    *pgxpool.Pool
	Tenants *tenant.Store
	Store   *registry.Store
	CA      *devca.CA
	Hosts   *peers.Hosts
	// Handler is the registration API the site serves.
	Handler *registry.Handler
	// Listings are the registry's entries in poppy.json.
	Listings registry.Listings
}

func newEnv(t testing.TB) *env { return newEnvWith(t, false) }

// newEnvWith is newEnv requiring If-Match on writes to existing resources
// when requireIfMatch (POPPYHOST_REQUIRE_IF_MATCH).
func newEnvWith(t testing.TB, requireIfMatch bool) *env {
	t.Helper()
	pool := testdb.NewPool(t)
	ca, err := devca.New()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	urls := tenant.URLs{Public: &url.URL{Scheme: "https", Host: publicHost + ":" + port}}

	e := &env{Pool: pool, Tenants: tenant.NewStore(pool), Store: registry.NewStore(pool), CA: ca, Hosts: &peers.Hosts{}}
	e.Listings = registry.Listings{Store: e.Store, URLs: urls}
	require.NoError(t, e.Tenants.EnsureOperatorToken(context.Background(), "test", adminToken))
	e.Handler = registry.NewHandler(registry.Options{
		Store:        e.Store,
		Fetch:        safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: e.Hosts}),
		AllowPrivate: true,
		Now:          time.Now,
	})

	r := chi.NewRouter()
	r.NotFound(httpx.NotFound)
	admin := tenant.NewAdmin(e.Tenants, accounts.NewStore(pool), urls, true)
	ifMatch := httpx.RequireIfMatch(requireIfMatch)
	tenant.AdminAPI(r.With(httpx.RequireText, ifMatch), e.Tenants, admin, admin, e.Handler)
	r.Route("/company/v1", func(r chi.Router) {
		r.Use(httpx.RequireText, ifMatch, tenant.RequireAPIKey(e.Tenants))
		e.Handler.CompanyAPI(r)
	})
	e.Site = peers.ServeSite(t, ca, ln, r)
	return e
}

// PublicURL returns the https URL of path on the platform's own host.
func (e *env) PublicURL(path string) string { return e.URL(publicHost, path) }

// Admin sends a request to the admin API with the operator token.
func (e *env) Admin(t testing.TB, method, path string, body any) *peers.Response {
	t.Helper()
	return e.Do(t, method, e.PublicURL(path), body, "Authorization", "Bearer "+adminToken)
}

// CreateCompany creates a Company through the admin API and fails the test
// unless it answers 201.
func (e *env) CreateCompany(t testing.TB, body any) map[string]any {
	t.Helper()
	resp := e.Admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.Status, "create company: %s", resp.Body)
	return resp.JSON(t)
}
