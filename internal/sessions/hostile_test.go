package sessions_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Hostile input at the Session boundary: a NUL in the body of
// sessions/end is invalid_request. A NUL in a Session JWT's claims is
// TestHostileSessionClaims in internal/platform, at every endpoint behind
// the Session middleware.

func TestHostileSessionsEnd(t *testing.T) {
	t.Parallel()
	env := setup(t)
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
	env := setup(t)
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
