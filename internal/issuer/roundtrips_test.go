package issuer_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// tripRecorder counts the round trips to PostgreSQL of the pool it
// traces: each statement sent alone (BEGIN and COMMIT included) is one,
// and so is each batch, however many statements it pipelines. Preparing
// a statement, once per connection in pgx's default mode, is not
// counted: it leaves the steady state. While recording it also keeps the
// statements of each round trip.
type tripRecorder struct {
	mu        sync.Mutex
	count     int64
	recording bool
	trips     [][]string
	// batches are the round trips of the batches under way, by
	// connection.
	batches map[*pgx.Conn]int
}

// TraceQueryStart counts a statement sent alone.
func (r *tripRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trip(d.SQL)
	return ctx
}

// TraceQueryEnd does nothing.
func (r *tripRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch.
func (r *tripRecorder) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.batches == nil {
		r.batches = map[*pgx.Conn]int{}
	}
	r.batches[conn] = r.trip()
	return ctx
}

// TraceBatchQuery keeps a statement of a batch with the batch's round
// trip.
func (r *tripRecorder) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.batches[conn]; ok && i >= 0 {
		r.trips[i] = append(r.trips[i], oneLine(d.SQL))
	}
}

// TraceBatchEnd ends a batch.
func (r *tripRecorder) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.batches, conn)
}

// trip counts a round trip and, while recording, keeps its statements
// and returns its index; -1 when not recording.
func (r *tripRecorder) trip(sql ...string) int {
	r.count++
	if !r.recording {
		return -1
	}
	for i := range sql {
		sql[i] = oneLine(sql[i])
	}
	r.trips = append(r.trips, sql)
	return len(r.trips) - 1
}

// Count is how many round trips the pool made so far.
func (r *tripRecorder) Count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Record runs f and returns the round trips the pool made meanwhile,
// each with its statements.
func (r *tripRecorder) Record(f func()) [][]string {
	r.mu.Lock()
	r.recording, r.trips = true, nil
	r.mu.Unlock()
	f()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recording = false
	return r.trips
}

func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// TestRefreshRoundTrips: a refresh costs at most four round trips to
// PostgreSQL, the Company coming from the cache as the platform finds it
// (issue 19). It costs two: the client assertion's jti is recorded in
// the round trip that reads the refresh token, and the grant's lock, the
// rotation and both new tokens' rows are one more.
func TestRefreshRoundTrips(t *testing.T) {
	t.Parallel()
	rec := &tripRecorder{}
	s := setupWith(t, options{Tracer: rec, CachedCompanies: true}, nil)
	refresh := s.tokSignIn(t)["refresh_token"].(string)
	// Three times: the first may still fill caches.
	for round := range 3 {
		var resp *peers.Response
		trips := rec.Record(func() { resp = s.tokRefresh(t, refresh, nil) })
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		refresh = resp.JSON(t)["refresh_token"].(string)
		if round == 0 {
			continue
		}
		require.LessOrEqual(t, len(trips), 4, "%q", trips)
		var read, write []string
		for _, trip := range trips {
			for _, stmt := range trip {
				if strings.Contains(stmt, "FROM oauth_tokens WHERE") && strings.HasPrefix(stmt, "SELECT") {
					read = trip
				}
				if strings.Contains(stmt, "UPDATE oauth_tokens") {
					write = trip
				}
			}
		}
		require.Len(t, read, 2, "the jti and the read: %q", trips)
		require.True(t, strings.HasPrefix(read[0], "INSERT INTO client_assertion_jtis"), "%q", read)
		require.Len(t, write, 2, "the lock, and the rotation with the new rows: %q", trips)
		require.Contains(t, write[0], "pg_advisory_xact_lock", "%q", write)
		require.Contains(t, write[1], "INSERT INTO oauth_tokens", "%q", write)
	}
}
