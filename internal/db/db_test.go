package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// counting counts the statements run through it.
type counting struct {
	db.Executor
	n []int64
}

func (c *counting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := c.Executor.Exec(ctx, sql, args...)
	c.n = append(c.n, tag.RowsAffected())
	return tag, err
}

// TestDeleteInBatches deletes the matching rows a thousand at a time,
// until a statement deletes fewer, and leaves the others.
func TestDeleteInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE swept (a int, b text, old bool NOT NULL, PRIMARY KEY (a, b))`)
	require.NoError(t, err)
	for _, tc := range []struct {
		old  int
		want []int64
	}{
		{2500, []int64{1000, 1000, 500}},
		{2000, []int64{1000, 1000, 0}},
		{0, []int64{0}},
	} {
		_, err := pool.Exec(ctx, `TRUNCATE swept`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO swept SELECT i, 'x', i <= $1 FROM generate_series(1, $1 + 10) i`, tc.old)
		require.NoError(t, err)
		counted := &counting{Executor: pool}
		n, err := db.DeleteInBatches(ctx, counted, "swept", "old = $1", true)
		require.NoError(t, err)
		require.EqualValues(t, tc.old, n)
		require.Equal(t, tc.want, counted.n)
		var left, oldLeft int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE old) FROM swept`).Scan(&left, &oldLeft))
		require.Equal(t, 10, left)
		require.Zero(t, oldLeft)
	}
}
