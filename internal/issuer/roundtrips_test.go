package issuer_test

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
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
