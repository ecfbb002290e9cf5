package sessions_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/botauth"
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

// adminToken is the bootstrap operator token in these tests.
const adminToken = "test-admin-token-0123456789"

// kit serves the Session middleware over HTTPS on a database of the
// test's own, as the platform mounts it in front of the feedback
// endpoint (spec 9.3), with the routes that end Sessions (spec 5.5) and
// the admin API that makes Companies. Test Personal Agents it starts are
// fetched as strangers, through safehttp.
type kit struct {
	Pool *pgxpool.Pool
	CA   *devca.CA
	// Hosts resolves the test's Personal Agents for the kit's fetches.
	Hosts *peers.Hosts
	// Client reaches every host name on the test server over HTTPS.
	Client *http.Client
	// Port is the server's TCP port; every host is served on it.
	Port string
	URLs tenant.URLs
}

// setup starts the kit.
func setup(t testing.TB) *kit {
	t.Helper()
	pool := testdb.NewPool(t)
	ca, err := devca.New()
	require.NoError(t, err)
	ln := peers.Listen(t)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	k := &kit{Pool: pool, CA: ca, Hosts: &peers.Hosts{}, Port: port,
		URLs: tenant.URLs{Public: &url.URL{Scheme: "https", Host: publicHost + ":" + port}}}
	require.NoError(t, tenant.NewStore(pool).EnsureOperatorToken(context.Background(), "bootstrap", adminToken))
	peers.StartOn(t, ca, ln, k.handler())
	k.Client = peers.Client(t, ca, ln.Addr().String())
	return k
}

// handler builds the routes on the kit's database, with caches, limits
// and a delegation cache of their own: another replica on the same
// PostgreSQL each time it is called.
func (k *kit) handler() http.Handler {
	tenants := tenant.NewStore(k.Pool)
	fetch := safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: k.CA.Pool(), Resolver: k.Hosts})
	resolver := agentid.NewResolver(fetch, agentid.Options{})
	recognize := botauth.Recognize(botauth.NewVerifier(fetch, botauth.Options{}), nil, nil)
	sess := sessions.NewManager(sessions.NewVerifier(resolver, sessions.VerifierOptions{}), sessions.NewStore(k.Pool), k.URLs)
	reports := feedback.NewHandler(feedback.NewStore(k.Pool))
	limits := httpx.NewLimiter()
	admin := tenant.NewAdmin(tenants, accounts.NewStore(k.Pool), k.URLs, true)

	platform := newRouter()
	tenant.AdminAPI(platform.With(httpx.RequireText), tenants, admin, admin, sess)
	platform.Route("/company/v1", func(r chi.Router) {
		r.Use(httpx.RequireText, tenant.RequireAPIKey(tenants))
		sess.CompanyAPI(r)
	})
	platform.Route("/t/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(tenants), recognize, tenant.LimitByAddress(limits))
		r.With(reports.BufferReport, sess.Require(limits)).Post("/poppy/feedback", reports.ServeFeedback)
		// whoami answers with what the Session middleware left in the
		// context, for tests of it.
		r.With(sess.Require(limits)).Post("/whoami", func(w http.ResponseWriter, r *http.Request) {
			s := sessions.FromContext(r.Context())
			httpx.WriteJSON(w, http.StatusOK, map[string]any{"sid": s.SID, "new": s.New, "operator": s.Operator})
		})
		// deferred defers its jti (sessions.DeferReplay) and never records
		// it itself: Require must record it when the route returns.
		r.With(sessions.DeferReplay, sess.Require(limits)).Post("/deferred", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		})
	})
	return tenant.HostRouter(tenants, publicHost, platform, newRouter())
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

// StartAgent starts a test Personal Agent on host (default agent.test)
// that the kit can fetch.
func (k *kit) StartAgent(t testing.TB, host string) *peers.Agent {
	t.Helper()
	a := peers.StartAgent(t, k.CA, peers.AgentOptions{Host: host})
	k.Hosts.Add(a.Host)
	return a
}

// URL returns the https URL of path on host as the test server serves it.
func (k *kit) URL(host, path string) string { return "https://" + host + ":" + k.Port + path }

// PublicURL returns the https URL of path on the platform's own host.
func (k *kit) PublicURL(path string) string { return k.URL(publicHost, path) }

// Do sends a request; body is as for [peers.NewRequest], headers are
// name, value pairs.
func (k *kit) Do(t testing.TB, method, rawURL string, body any, headers ...string) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, method, rawURL, body)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return peers.Send(t, k.Client, req)
}

// Admin sends a request to the admin API with the bootstrap token.
func (k *kit) Admin(t testing.TB, method, path string, body any) *peers.Response {
	t.Helper()
	return k.Do(t, method, k.PublicURL(path), body, "Authorization", "Bearer "+adminToken)
}

// feedbackBody is a valid feedback report (spec 9.3).
const feedbackBody = `{"task":"Pay with a gift card","description":"There is no field for a gift card."}`

// company is a Company made for one test or table row, so that row counts
// and rate limits are its own.
type company struct {
	Slug   string
	Domain string
	ID     int64
	// Aud is the Company's identifier (spec 3.2), as the admin API states it.
	Aud string
	// FeedbackURL is POST {PUBLIC}/t/{slug}/poppy/feedback, the first
	// endpoint behind the Session middleware.
	FeedbackURL string
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newCompany creates a Company with a fresh slug and domain; settings are
// merged over the minimal body at the top level.
func newCompany(t testing.TB, env *kit, settings map[string]any) *company {
	t.Helper()
	slug := "c" + randHex(6)
	body := map[string]any{"slug": slug, "organization": map[string]any{"name": "Company " + slug, "domain": slug + ".example"}}
	maps.Copy(body, settings)
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", body)
	require.Equal(t, http.StatusCreated, resp.Status, "create company: %s", resp.Body)
	view := resp.JSON(t)
	c := &company{Slug: slug, Domain: slug + ".example", FeedbackURL: env.PublicURL("/t/" + slug + "/poppy/feedback")}
	c.Aud, _ = view["identifier"].(string)
	require.NotEmpty(t, c.Aud)
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&c.ID))
	return c
}

// claims returns valid Session JWT claims for a POST to c's feedback
// endpoint in Session sid.
func (c *company) claims(sid string) peers.SessionClaims {
	return peers.SessionClaims{Aud: c.Aud, URL: c.FeedbackURL, Method: http.MethodPost, SID: sid, Sub: "usr_" + sid[:8]}
}

// newSID returns a fresh Session ID in the 8.2 alphabet.
func newSID() string { return randHex(16) }

// sessionHeader returns the headers of a request signed with cl and o:
// Poppy-Session, and Authorization when cl carries an access token.
func sessionHeader(t testing.TB, a *peers.Agent, cl peers.SessionClaims, o peers.SessionOptions) http.Header {
	t.Helper()
	h := http.Header{}
	h.Set("Poppy-Session", a.SessionJWT(t, cl, o))
	if cl.AccessToken != "" {
		h.Set("Authorization", "Bearer "+cl.AccessToken)
	}
	return h
}

// post sends a feedback report to u with header.
func post(t testing.TB, env *kit, u string, header http.Header) *peers.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(feedbackBody))
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, env, req)
}

func do(t testing.TB, env *kit, req *http.Request) *peers.Response {
	t.Helper()
	resp, err := env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// send signs a feedback report for c with cl and o and sends it.
func send(t testing.TB, env *kit, a *peers.Agent, c *company, cl peers.SessionClaims, o peers.SessionOptions) *peers.Response {
	t.Helper()
	return post(t, env, c.FeedbackURL, sessionHeader(t, a, cl, o))
}

// requireStatus checks a response's status, showing its body otherwise.
func requireStatus(t testing.TB, resp *peers.Response, status int) {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
}

// requireError checks for a JSON error body with status and code and
// returns its error_description.
func requireError(t testing.TB, resp *peers.Response, status int, code string) string {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "body: %s", resp.Body)
	var e struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &e), "body: %s", resp.Body)
	require.Equal(t, code, e.Error, "body: %s", resp.Body)
	return e.Description
}

// count runs a count(*) query.
func count(t testing.TB, env *kit, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// rows returns how many sessions and feedback rows c has.
func rows(t testing.TB, env *kit, c *company) (sessions, feedback int) {
	t.Helper()
	return count(t, env, `SELECT count(*) FROM sessions WHERE company_id = $1`, c.ID),
		count(t, env, `SELECT count(*) FROM feedback WHERE company_id = $1`, c.ID)
}

// sessionRow is a sessions row as stored.
type sessionRow struct {
	ClientID, SID, UserID, AgentID string
	CreatedAt, LastSeenAt          time.Time
	EndedAt                        *time.Time
}

// getSession reads c's Session (clientID, sid); it must exist.
func getSession(t testing.TB, env *kit, c *company, clientID, sid string) sessionRow {
	t.Helper()
	var s sessionRow
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT client_id, sid, user_id, agent_id, created_at, last_seen_at, ended_at
		FROM sessions WHERE company_id = $1 AND client_id = $2 AND sid = $3`, c.ID, clientID, sid).
		Scan(&s.ClientID, &s.SID, &s.UserID, &s.AgentID, &s.CreatedAt, &s.LastSeenAt, &s.EndedAt))
	return s
}

// exec runs a statement on the test database.
func exec(t testing.TB, env *kit, sql string, args ...any) {
	t.Helper()
	_, err := env.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// apiKey creates a Company API key for c and returns its secret.
func apiKey(t testing.TB, env *kit, c *company) string {
	t.Helper()
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/api-keys", nil)
	requireStatus(t, resp, http.StatusCreated)
	var k struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &k))
	require.NotEmpty(t, k.Key)
	return k.Key
}

// endWithKey ends a Session through POST /company/v1/sessions/end.
func endWithKey(t testing.TB, env *kit, key, clientID, sid string) *peers.Response {
	t.Helper()
	raw, err := json.Marshal(map[string]string{"client_id": clientID, "sid": sid})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, env.PublicURL("/company/v1/sessions/end"), bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	return do(t, env, req)
}
