package db_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// timing records how long each statement run through it took.
type timing struct {
	db.Executor
	took []time.Duration
}

func (t *timing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	start := time.Now()
	tag, err := t.Executor.Exec(ctx, sql, args...)
	t.took = append(t.took, time.Since(start))
	return tag, err
}

// BenchmarkSweep deletes 1,000,000 expired replay records (a table shaped
// as session_jtis, unlogged, with its expires_at index) while two writers
// insert new ones as requests do: in one statement, as the jti sweeps once
// did, and through DeleteInBatches. It reports the sweep's time, its
// longest statement, and the writers' p99 during the sweep over their p99
// with no sweep, measured just before (docs/benchmarks.md).
func BenchmarkSweep(b *testing.B) {
	ctx := context.Background()
	pool := testdb.NewPool(b)
	_, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE jtis (company_id bigint, client_id text, jti text,
		expires_at timestamptz NOT NULL, PRIMARY KEY (company_id, client_id, jti));
		CREATE INDEX jtis_expires_at ON jtis (expires_at)`)
	require.NoError(b, err)
	for _, bc := range []struct {
		name  string
		sweep func(ex db.Executor, now time.Time) error
	}{
		{"one-statement", func(ex db.Executor, now time.Time) error {
			_, err := ex.Exec(ctx, `DELETE FROM jtis WHERE expires_at < $1`, now)
			return err
		}},
		{"batched", func(ex db.Executor, now time.Time) error {
			_, err := db.DeleteInBatches(ctx, ex, "jtis", "expires_at < $1", now)
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				_, err := pool.Exec(ctx, `TRUNCATE jtis`)
				require.NoError(b, err)
				_, err = pool.Exec(ctx, `INSERT INTO jtis SELECT g % 100, 'https://agent.test/', 'jti_' || g, now() - interval '1 hour'
					FROM generate_series(1, 1000000) g`)
				require.NoError(b, err)
				_, err = pool.Exec(ctx, `VACUUM ANALYZE jtis`)
				require.NoError(b, err)
				quiet := writeWhile(b, pool, func() { time.Sleep(2 * time.Second) })
				b.StartTimer()
				ex := &timing{Executor: pool}
				start := time.Now()
				busy := writeWhile(b, pool, func() { require.NoError(b, bc.sweep(ex, time.Now())) })
				took := time.Since(start)
				b.ReportMetric(float64(took.Milliseconds()), "sweep-ms")
				b.ReportMetric(float64(slices.Max(ex.took).Microseconds())/1000, "longest-statement-ms")
				b.ReportMetric(float64(len(ex.took)), "statements")
				b.ReportMetric(float64(quiet.Microseconds())/1000, "quiet-p99-ms")
				b.ReportMetric(float64(busy.Microseconds())/1000, "sweeping-p99-ms")
				b.ReportMetric(busy.Seconds()/quiet.Seconds(), "p99-ratio")
			}
		})
	}
}

// writeWhile runs two writers inserting one live record at a time while
// f runs, and returns the 99th percentile of their inserts' times.
func writeWhile(b *testing.B, pool *pgxpool.Pool, f func()) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		took []time.Duration
		wg   sync.WaitGroup
	)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				start := time.Now()
				_, err := pool.Exec(ctx, `INSERT INTO jtis VALUES ($1, 'https://agent.test/', $2, now() + interval '1 minute')`,
					w, "live_"+strconv.Itoa(w)+"_"+strconv.Itoa(i)+"_"+strconv.FormatInt(time.Now().UnixNano(), 36))
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				took = append(took, time.Since(start))
				mu.Unlock()
			}
		})
	}
	f()
	cancel()
	wg.Wait()
	slices.Sort(took)
	require.NotEmpty(b, took)
	return took[len(took)*99/100]
}
