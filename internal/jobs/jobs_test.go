package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// legacyArgs is a sweep's job as a package declared it before the sweeps
// met in this package: the rows it queued carry its kind and {}.
type legacyArgs struct{}

func (legacyArgs) Kind() string { return "legacy_sweep" }

// TestSweepsRunOnStart starts the Queue with two sweeps: each runs when
// the client becomes leader, with the Queue's clock, and its count is
// logged; a row queued under a sweep's kind before is worked by it too.
func TestSweepsRunOnStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	_, err := testdb.Inserter(t, pool).Insert(ctx, legacyArgs{}, nil)
	require.NoError(t, err)

	clock := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	saw := map[string][]time.Time{}
	run := func(name string, n int64) jobs.Sweep {
		return jobs.Sweep{Name: name, Every: time.Hour, Run: func(_ context.Context, now time.Time) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			saw[name] = append(saw[name], now)
			return n, nil
		}}
	}
	var logs peers.SyncBuffer
	q, err := jobs.New(pool, jobs.Options{Now: func() time.Time { return clock },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	q.AddSweeps(run("a_sweep", 3), run("legacy_sweep", 0))
	events, cancel := q.Client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, q.Client.Start(ctx))
	defer func() { require.NoError(t, q.Client.Stop(ctx)) }()

	// The queued legacy row and the run on start are one job or two,
	// depending on who comes first; wait for a_sweep and the legacy row.
	done := map[string]int{}
	deadline := time.After(30 * time.Second)
	for done["a_sweep"] == 0 || done["legacy_sweep"] == 0 {
		select {
		case ev := <-events:
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job: %+v", ev.Job)
			done[ev.Job.Kind]++
		case <-deadline:
			t.Fatalf("sweeps did not run: %v", done)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []time.Time{clock}, saw["a_sweep"])
	require.NotEmpty(t, saw["legacy_sweep"])
	for _, at := range saw["legacy_sweep"] {
		require.Equal(t, clock, at)
	}
	require.Contains(t, logs.String(), "msg=\"jobs: swept\" sweep=a_sweep rows=3")
	require.NotContains(t, logs.String(), "sweep=legacy_sweep", "nothing removed: not worth a line")
}

// TestSweepsLoginFailures runs the accounts sweep through River: failures a
// day old go, recent ones stay.
func TestSweepsLoginFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	var companyID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('k', '{}') RETURNING id`).Scan(&companyID))
	_, err := pool.Exec(ctx, `INSERT INTO login_failures (company_id, username, failures, last_failure_at, locked_until) VALUES
		($1, 'old', 3, now() - interval '25 hours', now() - interval '25 hours'),
		($1, 'recent', 3, now() - interval '1 hour', now() - interval '1 hour')`, companyID)
	require.NoError(t, err)

	testdb.RunSweeps(t, pool, time.Now, accounts.Sweeps(accounts.NewStore(pool))...)
	var left []string
	rows, err := pool.Query(ctx, `SELECT username FROM login_failures ORDER BY username`)
	require.NoError(t, err)
	for rows.Next() {
		var u string
		require.NoError(t, rows.Scan(&u))
		left = append(left, u)
	}
	require.Equal(t, []string{"recent"}, left)
}

// TestSweepStopsAtBudget runs a sweep that always has more to do: River
// gets its timeout, the run stops a tenth before it, as work left rather
// than a failure, and the metrics say what it did and what is left.
func TestSweepStopsAtBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	reg := prometheus.NewRegistry()
	q, err := jobs.New(pool, jobs.Options{Metrics: reg})
	require.NoError(t, err)
	var started, stopped atomic.Int64
	endless := jobs.Sweep{Name: "endless_sweep", Every: time.Hour, Timeout: 2 * time.Second,
		Run: func(ctx context.Context, _ time.Time) (int64, error) {
			started.Store(time.Now().UnixNano())
			var n int64
			for {
				select {
				case <-ctx.Done():
					stopped.Store(time.Now().UnixNano())
					return n, ctx.Err()
				case <-time.After(10 * time.Millisecond):
					n++
				}
			}
		},
		Left: func(context.Context, time.Time) (int64, error) { return 42, nil }}
	q.AddSweeps(endless)
	events, cancel := q.Client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, q.Client.Start(ctx))
	defer func() { require.NoError(t, q.Client.Stop(ctx)) }()
	select {
	case ev := <-events:
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job: %+v", ev.Job)
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep did not run")
	}
	ran := time.Duration(stopped.Load() - started.Load())
	require.InDelta(t, 1800*time.Millisecond, ran, float64(300*time.Millisecond), "stops at its budget: %s", ran)
	require.Greater(t, metric(t, reg, "poppyhost_sweep_rows_total"), 50.0)
	require.Equal(t, 1.0, metric(t, reg, "poppyhost_sweep_unfinished"))
	require.Equal(t, 42.0, metric(t, reg, "poppyhost_sweep_due"))
}

// metric returns the value of reg's metric name for the sweep
// endless_sweep.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() != "endless_sweep" {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRunSweepKeepsFailuresAtTheBudget: a run stopped by its budget is
// unfinished, not failed, but what failed in it before is still reported.
func TestRunSweepKeepsFailuresAtTheBudget(t *testing.T) {
	t.Parallel()
	failed := errors.New("conversation cnv_1 failed")
	s := jobs.Sweep{Name: "partly_failing", Every: time.Minute, Timeout: 200 * time.Millisecond,
		Run: func(ctx context.Context, _ time.Time) (int64, error) {
			<-ctx.Done()
			return 3, errors.Join(failed, ctx.Err())
		}}
	n, unfinished, err := jobs.RunSweep(context.Background(), s, time.Now())
	require.Equal(t, int64(3), n)
	require.True(t, unfinished)
	require.ErrorIs(t, err, failed)
	require.NotErrorIs(t, err, context.DeadlineExceeded)

	s.Run = func(ctx context.Context, _ time.Time) (int64, error) {
		<-ctx.Done()
		return 1, ctx.Err()
	}
	_, unfinished, err = jobs.RunSweep(context.Background(), s, time.Now())
	require.True(t, unfinished)
	require.NoError(t, err, "stopping at the budget alone is no error")
}
