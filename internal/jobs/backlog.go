package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/dbmetrics"
)

// backlogStates are the states of the jobs not yet finished, always
// exported, 0 when none.
var backlogStates = []string{"available", "running", "retryable", "scheduled"}

// BacklogCollector exports, at each scrape, River's jobs not yet finished
// by state (four series) and by kind and state (four series for each kind
// with such jobs), and how long the oldest available job has been due:
// how long work waits for a worker, across every replica. It runs one
// query on River's index of (state, queue, priority, scheduled_at); now
// is its clock.
func BacklogCollector(pool *pgxpool.Pool, now func() time.Time) prometheus.Collector {
	jobs := prometheus.NewDesc("poppyhost_jobs",
		"River jobs not yet finished, by state: available (due, waiting for a worker), running, retryable, scheduled.",
		[]string{"state"}, nil)
	byKind := prometheus.NewDesc("poppyhost_jobs_by_kind",
		"River jobs not yet finished, by kind and state; a kind with none is not exported.",
		[]string{"kind", "state"}, nil)
	waiting := prometheus.NewDesc("poppyhost_jobs_available_oldest_seconds",
		"How long the oldest available job has been due without a worker taking it; 0 when none is.", nil, nil)
	return dbmetrics.New(func(ctx context.Context, emit dbmetrics.Emit) error {
		at := now()
		rows, err := pool.Query(ctx, `SELECT state::text, kind, count(*), min(scheduled_at) FROM river_job
			WHERE state IN ('available', 'running', 'retryable', 'scheduled') GROUP BY state, kind`)
		if err != nil {
			return err
		}
		defer rows.Close()
		counts := map[string]float64{}
		kinds := map[string]map[string]float64{}
		var oldest float64
		for rows.Next() {
			var state, kind string
			var n int64
			var due *time.Time
			if err := rows.Scan(&state, &kind, &n, &due); err != nil {
				return err
			}
			counts[state] += float64(n)
			if kinds[kind] == nil {
				kinds[kind] = map[string]float64{}
			}
			kinds[kind][state] = float64(n)
			if state == "available" {
				oldest = max(oldest, dbmetrics.Age(at, due))
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, s := range backlogStates {
			emit(jobs, counts[s], s)
			for kind, n := range kinds {
				emit(byKind, n[s], kind, s)
			}
		}
		emit(waiting, oldest)
		return nil
	}, jobs, byKind, waiting)
}
