package operations

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/dbmetrics"
)

// unsettledStates are the states an operation is left in while its
// outcome is not settled: always exported, 0 when none.
var unsettledStates = []string{statePerforming, stateUnknown}

// UnsettledCollector exports, at each scrape, how many operations are
// being performed or have an unknown outcome, across all Companies, and
// how long ago the oldest of each began to be sent: four series whatever
// the number of Companies. It runs one query on the partial index
// operations_unsettled_since; now is its clock.
func UnsettledCollector(pool *pgxpool.Pool, now func() time.Time) prometheus.Collector {
	count := prometheus.NewDesc("poppyhost_operations_unsettled",
		"Operations being performed (performing) or whose outcome is unknown (unknown), all Companies.",
		[]string{"status"}, nil)
	oldest := prometheus.NewDesc("poppyhost_operations_unsettled_oldest_seconds",
		"Age of the oldest operation in the status since its sending began; 0 when there is none.",
		[]string{"status"}, nil)
	return dbmetrics.New(func(ctx context.Context, emit dbmetrics.Emit) error {
		at := now()
		rows, err := pool.Query(ctx, `SELECT status, count(*), min(performing_since) FROM operations
			WHERE status IN ('performing', 'unknown') AND performing_since IS NOT NULL GROUP BY status`)
		if err != nil {
			return err
		}
		defer rows.Close()
		counts, ages := map[string]float64{}, map[string]float64{}
		for rows.Next() {
			var status string
			var n int64
			var since *time.Time
			if err := rows.Scan(&status, &n, &since); err != nil {
				return err
			}
			counts[status], ages[status] = float64(n), dbmetrics.Age(at, since)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, s := range unsettledStates {
			emit(count, counts[s], s)
			emit(oldest, ages[s], s)
		}
		return nil
	}, count, oldest)
}
