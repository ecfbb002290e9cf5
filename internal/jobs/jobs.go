// Package jobs builds the River client that runs poppyhost's background
// work on the same PostgreSQL pool. Each domain package owns its job kinds
// and workers and registers them here; River elects one leader among the
// replicas for periodic jobs, so a sweep runs once, not once per replica.
package jobs

import (
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Client is River's client on our pool.
type Client = river.Client[pgx.Tx]

// Config is what the domain packages contribute.
type Config struct {
	Workers  *river.Workers
	Periodic []*river.PeriodicJob
}

// New returns a River client that works the default queue. It is started
// by the server (Start) and stopped on shutdown (Stop).
func New(pool *pgxpool.Pool, cfg Config, logger *slog.Logger) (*Client, error) {
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:      cfg.Workers,
		PeriodicJobs: cfg.Periodic,
		Logger:       logger,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	return c, nil
}
