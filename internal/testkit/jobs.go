package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// RunJob runs one job of args through a real River client with workers on
// pool, and fails the test unless it completes within 30 seconds.
func RunJob(t testing.TB, pool *pgxpool.Pool, workers *river.Workers, args river.JobArgs) {
	t.Helper()
	ctx := context.Background()
	client, err := jobs.New(pool, jobs.Config{Workers: workers}, nil)
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()
	_, err = client.Insert(ctx, args, nil)
	require.NoError(t, err)
	select {
	case ev := <-events:
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job: %+v", ev.Job)
		require.Equal(t, args.Kind(), ev.Job.Kind)
	case <-time.After(30 * time.Second):
		t.Fatalf("job %s did not run", args.Kind())
	}
}
