package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
	"github.com/poppyhost/poppyhost/migrations"
)

func setup(t *testing.T) (*pgxpool.Pool, *migrations.Migrator) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testdb.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return pool, m
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
	return ok
}

// TestEveryStep applies every migration, rolls each of ours back one at a
// time and applies them again, so every Down works and every Up is
// repeatable.
func TestEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := setup(t)

	require.ErrorIs(t, m.Check(ctx), migrations.ErrPending)
	require.NoError(t, m.Up(ctx))
	require.NoError(t, m.Check(ctx))
	require.True(t, tableExists(t, pool, "companies"))
	require.True(t, tableExists(t, pool, "river_job"))

	st, err := m.Status(ctx)
	require.NoError(t, err)
	var ours int
	for _, s := range st {
		require.True(t, s.Applied, "%s %d", s.Source, s.Version)
		if s.Source == "poppyhost" {
			ours++
		}
	}
	require.GreaterOrEqual(t, ours, 2)

	for i := range ours {
		require.NoError(t, m.Down(ctx, 1, false), "down step %d", i)
		require.ErrorIs(t, m.Check(ctx), migrations.ErrPending)
	}
	require.False(t, tableExists(t, pool, "companies"))
	require.True(t, tableExists(t, pool, "river_job"), "down without --all keeps River's schema")
	require.NoError(t, m.Down(ctx, 1, false), "down past the first migration is a no-op")

	require.NoError(t, m.Up(ctx))
	require.NoError(t, m.Check(ctx))
	require.NoError(t, m.Down(ctx, 0, true))
	require.False(t, tableExists(t, pool, "companies"))
	require.False(t, tableExists(t, pool, "river_job"))
	require.NoError(t, m.Up(ctx))
	require.NoError(t, m.Check(ctx))
}

// TestConcurrentUp runs Up from several migrators at once, as replicas or a
// migration job racing a server would.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := setup(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := migrations.New(pool, nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer m.Close()
			errs[i] = m.Up(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Check(ctx))
}

// TestUpAnalyzes: Up analyzes the tables its migrations made or changed
// that have rows, and leaves empty ones never analyzed (the planner
// assumes ten pages of those, not none).
func TestUpAnalyzes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := setup(t)
	require.NoError(t, m.Up(ctx))
	analyzed := func(table string) bool {
		t.Helper()
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = $1`,
			table).Scan(&ok))
		return ok
	}
	for _, table := range []string{"companies", "oauth_tokens", "session_jtis", "river_job"} {
		require.False(t, analyzed(table), "%s is empty", table)
	}
	_, err := pool.Exec(ctx, `INSERT INTO companies (slug, settings) VALUES ('c', '{}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, requested_at,
		scopes, granted_scopes, form, session, expires_at)
		SELECT id, 'access', '\x00', 'r', 'c', now(), '{}', '{}', '{}', '{}', now() FROM companies`)
	require.NoError(t, err)
	// 00019 changes oauth_tokens, which now has a row: roll back to
	// before it and apply it again.
	st, err := m.Status(ctx)
	require.NoError(t, err)
	steps := 0
	for _, s := range st {
		if s.Source == "poppyhost" && s.Version >= 19 {
			steps++
		}
	}
	require.NoError(t, m.Down(ctx, steps, false))
	require.NoError(t, m.Up(ctx))
	require.True(t, analyzed("oauth_tokens"))
	require.False(t, analyzed("companies"), "not changed since 00019")
	require.False(t, analyzed("session_jtis"), "changed, but empty")
}

func TestTables(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"a", "b", "c", "d", "e", "f"}, migrations.Tables(`-- +goose Up
-- One conditional UPDATE each; ALTER TABLE z is only prose.
CREATE TABLE a (id int);
create unlogged table b (id int);
ALTER TABLE c ADD COLUMN x int;
CREATE UNIQUE INDEX d_x ON d (x) WHERE x > 0;
UPDATE e SET x = 1;
INSERT INTO f (x) VALUES (1);
SELECT 1 FROM g;
-- +goose Down
DROP TABLE h;
ALTER TABLE i DROP COLUMN x;`))
}
