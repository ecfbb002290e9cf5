package sessions

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// SweepArgs is the periodic job that forgets jti records past their
// replay window.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "sessions_sweep_jtis" }

// InsertOpts makes at most one sweep wait at a time.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	store *Store
	now   func() time.Time
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.store.SweepJTIs(ctx, w.now())
	return err
}

// AddJobs registers the package's workers and periodic jobs. The sweep
// also runs when a replica becomes River's leader.
func AddJobs(workers *river.Workers, store *Store, now func() time.Time) []*river.PeriodicJob {
	river.AddWorker(workers, &sweepWorker{store: store, now: now})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Minute),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true})}
}
