package sessions_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestSessionStore covers spec 5.3 step 4 and 5.5 through HTTP: starting
// and continuing Sessions, ending them, idle timeouts and last_seen_at.
// The subtests share one platform; each has its own Company.
func TestSessionStore(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := env.StartAgent(t, "")
	none := peers.SessionOptions{}

	t.Run("unknown sid starts a Session", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		cl := c.claims(newSID())
		cl.AgentID = "agt_shopping"
		before := time.Now()
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)

		s := getSession(t, env, c, a.ClientID, cl.SID)
		require.Equal(t, sessionRow{ClientID: a.ClientID, SID: cl.SID, UserID: cl.Sub, AgentID: "agt_shopping",
			CreatedAt: s.CreatedAt, LastSeenAt: s.CreatedAt}, s)
		require.WithinDuration(t, before, s.CreatedAt, 5*time.Second)

		// The report is attributed to the verified Session (9.3).
		var client, user, agent, sid string
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT client_id, user_id, agent_id, sid FROM feedback
			WHERE company_id = $1`, c.ID).Scan(&client, &user, &agent, &sid))
		require.Equal(t, []string{a.ClientID, cl.Sub, "agt_shopping", cl.SID}, []string{client, user, agent, sid})

		// Its jti is remembered for the acceptance window, 60 s + 5 s.
		var expires time.Time
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT expires_at FROM session_jtis
			WHERE company_id = $1 AND client_id = $2`, c.ID, a.ClientID).Scan(&expires))
		require.WithinDuration(t, time.Now().Add(65*time.Second), expires, 5*time.Second)
	})

	t.Run("known sid needs the same sub and agent_id", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name          string
			first, second func(*peers.SessionClaims)
		}{
			{"other sub", nil, func(cl *peers.SessionClaims) { cl.Sub = "usr_someone_else" }},
			{"other agent_id", func(cl *peers.SessionClaims) { cl.AgentID = "agt_a" }, func(cl *peers.SessionClaims) { cl.AgentID = "agt_b" }},
			{"agent_id dropped", func(cl *peers.SessionClaims) { cl.AgentID = "agt_a" }, nil},
			{"agent_id added", nil, func(cl *peers.SessionClaims) { cl.AgentID = "agt_a" }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := newCompany(t, env, nil)
				sid := newSID()
				first, second := c.claims(sid), c.claims(sid)
				if tc.first != nil {
					tc.first(&first)
				}
				if tc.second != nil {
					tc.second(&second)
				}
				requireStatus(t, send(t, env, a, c, first, none), http.StatusAccepted)
				before := getSession(t, env, c, a.ClientID, sid)

				desc := requireError(t, send(t, env, a, c, second, none), http.StatusBadRequest, "invalid_session")
				require.Contains(t, desc, "User ID and Agent ID")
				require.Equal(t, before, getSession(t, env, c, a.ClientID, sid))
				_, feedback := rows(t, env, c)
				require.Equal(t, 1, feedback)
				// The Session still works for its own User.
				requireStatus(t, send(t, env, a, c, first, none), http.StatusAccepted)
			})
		}
	})

	t.Run("ended with the Company API", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		key := apiKey(t, env, c)
		cl := c.claims(newSID())
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)

		requireStatus(t, endWithKey(t, env, key, a.ClientID, cl.SID), http.StatusNoContent)
		ended := getSession(t, env, c, a.ClientID, cl.SID).EndedAt
		require.NotNil(t, ended)
		for range 2 {
			desc := requireError(t, send(t, env, a, c, cl, none), http.StatusBadRequest, "session_ended")
			require.Contains(t, desc, "new sid")
		}
		// Ending again is fine and keeps the first end.
		requireStatus(t, endWithKey(t, env, key, a.ClientID, cl.SID), http.StatusNoContent)
		require.Equal(t, ended, getSession(t, env, c, a.ClientID, cl.SID).EndedAt)
		_, feedback := rows(t, env, c)
		require.Equal(t, 1, feedback)

		// A new sid starts a new Session (5.5).
		requireStatus(t, send(t, env, a, c, c.claims(newSID()), none), http.StatusAccepted)
	})

	t.Run("ended with the admin API", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		cl := c.claims(newSID())
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/sessions/end",
			map[string]string{"client_id": a.ClientID, "sid": cl.SID})
		requireStatus(t, resp, http.StatusNoContent)
		requireError(t, send(t, env, a, c, cl, none), http.StatusBadRequest, "session_ended")
		requireError(t, send(t, env, a, c, cl, none), http.StatusBadRequest, "session_ended")
	})

	t.Run("ending what is not there", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		key := apiKey(t, env, c)
		requireError(t, endWithKey(t, env, key, a.ClientID, newSID()), http.StatusNotFound, "not_found")
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/sessions/end",
			map[string]string{"client_id": a.ClientID, "sid": newSID()})
		requireError(t, resp, http.StatusNotFound, "not_found")
		requireError(t, endWithKey(t, env, key, "", newSID()), http.StatusBadRequest, "invalid_request")
		requireError(t, endWithKey(t, env, key, a.ClientID, "not a sid"), http.StatusBadRequest, "invalid_request")
		resp = env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/sessions/end",
			map[string]string{"client_id": a.ClientID, "sid": newSID(), "extra": "x"})
		requireError(t, resp, http.StatusBadRequest, "invalid_request")
		// No API key, no ending.
		requireError(t, endWithKey(t, env, "wrong", a.ClientID, newSID()), http.StatusUnauthorized, "unauthorized")
	})

	t.Run("a Company cannot end another Company's Session", func(t *testing.T) {
		t.Parallel()
		mine, other := newCompany(t, env, nil), newCompany(t, env, nil)
		cl := mine.claims(newSID())
		requireStatus(t, send(t, env, a, mine, cl, none), http.StatusAccepted)

		requireError(t, endWithKey(t, env, apiKey(t, env, other), a.ClientID, cl.SID), http.StatusNotFound, "not_found")
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+other.Slug+"/sessions/end",
			map[string]string{"client_id": a.ClientID, "sid": cl.SID})
		requireError(t, resp, http.StatusNotFound, "not_found")

		require.Nil(t, getSession(t, env, mine, a.ClientID, cl.SID).EndedAt)
		requireStatus(t, send(t, env, a, mine, cl, none), http.StatusAccepted)
	})

	t.Run("Sessions are per Company", func(t *testing.T) {
		t.Parallel()
		c1, c2 := newCompany(t, env, nil), newCompany(t, env, nil)
		sid, jti := newSID(), newSID()
		cl1, cl2 := c1.claims(sid), c2.claims(sid)
		cl1.JTI, cl2.JTI = jti, jti
		cl2.Sub = "usr_other_company"
		// The same sid, and even the same jti, at two Companies are two
		// Sessions and two requests.
		requireStatus(t, send(t, env, a, c1, cl1, none), http.StatusAccepted)
		requireStatus(t, send(t, env, a, c2, cl2, none), http.StatusAccepted)
		require.Equal(t, cl1.Sub, getSession(t, env, c1, a.ClientID, sid).UserID)
		require.Equal(t, cl2.Sub, getSession(t, env, c2, a.ClientID, sid).UserID)

		requireStatus(t, endWithKey(t, env, apiKey(t, env, c1), a.ClientID, sid), http.StatusNoContent)
		cl1.JTI, cl2.JTI = "", ""
		requireError(t, send(t, env, a, c1, cl1, none), http.StatusBadRequest, "session_ended")
		requireStatus(t, send(t, env, a, c2, cl2, none), http.StatusAccepted)
	})

	t.Run("Sessions are per Personal Agent", func(t *testing.T) {
		t.Parallel()
		b := env.StartAgent(t, "other-agent.test")
		c := newCompany(t, env, nil)
		sid, jti := newSID(), newSID()
		cl := c.claims(sid)
		cl.JTI = jti
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		cl.Sub = "usr_of_b"
		requireStatus(t, send(t, env, b, c, cl, none), http.StatusAccepted)
		sessions, _ := rows(t, env, c)
		require.Equal(t, 2, sessions)
	})

	t.Run("concurrent first requests start one Session", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		cl := c.claims(newSID())
		headers := make([]http.Header, 8)
		for i := range headers {
			headers[i] = sessionHeader(t, a, cl, none)
		}
		// No require in the goroutines: FailNow belongs to the test's own.
		statuses := make(chan error, len(headers))
		for _, h := range headers {
			go func() {
				req, err := http.NewRequest(http.MethodPost, c.FeedbackURL, strings.NewReader(feedbackBody))
				if err != nil {
					statuses <- err
					return
				}
				req.Header = h
				req.Header.Set("Content-Type", "application/json")
				resp, err := env.Client.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				statuses <- err
			}()
		}
		for range headers {
			require.NoError(t, <-statuses)
		}
		sessions, feedback := rows(t, env, c)
		require.Equal(t, []int{1, len(headers)}, []int{sessions, feedback})
	})

	t.Run("Get is scoped to the Company", func(t *testing.T) {
		t.Parallel()
		mine, other := newCompany(t, env, nil), newCompany(t, env, nil)
		cl := mine.claims(newSID())
		cl.AgentID = "agt_1"
		requireStatus(t, send(t, env, a, mine, cl, none), http.StatusAccepted)
		store := sessions.NewStore(env.Pool)
		ctx := context.Background()

		s, err := store.Get(ctx, mine.ID, a.ClientID, cl.SID)
		require.NoError(t, err)
		row := getSession(t, env, mine, a.ClientID, cl.SID)
		require.Equal(t, sessionRow{ClientID: s.ClientID, SID: s.SID, UserID: s.UserID, AgentID: s.AgentID,
			CreatedAt: s.CreatedAt, LastSeenAt: s.LastSeenAt, EndedAt: s.EndedAt}, row)
		require.Equal(t, mine.ID, s.CompanyID)

		_, err = store.Get(ctx, other.ID, a.ClientID, cl.SID)
		require.ErrorIs(t, err, sessions.ErrNotFound)
		require.ErrorIs(t, store.End(ctx, other.ID, a.ClientID, cl.SID, time.Now()), sessions.ErrNotFound)
		_, err = store.Get(ctx, mine.ID, a.ClientID, newSID())
		require.ErrorIs(t, err, sessions.ErrNotFound)
	})

	t.Run("idle timeout ends the Session", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, map[string]any{"sessions": map[string]any{"idle_timeout_seconds": 60}})
		cl := c.claims(newSID())
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		exec(t, env, `UPDATE sessions SET last_seen_at = now() - interval '10 minutes' WHERE company_id = $1`, c.ID)

		desc := requireError(t, send(t, env, a, c, cl, none), http.StatusBadRequest, "session_ended")
		require.Contains(t, desc, "unused")
		require.NotNil(t, getSession(t, env, c, a.ClientID, cl.SID).EndedAt)
		// It stays ended, even though the idle clock no longer matters.
		exec(t, env, `UPDATE sessions SET last_seen_at = now() WHERE company_id = $1`, c.ID)
		requireError(t, send(t, env, a, c, cl, none), http.StatusBadRequest, "session_ended")
		_, feedback := rows(t, env, c)
		require.Equal(t, 1, feedback)
		requireStatus(t, send(t, env, a, c, c.claims(newSID()), none), http.StatusAccepted)
	})

	t.Run("a Session used more often than its idle timeout stays", func(t *testing.T) {
		t.Parallel()
		// One request every 50 s with a 60 s idle timeout: each step moves
		// the clock by moving last_seen_at back.
		c := newCompany(t, env, map[string]any{"sessions": map[string]any{"idle_timeout_seconds": 60}})
		cl := c.claims(newSID())
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		for range 3 {
			exec(t, env, `UPDATE sessions SET last_seen_at = last_seen_at - interval '50 seconds' WHERE company_id = $1`, c.ID)
			requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		}
		require.Nil(t, getSession(t, env, c, a.ClientID, cl.SID).EndedAt)
	})

	t.Run("last_seen_at is written only when stale", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		cl := c.claims(newSID())
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		first := getSession(t, env, c, a.ClientID, cl.SID)
		for range 2 {
			requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		}
		require.Equal(t, first, getSession(t, env, c, a.ClientID, cl.SID))

		exec(t, env, `UPDATE sessions SET last_seen_at = last_seen_at - interval '2 minutes' WHERE company_id = $1`, c.ID)
		moved := getSession(t, env, c, a.ClientID, cl.SID).LastSeenAt
		requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		touched := getSession(t, env, c, a.ClientID, cl.SID)
		require.True(t, touched.LastSeenAt.After(moved.Add(time.Minute)), "last_seen_at %s, moved to %s", touched.LastSeenAt, moved)
		require.WithinDuration(t, time.Now(), touched.LastSeenAt, 5*time.Second)
		require.Equal(t, first.CreatedAt, touched.CreatedAt)
	})
}

// serve sends a feedback report to h in process.
func serve(h http.Handler, u string, header http.Header) *peers.Response {
	req := httptest.NewRequest(http.MethodPost, u, strings.NewReader(feedbackBody))
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return &peers.Response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

// TestReplayAcrossReplicas sends one Session JWT to two replicas on the
// same database: the jti is remembered in PostgreSQL, so the second is
// refused whichever replica sees it first (spec 5.3 "Replayed JWTs").
func TestReplayAcrossReplicas(t *testing.T) {
	t.Parallel()
	env := setup(t)
	second := env.handler()
	a := env.StartAgent(t, "")
	c := newCompany(t, env, nil)
	sid := newSID()

	h := sessionHeader(t, a, c.claims(sid), peers.SessionOptions{})
	requireStatus(t, post(t, env, c.FeedbackURL, h), http.StatusAccepted)
	desc := requireError(t, serve(second, c.FeedbackURL, h), http.StatusBadRequest, "invalid_session")
	require.Contains(t, desc, "already used")

	h = sessionHeader(t, a, c.claims(sid), peers.SessionOptions{})
	requireStatus(t, serve(second, c.FeedbackURL, h), http.StatusAccepted)
	desc = requireError(t, post(t, env, c.FeedbackURL, h), http.StatusBadRequest, "invalid_session")
	require.Contains(t, desc, "already used")

	sessions, feedback := rows(t, env, c)
	require.Equal(t, 1, sessions)
	require.Equal(t, 2, feedback)
}

// requireRateLimited checks for 429 with Retry-After and rate_limited
// (spec 5.6).
func requireRateLimited(t testing.TB, resp *peers.Response) {
	t.Helper()
	requireError(t, resp, http.StatusTooManyRequests, "rate_limited")
	after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	require.Positive(t, after)
}

// TestRateLimits covers the Session's two budgets of spec 5.6; the one per
// address, on every Company route, is TestRateLimitPerAddress in
// internal/platform. Each subtest has its own Company, so its own
// counters.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := env.StartAgent(t, "")
	none := peers.SessionOptions{}

	t.Run("per agent", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, map[string]any{"rate_limits": map[string]any{"per_agent": 2}})
		for range 2 {
			requireStatus(t, send(t, env, a, c, c.claims(newSID()), none), http.StatusAccepted)
		}
		requireRateLimited(t, send(t, env, a, c, c.claims(newSID()), none))
		// Invalid requests are not the agent's: they are refused first and
		// not counted against it.
		requireError(t, post(t, env, c.FeedbackURL, nil), http.StatusBadRequest, "invalid_session")
		_, feedback := rows(t, env, c)
		require.Equal(t, 2, feedback)

		b := env.StartAgent(t, "second-agent.test")
		requireStatus(t, send(t, env, b, c, c.claims(newSID()), none), http.StatusAccepted)
	})

	t.Run("per session", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, map[string]any{"rate_limits": map[string]any{"per_session": 2}})
		cl := c.claims(newSID())
		for range 2 {
			requireStatus(t, send(t, env, a, c, cl, none), http.StatusAccepted)
		}
		requireRateLimited(t, send(t, env, a, c, cl, none))
		_, feedback := rows(t, env, c)
		require.Equal(t, 2, feedback)
		requireStatus(t, send(t, env, a, c, c.claims(newSID()), none), http.StatusAccepted)
	})
}

// TestSweepJTIs checks that the sweep forgets only jtis past their window,
// called directly and as River works the job.
func TestSweepJTIs(t *testing.T) {
	t.Parallel()
	env := setup(t)
	c := newCompany(t, env, nil)
	ctx := context.Background()
	store := sessions.NewStore(env.Pool)

	insert := func(jti string, expires time.Duration) {
		exec(t, env, `INSERT INTO session_jtis (company_id, client_id, jti, expires_at) VALUES ($1, 'https://agent.test/agent.json', $2, now() + $3::interval)`,
			c.ID, jti, strconv.Itoa(int(expires.Seconds()))+" seconds")
	}
	left := func() []string {
		rows, err := env.Pool.Query(ctx, `SELECT jti FROM session_jtis WHERE company_id = $1 ORDER BY jti`, c.ID)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}

	insert("expired-1", -time.Second)
	insert("expired-2", -time.Hour)
	insert("live-1", time.Minute)
	insert("live-2", time.Hour)
	n, err := store.SweepJTIs(ctx, time.Now())
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{"live-1", "live-2"}, left())

	// Through River, as the platform runs it, with the jobs' clock two
	// minutes ahead: live-1 is now past its window too.
	insert("expired-3", -time.Minute)
	sweeps := sessions.Sweeps(store)
	testdb.RunSweeps(t, env.Pool, func() time.Time { return time.Now().Add(2 * time.Minute) }, sweeps...)
	require.Equal(t, []string{"live-2"}, left())

	// One sweep a minute, under the kind queued rows carry.
	require.Len(t, sweeps, 1)
	require.Equal(t, "sessions_sweep_jtis", sweeps[0].Name)
	require.Equal(t, time.Minute, sweeps[0].Every)
}

// TestBindAccountConcurrent races first requests of one Session for two
// accounts: exactly one account wins (spec 5.4).
func TestBindAccountConcurrent(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := env.StartAgent(t, "")
	c := newCompany(t, env, nil)
	store := sessions.NewStore(env.Pool)
	ctx := context.Background()
	accountID := func(user string) int64 {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/accounts",
			map[string]any{"username": user, "password": "correct horse battery staple"})
		requireStatus(t, resp, http.StatusCreated)
		var id int64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT id FROM accounts WHERE company_id = $1 AND username = $2`,
			c.ID, user).Scan(&id))
		return id
	}
	ada, bob := accountID("ada"), accountID("bob")
	bound := func(sid string) *int64 {
		var id *int64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT account_id FROM sessions WHERE company_id = $1
			AND client_id = $2 AND sid = $3`, c.ID, a.ClientID, sid).Scan(&id))
		return id
	}
	// A Session row, started by a signed-out request.
	sid := newSID()
	requireStatus(t, send(t, env, a, c, c.claims(sid), peers.SessionOptions{}), http.StatusAccepted)
	require.Nil(t, bound(sid))

	results := make(chan bool, 20)
	for i := range 20 {
		go func() {
			acct := ada
			if i%2 == 1 {
				acct = bob
			}
			ok, err := store.BindAccount(ctx, c.ID, a.ClientID, sid, acct)
			if err != nil {
				t.Error(err)
			}
			results <- ok
		}()
	}
	wins := 0
	for range 20 {
		if <-results {
			wins++
		}
	}
	require.Equal(t, 10, wins, "every request for the first account bound wins, every other loses")
	require.Contains(t, []int64{ada, bob}, *bound(sid))

	ok, err := store.BindAccount(ctx, c.ID, a.ClientID, "no-such-sid", ada)
	require.ErrorIs(t, err, sessions.ErrNotFound)
	require.False(t, ok)
}

// TestDeferredReplayRecorded sends one Session JWT twice to a route that
// defers its jti (sessions.DeferReplay) and never records it: Require
// records it when the route returns, so the second is refused (spec 5.3
// "Replayed JWTs").
func TestDeferredReplayRecorded(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := env.StartAgent(t, "")
	c := newCompany(t, env, nil)
	cl := c.claims(newSID())
	cl.URL = env.PublicURL("/t/" + c.Slug + "/deferred")

	h := sessionHeader(t, a, cl, peers.SessionOptions{})
	requireStatus(t, post(t, env, cl.URL, h), http.StatusNoContent)
	desc := requireError(t, post(t, env, cl.URL, h), http.StatusBadRequest, "invalid_session")
	require.Contains(t, desc, "already used")
}
