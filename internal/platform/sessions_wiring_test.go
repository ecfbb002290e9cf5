package platform_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The Session middleware as the whole platform mounts it: in front of
// every endpoint that takes a Session, behind the limit per address that
// every Company route counts against. Its checks are tested in
// internal/sessions.

// sessCompany is a Company made for one test, so that row counts and rate
// limits are its own.
type sessCompany struct {
	Slug, Domain string
	ID           int64
	// Aud is the Company's identifier (spec 3.2).
	Aud string
	// FeedbackURL is POST {PUBLIC}/t/{slug}/poppy/feedback.
	FeedbackURL string
}

// sessID returns a fresh Session ID in the 8.2 alphabet.
func sessID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newSessCompany creates a Company with a fresh slug and domain; settings
// are merged over the minimal body at the top level.
func newSessCompany(t *testing.T, env *testkit.Env, settings map[string]any) *sessCompany {
	t.Helper()
	slug := "c" + sessID()[:12]
	body := map[string]any{"slug": slug, "organization": map[string]any{"name": "Company " + slug, "domain": slug + ".example"}}
	maps.Copy(body, settings)
	view := env.CreateCompany(t, body)
	c := &sessCompany{Slug: slug, Domain: slug + ".example", FeedbackURL: env.PublicURL("/t/" + slug + "/poppy/feedback")}
	c.Aud, _ = view["identifier"].(string)
	require.NotEmpty(t, c.Aud)
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&c.ID))
	return c
}

// sessPost sends a feedback report to u with header.
func sessPost(t *testing.T, env *testkit.Env, u string, header http.Header) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, http.MethodPost, u, `{"task":"Pay with a gift card","description":"There is no field for a gift card."}`)
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	return peers.Send(t, env.Client, req)
}

// sessSend sends c a feedback report signed by a in Session sid.
func sessSend(t *testing.T, env *testkit.Env, a *peers.Agent, c *sessCompany, sid string) *peers.Response {
	t.Helper()
	h := http.Header{}
	h.Set("Poppy-Session", a.SessionJWT(t, peers.SessionClaims{Aud: c.Aud, URL: c.FeedbackURL, Method: http.MethodPost,
		SID: sid, Sub: "usr_" + sid[:8]}, peers.SessionOptions{}))
	return sessPost(t, env, c.FeedbackURL, h)
}

// sessRows returns how many sessions and feedback rows c has.
func sessRows(t *testing.T, env *testkit.Env, c *sessCompany) (sessions, feedback int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE company_id = $1`, c.ID).Scan(&sessions))
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM feedback WHERE company_id = $1`, c.ID).Scan(&feedback))
	return sessions, feedback
}

// requireSessStatus checks a response's status, showing its body otherwise.
func requireSessStatus(t *testing.T, resp *peers.Response, status int) {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
}

// requireSessError checks for a JSON error body with status and code and
// returns its error_description.
func requireSessError(t *testing.T, resp *peers.Response, status int, code string) string {
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

// requireSessRateLimited checks for 429 with Retry-After and rate_limited
// (spec 5.6).
func requireSessRateLimited(t *testing.T, resp *peers.Response) {
	t.Helper()
	requireSessError(t, resp, http.StatusTooManyRequests, "rate_limited")
	after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	require.Positive(t, after)
}

// TestHostileSessionClaims: a NUL in a Session JWT's claims, which
// PostgreSQL text refuses, is invalid_session at every endpoint behind the
// Session middleware, before anything is written.
func TestHostileSessionClaims(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	a := env.StartAgent(t, "")
	c := newSessCompany(t, env, map[string]any{
		"web":        map[string]any{"browser_join": true, "origin": "https://origin.example"},
		"operations": map[string]any{"enabled": true, "web": true},
		"mcp":        map[string]any{"signed_out": true},
	})
	issuer := "/t/" + c.Slug
	// Nothing is written: checked once every subtest has run.
	t.Cleanup(func() {
		sessions, _ := sessRows(t, env, c)
		require.Zero(t, sessions)
		var jtis int
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM session_jtis WHERE company_id = $1`, c.ID).Scan(&jtis))
		require.Zero(t, jtis)
	})
	endpoints := []struct{ name, method, url string }{
		{"feedback", http.MethodPost, c.FeedbackURL},
		{"conversations", http.MethodPost, env.PublicURL(issuer + "/poppy/conversations")},
		{"gateway", http.MethodGet, env.PublicURL(issuer + "/api/orders/v1/orders")},
		{"mcp", http.MethodPost, env.PublicURL(issuer + "/mcp")},
		{"operations", http.MethodPost, env.PublicURL(issuer + "/poppy/operations")},
		{"browser-session authorize", http.MethodPost, env.URL(c.Domain, "/poppy/browser-session/authorize")},
	}
	for _, e := range endpoints {
		for _, claim := range []string{"sub", "agent_id", "jti", "iss"} {
			t.Run(e.name+" "+claim, func(t *testing.T) {
				t.Parallel()
				req := peers.NewRequest(t, e.method, e.url, `{}`)
				a.Sign(t, req, peers.SessionClaims{Aud: c.Aud}, peers.SessionOptions{MutateClaims: func(m map[string]any) {
					if s, _ := m[claim].(string); s != "" {
						m[claim] = s[:len(s)/2] + "\x00" + s[len(s)/2:]
					} else {
						m[claim] = "a\x00b"
					}
				}})
				desc := requireSessError(t, peers.Send(t, env.Client, req), http.StatusBadRequest, "invalid_session")
				require.Contains(t, desc, claim)
			})
		}
	}
}

// TestRateLimitPerAddress: the budget per address (spec 5.6) counts every
// request to a Company, on its domain and under /t/{slug}, and refuses
// before the Session header is looked at; another Company's budget is its
// own.
func TestRateLimitPerAddress(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	a := env.StartAgent(t, "")
	c := newSessCompany(t, env, map[string]any{"rate_limits": map[string]any{"per_address": 3}})
	poppyJSON := env.URL(c.Domain, "/.well-known/poppy.json")
	requireSessStatus(t, env.Do(t, http.MethodGet, poppyJSON, nil), http.StatusOK)
	requireSessStatus(t, env.Do(t, http.MethodGet, env.PublicURL("/t/"+c.Slug+"/poppy/excluded-tasks.json"), nil), http.StatusNotFound)
	requireSessStatus(t, sessSend(t, env, a, c, sessID()), http.StatusAccepted)

	requireSessRateLimited(t, env.Do(t, http.MethodGet, poppyJSON, nil))
	requireSessRateLimited(t, sessSend(t, env, a, c, sessID()))
	// Refused before the Session header is looked at.
	requireSessRateLimited(t, sessPost(t, env, c.FeedbackURL, nil))
	sessions, feedback := sessRows(t, env, c)
	require.Equal(t, []int{1, 1}, []int{sessions, feedback})

	// Another Company's budget is its own.
	other := newSessCompany(t, env, nil)
	requireSessStatus(t, env.Do(t, http.MethodGet, env.URL(other.Domain, "/.well-known/poppy.json"), nil), http.StatusOK)
}
