package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// maxSweepTimeout bounds the timeout of a sweep that sets none.
const maxSweepTimeout = 10 * time.Minute

// Sweep is periodic work of a domain package, mostly forgetting rows
// past their time.
type Sweep struct {
	// Name is the River job kind; queued and periodic rows carry it, so
	// it does not change.
	Name string
	// Every is how often it runs; at most one run waits at a time.
	Every time.Duration
	// Timeout is River's timeout for one run [five sixths of Every, at
	// most ten minutes: 50 seconds for a sweep every minute]. Run's context
	// ends at its budget, a tenth earlier, so a run stops between batches
	// rather than being cut off; what is left waits for the next.
	Timeout time.Duration
	// Run does the work as of now, in batches until none is left or its
	// context ends, and returns how many rows it removed (or, for work
	// that removes none, changed).
	Run func(ctx context.Context, now time.Time) (int64, error)
	// Left, when set, counts the work still due as of now after a run
	// (it may stop counting at a bound), for the backlog metric.
	Left func(ctx context.Context, now time.Time) (int64, error)
}

// budget is how long one run of s may work: a tenth less than its
// timeout.
func (s Sweep) budget() time.Duration { return s.timeout() - s.timeout()/10 }

func (s Sweep) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return min(s.Every*5/6, maxSweepTimeout)
}

// sweepMetrics say what each sweep did and what it left.
type sweepMetrics struct {
	rows       *prometheus.CounterVec
	unfinished *prometheus.GaugeVec
	left       *prometheus.GaugeVec
}

func newSweepMetrics(reg prometheus.Registerer) (*sweepMetrics, error) {
	m := &sweepMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "poppyhost_sweep_rows_total",
			Help: "Rows each sweep removed or changed."}, []string{"sweep"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "poppyhost_sweep_unfinished",
			Help: "1 when the sweep's last run reached its budget with work left, else 0."}, []string{"sweep"}),
		left: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "poppyhost_sweep_due",
			Help: "Work still due after the sweep's last run (sweeps that count it)."}, []string{"sweep"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.rows, m.unfinished, m.left} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("jobs: metrics: %w", err)
		}
	}
	return m, nil
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

// Timeout is the sweep's, set here rather than left to River's default.
func (w *sweepWorker) Timeout(*river.Job[sweepArgs]) time.Duration { return w.sweep.timeout() }

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[sweepArgs]) error {
	n, unfinished, err := RunSweep(ctx, w.sweep, w.q.now())
	w.q.metrics.rows.WithLabelValues(w.sweep.Name).Add(float64(n))
	left := 0.0
	if unfinished {
		left = 1
	}
	w.q.metrics.unfinished.WithLabelValues(w.sweep.Name).Set(left)
	if err != nil {
		return fmt.Errorf("%s: %w", w.sweep.Name, err)
	}
	if w.sweep.Left != nil {
		// The sweep is done: failing to count what is left must not have
		// River run it again, and the count gets time of its own.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leftTimeout)
		due, err := w.sweep.Left(lctx, w.q.now())
		cancel()
		if err != nil {
			w.q.logger.WarnContext(ctx, "jobs: counting what a sweep left", "sweep", w.sweep.Name, "err", err)
		} else {
			w.q.metrics.left.WithLabelValues(w.sweep.Name).Set(float64(due))
		}
	}
	// The frequent sweeps mostly find nothing: only work done is worth a
	// line at the default level.
	level := slog.LevelDebug
	if n > 0 || unfinished {
		level = slog.LevelInfo
	}
	w.q.logger.Log(ctx, level, "jobs: swept", "sweep", w.sweep.Name, "rows", n, "unfinished", unfinished)
	return nil
}

// leftTimeout bounds counting what a sweep left.
const leftTimeout = 5 * time.Second

// RunSweep runs s once as of now within its budget, and says how many rows
// it did and whether it stopped at the budget with work left; stopping
// there is no error, but the other errors of the run are kept.
func RunSweep(ctx context.Context, s Sweep, now time.Time) (n int64, unfinished bool, err error) {
	runCtx, cancel := context.WithTimeout(ctx, s.budget())
	defer cancel()
	n, err = s.Run(runCtx, now)
	if err != nil && ctx.Err() == nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		return n, true, withoutContextErrors(err)
	}
	return n, false, err
}

// withoutContextErrors is err without the context errors in it (those of
// an errors.Join too), or nil when nothing else is left.
func withoutContextErrors(err error) error {
	isContext := func(e error) bool {
		return errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled)
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range joined.Unwrap() {
			if e != nil && !isContext(e) {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if isContext(err) {
		return nil
	}
	return err
}
