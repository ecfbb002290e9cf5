package browserjoin

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// SweepArgs is the periodic job that deletes expired codes and web
// sessions.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "browserjoin_sweep" }

// InsertOpts makes at most one sweep wait at a time.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	store *Store
	now   func() time.Time
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	return w.store.sweep(ctx, w.now())
}

// AddJobs registers the sweep, run hourly.
func AddJobs(workers *river.Workers, store *Store, now func() time.Time) []*river.PeriodicJob {
	river.AddWorker(workers, &sweepWorker{store: store, now: now})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind(), RunOnStart: true})}
}
