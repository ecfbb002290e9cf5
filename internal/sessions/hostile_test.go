package sessions_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Hostile input at the Session boundary: a NUL in a Session JWT's claims,
// which PostgreSQL text refuses, is invalid_session at every endpoint
// behind the Session middleware, before anything is written; a NUL in the
// body of sessions/end is invalid_request.

func TestHostileSessionClaims(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	a := env.StartAgent(t, "")
	c := newCompany(t, env, map[string]any{
		"web":        map[string]any{"browser_join": true, "origin": "https://origin.example"},
		"operations": map[string]any{"enabled": true, "web": true},
		"mcp":        map[string]any{"signed_out": true},
	})
	issuer := "/t/" + c.Slug
	// Nothing is written: checked once every subtest has run.
	t.Cleanup(func() {
		sessions, _ := rows(t, env, c)
		require.Zero(t, sessions)
		require.Zero(t, count(t, env, `SELECT count(*) FROM session_jtis WHERE company_id = $1`, c.ID))
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
				desc := requireError(t, do(t, env, req), http.StatusBadRequest, "invalid_session")
				require.Contains(t, desc, claim)
			})
		}
	}
}

func TestHostileSessionsEnd(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	a := env.StartAgent(t, "")
	c := newCompany(t, env, nil)
	sid := newSID()
	requireStatus(t, send(t, env, a, c, c.claims(sid), peers.SessionOptions{}), http.StatusAccepted)
	key := apiKey(t, env, c)
	for _, body := range []string{
		`{"client_id":"a\u0000b","sid":"` + sid + `"}`,
		`{"client_id":"` + strings.Replace(a.ClientID, "/", `\u0000/`, 1) + `","sid":"` + sid + `"}`,
	} {
		for name, send := range map[string]func() *peers.Response{
			"company": func() *peers.Response {
				return env.Do(t, http.MethodPost, env.PublicURL("/company/v1/sessions/end"), body, "Authorization", "Bearer "+key)
			},
			"admin": func() *peers.Response {
				return env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/sessions/end", body)
			},
		} {
			desc := requireError(t, send(), http.StatusBadRequest, "invalid_request")
			require.Contains(t, desc, "client_id", name)
		}
	}
	require.Nil(t, getSession(t, env, c, a.ClientID, sid).EndedAt, "the Session is not ended")
}

// TestStallingMetadata: a Personal Agent whose metadata document never
// answers holds its first request for the fetch deadline (3 s), and the
// failure is remembered, so the next requests are refused at once
// without fetching again.
func TestStallingMetadata(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	a := env.StartAgent(t, "stalling-agent.test")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	a.Serve("/agent.json", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	c := newCompany(t, env, nil)
	start := time.Now()
	desc := requireError(t, send(t, env, a, c, c.claims(newSID()), peers.SessionOptions{}), http.StatusBadRequest, "invalid_session")
	took := time.Since(start)
	require.Contains(t, desc, "could not be fetched")
	// Bounds generous for a loaded machine: the deadline, well under the
	// 10 s of a whole fetch.
	require.GreaterOrEqual(t, took, 3*time.Second)
	require.Less(t, took, 8*time.Second)

	for range 3 {
		start = time.Now()
		requireError(t, send(t, env, a, c, c.claims(newSID()), peers.SessionOptions{}), http.StatusBadRequest, "invalid_session")
		require.Less(t, time.Since(start), 2*time.Second, "refused from the remembered failure")
	}
	require.Equal(t, 1, a.Hits("/agent.json"))
	sessions, _ := rows(t, env, c)
	require.Zero(t, sessions)
}
