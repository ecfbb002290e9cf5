package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/testkit"
)

// TestRunsJobs starts the River client on a test database and runs the
// jti sweep through it: expired replay records go, live ones stay.
func TestRunsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewPool(t)
	var companyID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('j', '{}') RETURNING id`).Scan(&companyID))
	_, err := pool.Exec(ctx, `INSERT INTO session_jtis (company_id, client_id, jti, expires_at) VALUES
		($1, 'https://a.example/agent.json', 'old', now() - interval '1 minute'),
		($1, 'https://a.example/agent.json', 'live', now() + interval '1 minute')`, companyID)
	require.NoError(t, err)

	workers := river.NewWorkers()
	store := sessions.NewStore(pool)
	periodic := sessions.AddJobs(workers, store, time.Now)
	require.Len(t, periodic, 1)
	testkit.RunJob(t, pool, workers, sessions.SweepArgs{})
	var jtis []string
	rows, err := pool.Query(ctx, `SELECT jti FROM session_jtis ORDER BY jti`)
	require.NoError(t, err)
	for rows.Next() {
		var j string
		require.NoError(t, rows.Scan(&j))
		jtis = append(jtis, j)
	}
	require.Equal(t, []string{"live"}, jtis)
}

// TestSweepsLoginFailures runs the accounts sweep through River: failures a
// day old go, recent ones stay.
func TestSweepsLoginFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewPool(t)
	var companyID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('k', '{}') RETURNING id`).Scan(&companyID))
	_, err := pool.Exec(ctx, `INSERT INTO login_failures (company_id, username, failures, last_failure_at, locked_until) VALUES
		($1, 'old', 3, now() - interval '25 hours', now() - interval '25 hours'),
		($1, 'recent', 3, now() - interval '1 hour', now() - interval '1 hour')`, companyID)
	require.NoError(t, err)

	workers := river.NewWorkers()
	require.Len(t, accounts.AddJobs(workers, accounts.NewStore(pool)), 1)
	testkit.RunJob(t, pool, workers, accounts.SweepArgs{})
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
