package replicas_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/replicas"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// fast beats often, so that the tests see changes soon.
var fast = replicas.Options{Every: 50 * time.Millisecond, Stale: 400 * time.Millisecond}

// replica is one server replica's share of the state: its own pool to the
// shared database, its heartbeat and its limiter.
type replica struct {
	counter *replicas.Counter
	limits  *httpx.Limiter
	stop    func()
}

func startReplica(t *testing.T, dbURL string) *replica {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := replicas.New(pool, fast)
	require.NoError(t, err)
	r := &replica{counter: c, limits: httpx.NewSharedLimiter(c.Live), stop: c.Start(context.Background())}
	t.Cleanup(r.stop)
	return r
}

func waitLive(t *testing.T, what string, want int, rs ...*replica) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, r := range rs {
			ok = ok && r.counter.Live() == want
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the replicas never all counted %d", what, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLimitHoldsAcrossReplicas: two replicas sharing a database allow
// together at most the limit plus one less than the replicas (each
// rounds its share up), however a client's requests spread over them;
// without sharing they would allow twice the limit.
func TestLimitHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewDatabase(t)
	a, b := startReplica(t, dbURL), startReplica(t, dbURL)
	waitLive(t, "two replicas", 2, a, b)

	const limit = 25
	handler := func(r *replica) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if r.limits.Allow(w, req, "addr 198.51.100.7", limit) {
				w.WriteHeader(http.StatusNoContent)
			}
		})
	}
	spreads := map[string]func(i int) *replica{
		"alternating":  func(i int) *replica { return []*replica{a, b}[i%2] },
		"mostly on a":  func(i int) *replica { return []*replica{a, a, a, b}[i%4] },
		"all on one":   func(int) *replica { return b },
		"bursts of 10": func(i int) *replica { return []*replica{a, b}[(i/10)%2] },
	}
	for name, pick := range spreads {
		// A key of its own per spread: the counts do not mix.
		key := "addr " + name
		allowed := 0
		for i := range 4 * limit {
			r := pick(i)
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			if r.limits.Allow(rec, req, key, limit) {
				allowed++
				continue
			}
			require.Equal(t, http.StatusTooManyRequests, rec.Code, name)
			require.NotEmpty(t, rec.Header().Get("Retry-After"), name)
		}
		tolerance := 2 - 1
		require.LessOrEqual(t, allowed, limit+tolerance, "%s: allowed across both replicas", name)
		t.Logf("%s: %d allowed of a limit of %d", name, allowed, limit)
	}
	// Evenly spread, the replicas together allow the whole limit.
	allowed := 0
	for i := range 4 * limit {
		rec := httptest.NewRecorder()
		handler([]*replica{a, b}[i%2]).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code == http.StatusNoContent {
			allowed++
		}
	}
	require.GreaterOrEqual(t, allowed, limit, "an even spread gets the whole limit")
	require.LessOrEqual(t, allowed, limit+1)
}

// TestReplicaThatStopsBeatingIsDropped: a replica whose heartbeat stops,
// as when its process is killed, stops being counted once its row is
// stale, and its row is deleted; one that stops cleanly is dropped at the
// others' next beat.
func TestReplicaThatStopsBeatingIsDropped(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewDatabase(t)
	a, b := startReplica(t, dbURL), startReplica(t, dbURL)
	waitLive(t, "two replicas", 2, a, b)

	// A third replica beats once and dies: no clean stop removes its row.
	dead, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(dead.Close)
	_, err = dead.Exec(context.Background(), `INSERT INTO replica_heartbeats (id, seen_at) VALUES ('killed', now())`)
	require.NoError(t, err)
	waitLive(t, "the third replica counted", 3, a, b)
	require.Equal(t, 9, a.limits.Share(25), "a third of the limit, rounded up")
	waitLive(t, "the killed replica dropped", 2, a, b)
	var left int
	require.NoError(t, dead.QueryRow(context.Background(), `SELECT count(*) FROM replica_heartbeats WHERE id = 'killed'`).Scan(&left))
	require.Zero(t, left, "a stale row is deleted")

	b.stop()
	waitLive(t, "b stopped", 1, a)
	require.Equal(t, 25, a.limits.Share(25), "alone, a replica has the whole limit")
}
