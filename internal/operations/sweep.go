package operations

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: every hour, forgetting
// operations past their expires_at (extension 7: remembered at least
// until then, and while they are being performed), then giving each
// stalled claim its settle job (Rescue).
func (e *Engine) Sweeps() []jobs.Sweep {
	return []jobs.Sweep{{Name: "operations_sweep", Every: time.Hour,
		Run: func(ctx context.Context, now time.Time) (int64, error) {
			n, err := e.opts.Store.Sweep(ctx, now)
			if err != nil {
				return n, err
			}
			return n, e.Rescue(ctx, now.Add(-stalledAfter))
		}}}
}

// stalledAfter is how long past its send lease a claim may wait for its
// settle job before the sweep makes sure it has one.
const stalledAfter = time.Hour

// Rescue gives each claim still performing whose send lease lapsed
// before before a settle job, when it has none (a job is unique per claim,
// so one still queued or running is left alone): however a job was lost,
// each claim keeps one path to an end. It takes the sweepBatch oldest; the
// next sweep takes the rest.
func (e *Engine) Rescue(ctx context.Context, before time.Time) error {
	stalled, err := e.opts.Store.Stalled(ctx, before, sweepBatch)
	if err != nil || len(stalled) == 0 {
		return err
	}
	params := make([]river.InsertManyParams, len(stalled))
	for i, c := range stalled {
		params[i] = river.InsertManyParams{Args: SettleArgs{CompanyID: c.CompanyID, OperationID: c.OperationID,
			Claim: c.Claim}}
	}
	_, err = e.opts.Jobs.InsertMany(ctx, params)
	return err
}

// Sweep forgets every operation whose expires_at is before now and that
// is not being performed or unknown, with its revisions, and returns how many. An
// operation's expires_at is the latest of its revisions' and of when it
// was performed, so an approval is remembered as long as it can be sent.
// It deletes in batches (db.DeleteInBatches), so a large backlog never
// holds one long lock.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "operations",
		"expires_at < $1 AND status NOT IN ('performing', 'unknown')", now)
}

// sweepBatch is how many stalled claims one sweep rescues.
const sweepBatch = 1000
