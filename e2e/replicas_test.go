package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestTwoReplicas runs two server processes on one database behind one
// public host name and checks that a Session, its replay protection and its
// end are shared, and that SIGTERM drains one replica while the other
// keeps serving (issue 9, "Several replicas").
func TestTwoReplicas(t *testing.T) {
	rs := startReplicas(t)
	a, b, dbURL, ca := rs.a, rs.b, rs.dbURL, rs.ca

	// River's periodic sweep runs on its leader only: with two replicas up,
	// exactly one sweep job is inserted and completed (RunOnStart, unique
	// per minute), not one per replica.
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sweeps := func() (n int) {
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM river_job WHERE kind = 'sessions_sweep_jtis' AND state = 'completed'`).Scan(&n))
		return n
	}
	sweepBy := time.Now().Add(30 * time.Second)
	for sweeps() == 0 && time.Now().Before(sweepBy) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // room for a second, wrong sweep to show up
	require.Equal(t, 1, sweeps(), "the periodic sweep ran once across both replicas")

	// "localhost" resolves to loopback through the system resolver the
	// servers use; "agent.localhost" does not on every machine.
	agent := peers.StartAgent(t, ca, peers.AgentOptions{Host: "localhost"})

	resp := a.admin(t, http.MethodPost, "/admin/v1/companies", companyBody("shop"))
	require.Equal(t, http.StatusCreated, resp.status, "create company on A: %s", resp.body)

	const feedbackURL = publicURL + "/t/shop/poppy/feedback"
	sid := "e2e-session-" + strings.Repeat("x", 10)
	report := func(t *testing.T) *http.Request {
		req, err := http.NewRequest(http.MethodPost, feedbackURL,
			strings.NewReader(`{"task":"Pay with a gift card","description":"No API for it"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		return req
	}
	signed := func(t *testing.T) (*http.Request, string) {
		req := report(t)
		agent.Sign(t, req, peers.SessionClaims{Aud: publicURL + "/t/shop", SID: sid}, peers.SessionOptions{})
		return req, req.Header.Get("Poppy-Session")
	}

	// The Session starts on A and continues on B.
	req, firstJWT := signed(t)
	resp = a.do(t, req)
	require.Equal(t, http.StatusAccepted, resp.status, "feedback on A: %s", resp.body)
	req, _ = signed(t)
	resp = b.do(t, req)
	require.Equal(t, http.StatusAccepted, resp.status, "feedback on B, same Session: %s", resp.body)

	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	var rows, reports int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM sessions`).Scan(&rows))
	require.Equal(t, 1, rows, "one Session across both replicas")
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM feedback`).Scan(&reports))
	require.Equal(t, 2, reports)

	// A JWT used on A is refused when replayed to B.
	req = report(t)
	req.Header.Set("Poppy-Session", firstJWT)
	resp = b.do(t, req)
	require.Equal(t, http.StatusBadRequest, resp.status, "replay on B: %s", resp.body)
	require.Equal(t, "invalid_session", resp.errorCode(), "replay on B: %s", resp.body)

	// Ending the Session through B ends it on A.
	resp = b.admin(t, http.MethodPost, "/admin/v1/companies/shop/sessions/end",
		map[string]string{"client_id": agent.ClientID, "sid": sid})
	require.Equal(t, http.StatusNoContent, resp.status, "end Session on B: %s", resp.body)
	req, _ = signed(t)
	resp = a.do(t, req)
	require.Equal(t, http.StatusBadRequest, resp.status, "ended Session on A: %s", resp.body)
	require.Equal(t, "session_ended", resp.errorCode(), "ended Session on A: %s", resp.body)

	// Graceful drain: a request whose body is still arriving when A gets
	// SIGTERM completes; A leaves the load balancer and exits 0; B serves.
	pr, pw := io.Pipe()
	slow, err := http.NewRequest(http.MethodPost, publicURL+"/admin/v1/companies", pr)
	require.NoError(t, err)
	slow.Header.Set("Authorization", "Bearer "+adminToken)
	slow.Header.Set("Content-Type", "application/json")
	type result struct {
		status int
		body   []byte
		err    error
	}
	slowDone := make(chan result, 1)
	go func() {
		resp, err := a.client.Do(slow)
		if err != nil {
			slowDone <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		slowDone <- result{status: resp.StatusCode, body: body, err: err}
	}()
	raw, err := json.Marshal(companyBody("drain"))
	require.NoError(t, err)
	half := len(raw) / 2
	_, err = pw.Write(raw[:half])
	require.NoError(t, err)
	// Let the server start reading the body before the signal.
	time.Sleep(300 * time.Millisecond)

	a.terminate(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := a.probe("/readyz")
		if st == http.StatusServiceUnavailable || st == 0 {
			t.Logf("A's /readyz after SIGTERM: %d (0: connection refused)", st)
			break
		}
		require.True(t, time.Now().Before(deadline), "A's /readyz still %d after SIGTERM", st)
		time.Sleep(20 * time.Millisecond)
	}
	// B keeps serving while A drains.
	resp = b.admin(t, http.MethodGet, "/admin/v1/companies/shop", nil)
	require.Equal(t, http.StatusOK, resp.status, "B while A drains: %s", resp.body)

	_, err = pw.Write(raw[half:])
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	select {
	case r := <-slowDone:
		require.NoError(t, r.err, "slow request on draining A")
		require.Equal(t, http.StatusCreated, r.status, "slow request on draining A: %s", r.body)
	case <-time.After(10 * time.Second):
		t.Fatal("slow request on draining A did not finish")
	}
	require.NoError(t, a.waitExit(t, 15*time.Second), "A's exit status")
	if !strings.Contains(a.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("A did not log a clean stop")
	}

	// B still serves, the Company made on draining A included, and a new
	// Session.
	resp = b.admin(t, http.MethodGet, "/admin/v1/companies/drain", nil)
	require.Equal(t, http.StatusOK, resp.status, "company created during drain, read on B: %s", resp.body)
	sid = "e2e-after-drain-xxxxxx"
	req, _ = signed(t)
	resp = b.do(t, req)
	require.Equal(t, http.StatusAccepted, resp.status, "new Session on B after A stopped: %s", resp.body)
	require.Equal(t, http.StatusOK, b.probe("/readyz"))
}

// replicas are two server processes on one database, with what a test
// needs to start another.
type replicas struct {
	a, b  *server
	dbURL string
	caDir string
	ca    *devca.CA
}

// startReplicas migrates a new database and starts two replicas on it.
func startReplicas(t *testing.T) *replicas {
	t.Helper()
	return startReplicasEnv(t, nil)
}

// startReplicasEnv is startReplicas with more environment variables for
// both servers.
func startReplicasEnv(t *testing.T, extra map[string]string) *replicas {
	t.Helper()
	requireBuilt(t)
	rs := &replicas{dbURL: testdb.NewEmptyDatabase(t), caDir: t.TempDir()}
	migrateUp(t, rs.dbURL)
	var err error
	rs.ca, err = devca.Load(rs.caDir)
	require.NoError(t, err)
	rs.a = startServerEnv(t, "replica A", rs.dbURL, rs.caDir, rs.ca, extra)
	rs.b = startServerEnv(t, "replica B", rs.dbURL, rs.caDir, rs.ca, extra)
	var wg sync.WaitGroup
	for _, s := range []*server{rs.a, rs.b} {
		wg.Go(func() { s.waitReadyErr(t, 30*time.Second) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return rs
}

// waitReadyErr is waitReady for use from a goroutine: it records a failure
// with t.Errorf instead of stopping the goroutine with t.Fatal.
func (s *server) waitReadyErr(t *testing.T, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		if s.probe("/readyz") == http.StatusOK {
			return
		}
		if !s.running() {
			t.Errorf("%s exited before it was ready: %v", s.name, s.err)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s not ready after %s", s.name, within)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
