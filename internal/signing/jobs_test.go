package signing_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestJobRotatesAndDeletes runs the periodic job through River: a current
// key RotateAfter old is replaced, a younger one is not, and retired keys
// are deleted once Retain has passed, not before.
func TestJobRotatesAndDeletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const day = 24 * time.Hour
	keys := signing.NewKeys(b.pool, testdb.Sealer(b.pool), signing.Options{Now: b.clock.Now, RotateAfter: 90 * day, Retain: 2 * day})
	old, young, both, none := b.company(t, "old"), b.company(t, "young"), b.company(t, "both"), b.company(t, "none")

	oldKid := b.kid(t, keys, old)
	bothFirst := b.kid(t, keys, both)
	require.NoError(t, keys.Rotate(b.ctx, both)) // bothFirst retired at day 0
	b.clock.Add(89 * day)
	youngKid := b.kid(t, keys, young)
	bothSecond := b.kid(t, keys, both)
	require.NoError(t, keys.Rotate(b.ctx, both)) // bothSecond retired at day 89
	bothCurrent := b.kid(t, keys, both)
	b.clock.Add(day) // day 90

	testdb.RunSweeps(t, b.pool, b.clock.Now, signing.Sweeps(keys)...)

	// old: rotated; its old key is retired now and still published.
	oldNew := b.kid(t, b.replica(), old)
	require.NotEqual(t, oldKid, oldNew)
	require.Equal(t, []string{oldNew, oldKid}, b.kids(t, b.replica(), old))
	var retiredAt time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT retired_at FROM signing_keys WHERE kid = $1`, oldKid).Scan(&retiredAt))
	require.True(t, retiredAt.Equal(b.clock.Now()), "%v", retiredAt)

	// young: 89 days old, left alone.
	require.Equal(t, []string{youngKid}, b.kids(t, b.replica(), young))
	all, _ := b.count(t, young)
	require.Equal(t, 1, all)

	// both: the key retired 90 days ago is gone, the one retired a day ago
	// stays, the current one is young.
	require.Equal(t, []string{bothCurrent, bothSecond}, b.kids(t, b.replica(), both))
	all, _ = b.count(t, both)
	require.Equal(t, 2, all)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM signing_keys WHERE kid = $1`, bothFirst).Scan(&n))
	require.Zero(t, n)

	// none: no key was made for a Company that never used one.
	all, _ = b.count(t, none)
	require.Zero(t, all)

	// Two days on, the next run deletes the keys retired at day 89 and 90
	// and rotates nothing.
	b.clock.Add(2 * day)
	require.NoError(t, signing.Maintain(b.ctx, keys, b.clock.Now()))
	for _, id := range []int64{old, young, both} {
		all, cur := b.count(t, id)
		require.Equal(t, 1, all)
		require.Equal(t, 1, cur)
	}
	require.Equal(t, oldNew, b.kid(t, b.replica(), old))
	require.Equal(t, youngKid, b.kid(t, b.replica(), young))
	require.Equal(t, bothCurrent, b.kid(t, b.replica(), both))
}
