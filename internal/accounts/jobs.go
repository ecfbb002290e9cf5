package accounts

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// SweepArgs is the periodic job that forgets login failures a day old,
// such as those left by probes of unknown usernames.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "accounts_sweep_login_failures" }

// InsertOpts makes at most one sweep wait at a time.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	store *Store
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.store.DeleteStaleLoginFailures(ctx)
	return err
}

// AddJobs registers the package's worker and its hourly sweep.
func AddJobs(workers *river.Workers, store *Store) []*river.PeriodicJob {
	river.AddWorker(workers, &sweepWorker{store: store})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: SweepArgs{}.Kind()})}
}
