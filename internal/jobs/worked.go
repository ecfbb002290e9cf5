package jobs

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Work results, the values of poppyhost_jobs_worked_total's result label.
const (
	workedCompleted = iota
	workedRetryable
	workedDiscarded
	workedCancelled
	workedSnoozed
)

var workedResults = [...]string{workedCompleted: "completed", workedRetryable: "retryable",
	workedDiscarded: "discarded", workedCancelled: "cancelled", workedSnoozed: "snoozed"}

// worked counts the jobs this replica worked, by kind and result: a
// worker middleware. A kind's counters are resolved at its first job and
// kept; kinds are the workers registered, a bounded set.
type worked struct {
	river.MiddlewareDefaults
	vec   *prometheus.CounterVec
	kinds sync.Map // kind → *[len(workedResults)]prometheus.Counter
}

var _ rivertype.WorkerMiddleware = (*worked)(nil)

func newWorked(reg prometheus.Registerer) (*worked, error) {
	w := &worked{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_jobs_worked_total",
		Help: "River jobs worked on this replica, by kind and result: completed, retryable (failed, to be retried), discarded (failed its last attempt), cancelled, snoozed.",
	}, []string{"kind", "result"})}
	if reg != nil {
		if err := reg.Register(w.vec); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// counters returns kind's counters, resolving them the first time.
func (w *worked) counters(kind string) *[len(workedResults)]prometheus.Counter {
	if c, ok := w.kinds.Load(kind); ok {
		return c.(*[len(workedResults)]prometheus.Counter)
	}
	var c [len(workedResults)]prometheus.Counter
	for i, r := range workedResults {
		c[i] = w.vec.WithLabelValues(kind, r)
	}
	got, _ := w.kinds.LoadOrStore(kind, &c)
	return got.(*[len(workedResults)]prometheus.Counter)
}

// Work runs the job and counts how it ended.
func (w *worked) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	err := doInner(ctx)
	r := workedRetryable
	var cancel *rivertype.JobCancelError
	var snooze *rivertype.JobSnoozeError
	switch {
	case err == nil:
		r = workedCompleted
	case errors.As(err, &cancel):
		r = workedCancelled
	case errors.As(err, &snooze):
		r = workedSnoozed
	case job.Attempt >= job.MaxAttempts:
		r = workedDiscarded
	}
	w.counters(job.Kind)[r].Inc()
	return err
}
