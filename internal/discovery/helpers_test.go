package discovery_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// publicHost is the platform's host name in these tests.
const publicHost = "poppyhost.test"

// adminToken is the operator token of the admin API in these tests.
const adminToken = "test-admin-token-0123456789"

// env serves the discovery handler over HTTPS on a fresh database, routed
// by Host as the platform routes it: the Company domains' documents, the
// issuer's under /t/{slug}, its RFC 8414 metadata, and the admin API that
// creates and changes Companies.
type env struct {
	*peers.Site
	Tenants *tenant.Store
	URLs    tenant.URLs
}

func setup(t testing.TB) *env {
	t.Helper()
	pool := testdb.NewPool(t)
	ca, err := devca.New()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	urls := tenant.URLs{Public: &url.URL{Scheme: "https", Host: publicHost + ":" + port}}

	tenants := tenant.NewStore(pool)
	require.NoError(t, tenants.EnsureOperatorToken(context.Background(), "test", adminToken))
	disc := discovery.NewHandler(urls, nil)
	platform := newRouter()
	admin := tenant.NewAdmin(tenants, accounts.NewStore(pool), urls, true)
	tenant.AdminAPI(platform, tenants, admin, admin)
	platform.With(tenant.BySlug(tenants)).Get("/.well-known/oauth-authorization-server/t/{slug}", disc.ServeASMetadata)
	platform.Route("/t/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(tenants))
		disc.Public(r)
	})
	company := newRouter()
	disc.Domain(company)
	h := tenant.HostRouter(tenants, publicHost, platform, company)
	return &env{Site: peers.ServeSite(t, ca, ln, h), Tenants: tenants, URLs: urls}
}

// newRouter is a router as the platform builds one: HEAD as GET, and JSON
// 404s and 405s.
func newRouter() *chi.Mux {
	r := chi.NewRouter()
	r.Use(middleware.GetHead)
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed(r))
	return r
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

// fetch sends a request without any token. host, when set, replaces the
// Host header (the connection still goes to the test server, and TLS still
// names the URL's host).
func fetch(t testing.TB, env *env, method, rawURL, host string) *peers.Response {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	resp, err := env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

func get(t testing.TB, env *env, rawURL string) *peers.Response {
	t.Helper()
	return fetch(t, env, http.MethodGet, rawURL, "")
}

// requireDocument checks a discovery document response: 200, JSON, and
// cacheable for a minute.
func requireDocument(t testing.TB, resp *peers.Response, what string) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s: %s", what, resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), what)
	require.Equal(t, "public, max-age=60", resp.Header.Get("Cache-Control"), what)
	return resp.JSON(t)
}

// requireNotFound checks the JSON 404 that says a document does not exist.
func requireNotFound(t testing.TB, resp *peers.Response, what string) {
	t.Helper()
	require.Equal(t, http.StatusNotFound, resp.Status, "%s: %s", what, resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), what)
	require.Equal(t, "not_found", resp.JSON(t)["error"], what)
}

// serverURL maps a URL of the golden files to the test server.
func serverURL(t testing.TB, env *env, golden string) string {
	t.Helper()
	u, err := url.Parse(golden)
	require.NoError(t, err)
	if u.Host == "poppyhost.example" {
		return env.PublicURL(u.Path)
	}
	return env.URL(u.Host, u.Path)
}
