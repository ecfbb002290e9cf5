package feedback_test

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
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/feedback"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// publicHost is the platform's host name in these tests.
const publicHost = "poppyhost.test"

// adminToken is the operator token of the admin API in these tests.
const adminToken = "test-admin-token-0123456789"

// env serves the feedback handler over HTTPS on a fresh database: reports
// at {PUBLIC_URL}/t/{slug}/poppy/feedback behind the Session check, and
// the reports listed under /company/v1 and the admin API, which also
// creates and changes Companies.
type env struct {
	*peers.Site
	Pool  *pgxpool.Pool
	ca    *devca.CA
	hosts *peers.Hosts
}

func newEnv(t testing.TB) *env {
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
	hosts := &peers.Hosts{}
	// Test agents listen on loopback under names only hosts knows.
	fetch := safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: hosts})
	resolver := agentid.NewResolver(fetch, agentid.Options{Now: time.Now})
	sess := sessions.NewManager(sessions.NewVerifier(resolver, sessions.VerifierOptions{Now: time.Now}),
		sessions.NewStore(pool), urls)
	reports := feedback.NewHandler(feedback.NewStore(pool))

	r := chi.NewRouter()
	r.NotFound(httpx.NotFound)
	admin := tenant.NewAdmin(tenants, accounts.NewStore(pool), urls, true)
	tenant.AdminAPI(r.With(httpx.RequireText), tenants, admin, admin, reports)
	r.Route("/company/v1", func(r chi.Router) {
		r.Use(httpx.RequireText, tenant.RequireAPIKey(tenants))
		reports.CompanyAPI(r)
	})
	// The report is read whole before the Session is verified, as the
	// platform mounts it.
	r.With(tenant.BySlug(tenants), reports.BufferReport, sess.Require(httpx.NewLimiter())).
		Post("/t/{slug}/poppy/feedback", reports.ServeFeedback)
	return &env{Site: peers.ServeSite(t, ca, ln, r), Pool: pool, ca: ca, hosts: hosts}
}

// StartAgent starts a test Personal Agent that the Session check can
// fetch.
func (e *env) StartAgent(t testing.TB) *peers.Agent {
	t.Helper()
	a := peers.StartAgent(t, e.ca, peers.AgentOptions{})
	e.hosts.Add(a.Host)
	return a
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
