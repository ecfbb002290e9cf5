package jobs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Client is River's client on our pool.
type Client = river.Client[pgx.Tx]

// Options configure a Queue.
type Options struct {
	// Workers is the bundle the packages register their workers in; nil:
	// a new one.
	Workers *river.Workers
	Logger  *slog.Logger
	// Now is the sweeps' clock [time.Now].
	Now func() time.Time
	// Metrics registers the sweeps' metrics; nil keeps them unregistered.
	Metrics prometheus.Registerer
}

// Queue is the platform's River client and the bundle of its workers.
// River reads the bundle when it inserts or works a job, not when the
// client is built, so the client can go to the packages that insert jobs
// before their workers exist: every worker and sweep must be added before
// Start.
type Queue struct {
	// Client inserts jobs, and works the default queue once started
	// (Start) until stopped (Stop).
	Client  *Client
	Workers *river.Workers
	logger  *slog.Logger
	now     func() time.Time
	metrics *sweepMetrics
}

// New returns the Queue on pool.
func New(pool *pgxpool.Pool, opts Options) (*Queue, error) {
	if opts.Workers == nil {
		opts.Workers = river.NewWorkers()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	counted, err := newWorked(opts.Metrics)
	if err != nil {
		return nil, err
	}
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: opts.Workers,
		Logger:  opts.Logger,
		// Jobs linked to the request that inserted them, when tracing is
		// on, and counted by kind and result.
		Middleware: []rivertype.Middleware{&traced{}, counted},
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	m, err := newSweepMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	return &Queue{Client: c, Workers: opts.Workers, logger: opts.Logger, now: opts.Now, metrics: m}, nil
}
