package operations

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// SweepArgs is the periodic job that forgets operations past their
// expires_at (extension 7: remembered at least until then, and while they
// are being performed).
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "operations_sweep" }

// InsertOpts keeps to one sweep an hour, however many replicas insert it.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	e *Engine
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	now := w.e.opts.Now()
	if _, err := w.e.opts.Store.Sweep(ctx, now); err != nil {
		return err
	}
	return w.e.Rescue(ctx, now.Add(-stalledAfter))
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
	_, err = e.inserter.InsertMany(ctx, params)
	return err
}

// Sweep forgets every operation whose expires_at is before now and that
// is not being performed or unknown, with its revisions, and returns how many. An
// operation's expires_at is the latest of its revisions' and of when it
// was performed, so an approval is remembered as long as it can be sent.
// It deletes in batches of sweepBatch, each its own short transaction,
// so a large backlog never holds one long lock.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM operations WHERE (company_id, id) IN (
				SELECT company_id, id FROM operations WHERE expires_at < $1 AND status NOT IN ('performing', 'unknown') LIMIT $2)`,
			now, sweepBatch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < sweepBatch {
			return total, nil
		}
	}
}

// sweepBatch is how many operations one statement of Sweep forgets.
const sweepBatch = 1000
