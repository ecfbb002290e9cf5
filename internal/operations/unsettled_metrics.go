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

// openStates are the states poppyhost_operations counts: an operation's
// states but performed, which is where every operation ends (a count of
// them would read the whole table; poppyhost_operations_outcomes_total
// counts them as they happen).
var openStates = []string{stateProposed, statePerforming, stateUnknown}

// UnsettledCollector exports, at each scrape, how many operations are
// proposed, being performed or have an unknown outcome, across all
// Companies, and how long ago the oldest of the last two began to be sent:
// seven series whatever the number of Companies. It runs one query, on
// the partial indexes operations_unsettled_since and operations_action
// (which holds exactly the proposed operations); now is its clock.
func UnsettledCollector(pool *pgxpool.Pool, now func() time.Time) prometheus.Collector {
	states := prometheus.NewDesc("poppyhost_operations",
		"Operations by state, all Companies: proposed (awaiting an approval, or sent back for one), performing, unknown.",
		[]string{"state"}, nil)
	count := prometheus.NewDesc("poppyhost_operations_unsettled",
		"Operations being performed (performing) or whose outcome is unknown (unknown), all Companies.",
		[]string{"status"}, nil)
	oldest := prometheus.NewDesc("poppyhost_operations_unsettled_oldest_seconds",
		"Age of the oldest operation in the status since its sending began; 0 when there is none.",
		[]string{"status"}, nil)
	return dbmetrics.New(func(ctx context.Context, emit dbmetrics.Emit) error {
		at := now()
		rows, err := pool.Query(ctx, `SELECT status, count(*), min(performing_since) FROM operations
			WHERE status IN ('performing', 'unknown') AND performing_since IS NOT NULL GROUP BY status
			UNION ALL SELECT 'proposed', count(*), NULL FROM operations WHERE status = 'proposed'`)
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
		for _, s := range openStates {
			emit(states, counts[s], s)
		}
		for _, s := range unsettledStates {
			emit(count, counts[s], s)
			emit(oldest, ages[s], s)
		}
		return nil
	}, states, count, oldest)
}
