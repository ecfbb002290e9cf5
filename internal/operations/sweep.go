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
	store *Store
	now   func() time.Time
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.store.Sweep(ctx, w.now())
	return err
}

// AddJobs registers the sweep, run hourly.
func AddJobs(workers *river.Workers, store *Store, now func() time.Time) []*river.PeriodicJob {
	river.AddWorker(workers, &sweepWorker{store: store, now: now})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true})}
}

// Sweep forgets every operation whose expires_at is before now and that
// is not being performed, with its revisions, and returns how many. An
// operation's expires_at is the latest of its revisions' and of when it
// was performed, so an approval is remembered as long as it can be sent.
// It deletes in batches of sweepBatch, each its own short transaction,
// so a large backlog never holds one long lock.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM operations WHERE (company_id, id) IN (
				SELECT company_id, id FROM operations WHERE expires_at < $1 AND status <> 'performing' LIMIT $2)`,
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
