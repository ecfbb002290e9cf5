package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// InsertCompanies adds n Companies with the given settings (JSON) in one
// statement, slugs prefix1 to prefixN, and returns their IDs in that
// order: for benchmarks that need many, without the admin API's checks.
func InsertCompanies(tb testing.TB, pool *pgxpool.Pool, prefix string, n int, settings string) []int64 {
	tb.Helper()
	rows, err := pool.Query(context.Background(), `INSERT INTO companies (slug, settings)
		SELECT $1 || g, $3::jsonb FROM generate_series(1, $2::int) g ORDER BY g RETURNING id`, prefix, n, settings)
	require.NoError(tb, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(tb, err)
	require.Len(tb, ids, n)
	return ids
}
