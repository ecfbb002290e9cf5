package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// Sweep is periodic work of a domain package, mostly forgetting rows
// past their time.
type Sweep struct {
	// Name is the River job kind; queued and periodic rows carry it, so
	// it does not change.
	Name string
	// Every is how often it runs; at most one run waits at a time.
	Every time.Duration
	// Run does the work as of now and returns how many rows it removed
	// (or, for work that removes none, changed).
	Run func(ctx context.Context, now time.Time) (int64, error)
}

// AddSweeps registers each sweep's worker and its periodic job, which
// also runs when a replica becomes River's leader, so that frequent leader
// changes cannot put it off for good. Call it before Start.
func (q *Queue) AddSweeps(sweeps ...Sweep) {
	periodic := make([]*river.PeriodicJob, len(sweeps))
	for i, s := range sweeps {
		args := sweepArgs{kind: s.Name, every: s.Every}
		// One args type serves every sweep, so the kind comes from the
		// value given here rather than from the type's zero value.
		river.AddWorkerArgs(q.Workers, args, &sweepWorker{q: q, sweep: s})
		periodic[i] = river.NewPeriodicJob(river.PeriodicInterval(s.Every),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{ID: s.Name, RunOnStart: true})
	}
	q.Client.PeriodicJobs().AddMany(periodic)
}

// sweepArgs are a sweep's job: it has no arguments, so it is stored as {}
// as the per-package args types before it were.
type sweepArgs struct {
	kind  string
	every time.Duration
}

// Kind names the job in River: the sweep's name.
func (a sweepArgs) Kind() string { return a.kind }

// InsertOpts makes at most one run wait at a time.
func (a sweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: a.every}}
}

type sweepWorker struct {
	river.WorkerDefaults[sweepArgs]
	q     *Queue
	sweep Sweep
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[sweepArgs]) error {
	n, err := w.sweep.Run(ctx, w.q.now())
	if err != nil {
		return fmt.Errorf("%s: %w", w.sweep.Name, err)
	}
	// The frequent sweeps mostly find nothing: only work done is worth a
	// line at the default level.
	level := slog.LevelDebug
	if n > 0 {
		level = slog.LevelInfo
	}
	w.q.logger.Log(ctx, level, "jobs: swept", "sweep", w.sweep.Name, "rows", n)
	return nil
}
