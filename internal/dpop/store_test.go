package dpop_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestStoreRefusesAReusedJTI runs the replay store on PostgreSQL: a jti is
// new once per Company and key, and the sweep forgets it after its window.
func TestStoreRefusesAReusedJTI(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	ctx := context.Background()
	var a, b int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('a', '{}') RETURNING id`).Scan(&a))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('b', '{}') RETURNING id`).Scan(&b))
	s := dpop.NewStore(pool)
	until := time.Now().Add(time.Minute)
	seen := func(company int64, jkt, jti string) bool {
		fresh, err := s.Seen(ctx, company, jkt, jti, until)
		require.NoError(t, err)
		return fresh
	}
	require.True(t, seen(a, "k1", "j"))
	require.False(t, seen(a, "k1", "j"), "a replay")
	require.True(t, seen(a, "k2", "j"), "another key")
	require.True(t, seen(b, "k1", "j"), "another Company")

	n, err := s.Sweep(ctx, until.Add(time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.True(t, seen(a, "k1", "j"), "forgotten after its window")
}
