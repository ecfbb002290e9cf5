package conversations

import (
	"context"
	"errors"
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Defaults of the Company's conversation limits (tenant.Conversations),
// used where a setting is 0. Migration 00020 computes deadlines with the
// same numbers.
const (
	DefaultHandoffTimeout = 300 * time.Second
	DefaultIdleClose      = 7 * 24 * time.Hour
	DefaultRetentionDays  = 90
)

const (
	// jobBatch is how many due conversations one transaction of a sweep
	// claims; a run takes batch after batch until none is due or its
	// budget ends.
	jobBatch = 100
	// eventBatch bounds the events one visit of the prune deletes from a
	// conversation; a conversation with more is due again at once.
	eventBatch = 1000
	// leftBound is where the count of work still due stops.
	leftBound = 100_000
	// minuteTimeout and hourTimeout are River's timeouts of the sweeps
	// run every minute and every hour; each run stops at its budget, a
	// tenth earlier (jobs.Sweep).
	minuteTimeout = 50 * time.Second
	hourTimeout   = 10 * time.Minute
)

// Sweeps are the conversations' periodic work: every minute, ending
// handoffs nobody took in the Company's handoff_timeout_seconds (spec
// 8.9) and closing conversations without activity for its
// idle_close_seconds (spec 8.12); every hour, deleting events older than
// its retention_days (spec 8.5: a cursor for them answers
// cursor_expired), then closed conversations with none left. Each finds
// its work by the deadline each conversation keeps (migration 00020), in
// every Company at once, never Company by Company.
func Sweeps(store *Store) []jobs.Sweep {
	return []jobs.Sweep{
		{Name: "conversations_handoff_timeout", Every: time.Minute, Timeout: minuteTimeout,
			Run: store.dueRun(dueHandoff), Left: store.dueLeft(dueHandoff)},
		{Name: "conversations_idle_close", Every: time.Minute, Timeout: minuteTimeout,
			Run: store.dueRun(dueIdle), Left: store.dueLeft(dueIdle)},
		{Name: "conversations_prune", Every: time.Hour, Timeout: hourTimeout,
			Run: store.dueRun(duePrune), Left: store.dueLeft(duePrune)},
	}
}

// dueRun runs batches of the work while some is due and the last batch
// handled or failed any, until ctx ends; it returns the rows changed or
// removed. A conversation whose work fails stays due for the next run and
// is not claimed again in this one, so failures, however many, never hold
// back the work due after them; the errors are returned at the end.
func (s *Store) dueRun(w dueWork) func(ctx context.Context, now time.Time) (int64, error) {
	return func(ctx context.Context, now time.Time) (int64, error) {
		var (
			total  int64
			errs   []error
			failed []string
		)
		for {
			if due, err := s.anyDue(ctx, w, now); err != nil || !due {
				return total, errors.Join(append(errs, err)...)
			}
			b, err := s.dueBatch(ctx, w, now, failed)
			total += b.rows
			errs = append(errs, b.errs...)
			failed = append(failed, b.failed...)
			if err != nil || b.handled == 0 && len(b.failed) == 0 {
				return total, errors.Join(append(errs, err)...)
			}
		}
	}
}
