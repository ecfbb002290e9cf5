package tenant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// publicHost is the platform's host name in these tests.
const publicHost = "poppyhost.test"

// adminToken is the bootstrap operator token in these tests.
const adminToken = "test-admin-token-0123456789"

// kit serves this package's own handlers over HTTPS on a database of the
// test's own, routed by Host as the platform routes them: the admin API
// and the Company API's own-settings route on the platform's host, and a
// stand-in for every Company document on Company domains and under
// /t/{slug}, which answers the Company's organization name. What the
// documents hold is the discovery package's, and the platform's wiring
// of them is tested in internal/platform.
type kit struct {
	Pool     *pgxpool.Pool
	Tenants  *tenant.Store
	Accounts *accounts.Store
	CA       *devca.CA
	// Client reaches every host name on the test server over HTTPS.
	Client *http.Client
	// Port is the server's TCP port; every host is served on it.
	Port string
	URLs tenant.URLs
}

// setup starts the kit with the bootstrap operator token stored, as the
// platform stores it.
func setup(t testing.TB) *kit { return setupWith(t, false) }

// setupWith starts the kit as setup does, requiring If-Match on writes to
// existing resources when requireIfMatch (POPPYHOST_REQUIRE_IF_MATCH).
func setupWith(t testing.TB, requireIfMatch bool) *kit {
	t.Helper()
	pool := testdb.NewPool(t)
	ca, err := devca.New()
	require.NoError(t, err)
	ln := peers.Listen(t)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	k := &kit{
		Pool: pool, Tenants: tenant.NewStore(pool), Accounts: accounts.NewStore(pool), CA: ca, Port: port,
		URLs: tenant.URLs{Public: &url.URL{Scheme: "https", Host: publicHost + ":" + port}},
	}
	require.NoError(t, k.Tenants.EnsureOperatorToken(context.Background(), "bootstrap", adminToken))
	peers.StartOn(t, ca, ln, k.handler(requireIfMatch))
	k.Client = peers.Client(t, ca, ln.Addr().String())
	return k
}

// newRouter is a router with the platform's common middleware and error
// answers.
func newRouter() *chi.Mux {
	r := chi.NewRouter()
	r.Use(httpx.OneAuthorization, middleware.GetHead)
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed(r))
	return r
}

func (k *kit) handler(requireIfMatch bool) http.Handler {
	admin := tenant.NewAdmin(k.Tenants, k.Accounts, k.URLs, true)
	platform := newRouter()
	ifMatch := httpx.RequireIfMatch(requireIfMatch)
	tenant.AdminAPI(platform.With(httpx.RequireText, ifMatch), k.Tenants, admin, admin)
	platform.Route("/company/v1", func(r chi.Router) {
		r.Use(httpx.RequireText, ifMatch, tenant.RequireAPIKey(k.Tenants))
		admin.CompanyAPI(r)
	})
	platform.With(tenant.BySlug(k.Tenants)).Get("/t/{slug}/*", serveOrganization)
	company := newRouter()
	company.Get("/.well-known/poppy.json", serveOrganization)
	return tenant.HostRouter(k.Tenants, publicHost, platform, company)
}

// serveOrganization answers the request's Company's organization name.
func serveOrganization(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"organization": map[string]any{"name": c.Settings.Organization.Name}})
}

// URL returns the https URL of path on host as the test server serves it.
func (k *kit) URL(host, path string) string { return "https://" + host + ":" + k.Port + path }

// PublicURL returns the https URL of path on the platform's own host.
func (k *kit) PublicURL(path string) string { return k.URL(publicHost, path) }

// Do sends a request. body is as for [peers.NewRequest]. headers are name,
// value pairs; "Host" sets the Host header the server sees.
func (k *kit) Do(t testing.TB, method, rawURL string, body any, headers ...string) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, method, rawURL, body)
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Host") {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	return peers.Send(t, k.Client, req)
}

// Admin sends a request to the admin API with the bootstrap token.
func (k *kit) Admin(t testing.TB, method, path string, body any) *peers.Response {
	t.Helper()
	return k.Do(t, method, k.PublicURL(path), body, "Authorization", "Bearer "+adminToken)
}

// CreateCompany creates a Company through the admin API and fails the
// test unless it answers 201.
func (k *kit) CreateCompany(t testing.TB, body any) map[string]any {
	t.Helper()
	resp := k.Admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.Status, "create company: %s", resp.Body)
	return resp.JSON(t)
}

// apiError is the JSON error body every admin and Company API error has.
type apiError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
	Fields      []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"fields"`
	RequestID string `json:"request_id"`
}

// requireError checks that resp is a JSON error with status and code.
func requireError(t *testing.T, resp *peers.Response, status int, code string) apiError {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e apiError
	require.NoError(t, json.Unmarshal(resp.Body, &e), "body: %s", resp.Body)
	require.Equal(t, code, e.Error, "body: %s", resp.Body)
	require.NotEmpty(t, e.Description, "body: %s", resp.Body)
	return e
}

// requireInvalid checks for a 400 invalid_request naming exactly fields,
// each with a message.
func requireInvalid(t *testing.T, resp *peers.Response, fields ...string) apiError {
	t.Helper()
	e := requireError(t, resp, http.StatusBadRequest, "invalid_request")
	got := make([]string, 0, len(e.Fields))
	for _, f := range e.Fields {
		require.NotEmpty(t, f.Message, "field %s has no message", f.Field)
		got = append(got, f.Field)
	}
	require.Equal(t, fields, got, "body: %s", resp.Body)
	return e
}

// count runs a count(*) query.
func count(t *testing.T, env *kit, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// requireNoCompanies checks that nothing of a Company was written.
func requireNoCompanies(t *testing.T, env *kit) {
	t.Helper()
	require.Zero(t, count(t, env, `SELECT count(*) FROM companies`), "a company was stored")
	require.Zero(t, count(t, env, `SELECT count(*) FROM company_domains`), "a domain was stored")
}

// companyID returns the database ID of the Company with slug.
func companyID(t *testing.T, env *kit, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&id))
	return id
}

// domainsOf returns a Company's domains as stored, primary first, with
// "*" after the primary one.
func domainsOf(t *testing.T, env *kit, slug string) []string {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT d.domain || CASE WHEN d.is_primary THEN '*' ELSE '' END
		FROM company_domains d JOIN companies c ON c.id = d.company_id
		WHERE c.slug = $1 ORDER BY d.is_primary DESC, d.domain`, slug)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var d string
		require.NoError(t, rows.Scan(&d))
		out = append(out, d)
	}
	require.NoError(t, rows.Err())
	return out
}

// merge applies a JSON merge patch to a JSON document; null deletes.
func merge(t *testing.T, doc, patch string) string {
	t.Helper()
	if patch == "" {
		return doc
	}
	out, err := jsonpatch.MergePatch([]byte(doc), []byte(patch))
	require.NoError(t, err, "patch %s", patch)
	return string(out)
}

// minimalBody is the smallest valid Company body.
func minimalBody(slug, domain string) string {
	return fmt.Sprintf(`{"slug":%q,"organization":{"name":"Company %s","domain":%q}}`, slug, slug, domain)
}

// createCompany creates a Company from a minimal body plus patch.
func createCompany(t *testing.T, env *kit, slug, domain, patch string) map[string]any {
	t.Helper()
	return env.CreateCompany(t, merge(t, minimalBody(slug, domain), patch))
}

// createAPIKey creates an API key for slug and returns its id and secret.
func createAPIKey(t *testing.T, env *kit, slug string) (int64, string) {
	t.Helper()
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	var k struct {
		ID  int64  `json:"id"`
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &k))
	require.NotZero(t, k.ID)
	require.NotEmpty(t, k.Key)
	return k.ID, k.Key
}

// bearer returns the Authorization header pair for token.
func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// companyAPI calls /company/v1 path with an API key.
func companyAPI(t *testing.T, env *kit, method, path, key string) *peers.Response {
	t.Helper()
	return env.Do(t, method, env.PublicURL("/company/v1"+path), nil, bearer(key)...)
}

// poppyJSON fetches poppy.json from a domain (see kit).
func poppyJSON(t *testing.T, env *kit, domain string) *peers.Response {
	t.Helper()
	return env.Do(t, http.MethodGet, env.URL(domain, "/.well-known/poppy.json"), nil)
}

// orgName returns organization.name of a poppy.json or Company body.
func orgName(t *testing.T, resp *peers.Response) string {
	t.Helper()
	var doc struct {
		Organization struct {
			Name string `json:"name"`
		} `json:"organization"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &doc), "body: %s", resp.Body)
	return doc.Organization.Name
}
