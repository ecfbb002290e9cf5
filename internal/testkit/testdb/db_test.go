package testdb

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// cleanupTB holds the cleanups registered on it until runCleanups, so a
// test or benchmark can drop a database before it ends.
type cleanupTB struct {
	testing.TB
	cleanups []func()
}

func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }

func (c *cleanupTB) runCleanups() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
	c.cleanups = nil
}

func databaseExists(t testing.TB, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ServerURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok))
	return ok
}

// TestNewDatabase: each call gives a distinct database holding the whole
// schema (ours and River's) and no rows, and its cleanup drops it.
func TestNewDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := &cleanupTB{TB: t}
	t.Cleanup(tb.runCleanups) // if a require below fails first

	a, b := NewDatabase(tb), NewDatabase(tb)
	require.NotEqual(t, a, b)
	var name string
	for _, u := range []string{a, b} {
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		for _, table := range []string{"companies", "company_domains", "accounts", "poppyhost_migrations", "river_job"} {
			var ok bool
			require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok))
			require.True(t, ok, "table %s in %s", table, u)
		}
		var companies int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM companies`).Scan(&companies))
		require.Zero(t, companies)
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
		require.NoError(t, conn.Close(ctx))
		require.True(t, databaseExists(t, name))
	}
	tb.runCleanups()
	require.False(t, databaseExists(t, name), "cleanup drops the database")
}

// BenchmarkNewDatabase measures one test database's life: CREATE DATABASE
// from the migrated template, then the DROP its cleanup runs. The template
// is built before timing starts. create-ms and drop-ms split the time.
func BenchmarkNewDatabase(b *testing.B) {
	if _, err := template(); err != nil {
		b.Fatal(err)
	}
	tb := &cleanupTB{TB: b}
	var create, drop time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		NewDatabase(tb)
		created := time.Now()
		tb.runCleanups()
		create += created.Sub(start)
		drop += time.Since(created)
		n++
	}
	b.ReportMetric(create.Seconds()*1000/float64(n), "create-ms/op")
	b.ReportMetric(drop.Seconds()*1000/float64(n), "drop-ms/op")
}

// TestDropLeftovers: databases a killed run left behind, old enough and
// named as the kit names them, are dropped; newer ones, the one to keep,
// one still in use and other names are not.
func TestDropLeftovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ServerURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	// A prefix of this test's own, so that databases of tests running
	// beside it are never candidates.
	prefix := "poppyhost_leftovercheck_" + strings.ToLower(rand.Text()[:6]) + "_"
	for _, n := range []string{"old", "keep", "inuse", "young"} {
		_, err := conn.Exec(ctx, `CREATE DATABASE `+prefix+n)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+prefix+n+` WITH (FORCE)`) })
	}
	other := "poppyhost_otherprefix_" + strings.ToLower(rand.Text()[:6])
	_, err = conn.Exec(ctx, `CREATE DATABASE `+other)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+other+` WITH (FORCE)`) })
	inUse, err := pgx.Connect(ctx, withDatabase(ServerURL(t), prefix+"inuse"))
	require.NoError(t, err)
	defer inUse.Close(ctx)

	// Everything made so far counts as old; young is made after the
	// cutoff, a second later.
	time.Sleep(1100 * time.Millisecond)
	cutoff := time.Now()
	time.Sleep(1100 * time.Millisecond)
	_, err = conn.Exec(ctx, `DROP DATABASE `+prefix+`young`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE DATABASE `+prefix+`young`)
	require.NoError(t, err)

	dropped, err := dropLeftovers(ctx, conn, prefix+"keep", cutoff, prefix)
	require.NoError(t, err)
	require.Equal(t, 1, dropped)
	require.False(t, databaseExists(t, prefix+"old"))
	for _, n := range []string{prefix + "keep", prefix + "inuse", prefix + "young", other} {
		require.True(t, databaseExists(t, n), n)
	}
}
