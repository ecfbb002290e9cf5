package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// RunJob runs one job of args through the platform's River client with
// workers on pool, and fails the test unless it completes within 30
// seconds.
func RunJob(t testing.TB, pool *pgxpool.Pool, workers *river.Workers, args river.JobArgs) {
	t.Helper()
	ctx := context.Background()
	q, err := jobs.New(pool, jobs.Options{Workers: workers})
	require.NoError(t, err)
	events, cancel := q.Client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, q.Client.Start(ctx))
	defer func() { require.NoError(t, q.Client.Stop(ctx)) }()
	_, err = q.Client.Insert(ctx, args, nil)
	require.NoError(t, err)
	select {
	case ev := <-events:
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job: %+v", ev.Job)
		require.Equal(t, args.Kind(), ev.Job.Kind)
	case <-time.After(30 * time.Second):
		t.Fatalf("job %s did not run", args.Kind())
	}
}

// RunSweeps runs each sweep once through the platform's River client on
// pool, with the clock now, as the client runs them when it starts, and
// fails the test unless each completes within 30 seconds. Earlier runs of
// the sweeps are forgotten first: one would stand for this run.
func RunSweeps(t testing.TB, pool *pgxpool.Pool, now func() time.Time, sweeps ...jobs.Sweep) {
	t.Helper()
	ctx := context.Background()
	waiting := map[string]bool{}
	var kinds []string
	for _, s := range sweeps {
		waiting[s.Name] = true
		kinds = append(kinds, s.Name)
	}
	_, err := pool.Exec(ctx, `DELETE FROM river_job WHERE kind = ANY($1)`, kinds)
	require.NoError(t, err)
	q, err := jobs.New(pool, jobs.Options{Now: now})
	require.NoError(t, err)
	q.AddSweeps(sweeps...)
	events, cancel := q.Client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, q.Client.Start(ctx))
	defer func() { require.NoError(t, q.Client.Stop(ctx)) }()
	timeout := time.After(30 * time.Second)
	for len(waiting) > 0 {
		select {
		case ev := <-events:
			if !waiting[ev.Job.Kind] {
				continue
			}
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job: %+v", ev.Job)
			delete(waiting, ev.Job.Kind)
		case <-timeout:
			t.Fatalf("sweeps %v did not run", waiting)
		}
	}
}

// Inserter returns a River client that only inserts jobs, whatever their
// kind, on pool: for packages tested without the platform's workers.
func Inserter(t testing.TB, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return c
}
