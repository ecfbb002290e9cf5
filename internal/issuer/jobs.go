package issuer

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// SweepArgs is the periodic job that deletes expired codes, tokens,
// device requests and page sign-ins.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "issuer_sweep_expired" }

// InsertOpts makes at most one sweep wait at a time.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}

// sweepGrace keeps expired rows a day: a replayed refresh token that
// expired a moment ago still meets its row and its family's revocation.
const sweepGrace = 24 * time.Hour

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	store *Store
	now   func() time.Time
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.store.DeleteExpired(ctx, w.now().Add(-sweepGrace))
	return err
}

// AddJobs registers the package's worker and its hourly sweep.
func AddJobs(workers *river.Workers, store *Store, now func() time.Time) []*river.PeriodicJob {
	river.AddWorker(workers, &sweepWorker{store: store, now: now})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind()})}
}
