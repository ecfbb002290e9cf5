package accounts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestLookupAndSetPassword: an account is found by Company and username
// without a password, even while its sign-in is locked, and without
// counting an attempt; a new password replaces the old one, only for that
// Company's account.
func TestLookupAndSetPassword(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	ctx := context.Background()
	// A fixed clock: the lock below must not lapse while slow hashes run
	// on a loaded machine.
	at := time.Now()
	store := accounts.NewStore(pool, accounts.WithClock(func() time.Time { return at }))
	company := func(slug string) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id`, slug).Scan(&id))
		return id
	}
	alpha, beta := company("alpha"), company("beta")
	a, err := store.Create(ctx, alpha, "alice", "old password")
	require.NoError(t, err)

	// Lock alice's sign-in.
	for range accounts.FreeFailures + 1 {
		_, err = store.Authenticate(ctx, alpha, "alice", "a guess")
		require.ErrorIs(t, err, accounts.ErrNotFound)
	}
	_, err = store.Authenticate(ctx, alpha, "alice", "old password")
	require.ErrorIs(t, err, accounts.ErrThrottled)
	var failures int
	count := func() int {
		require.NoError(t, pool.QueryRow(ctx, `SELECT failures FROM login_failures WHERE company_id = $1 AND username = 'alice'`,
			alpha).Scan(&failures))
		return failures
	}
	before := count()

	got, err := store.Lookup(ctx, alpha, "alice")
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, "alice", got.Username)
	require.Equal(t, before, count(), "a lookup is not a sign-in attempt")
	for _, miss := range []struct {
		company  int64
		username string
	}{{alpha, "bob"}, {alpha, "ALICE"}, {beta, "alice"}} {
		_, err = store.Lookup(ctx, miss.company, miss.username)
		require.ErrorIs(t, err, accounts.ErrNotFound, "%v", miss)
	}

	require.ErrorIs(t, store.SetPassword(ctx, beta, a.ID, "new password"), accounts.ErrNotFound, "another Company's account")
	require.NoError(t, store.SetPassword(ctx, alpha, a.ID, "new password"))
	var hash string
	require.NoError(t, pool.QueryRow(ctx, `SELECT password_hash FROM accounts WHERE id = $1`, a.ID).Scan(&hash))
	require.True(t, accounts.VerifyPassword(hash, "new password"))
	require.False(t, accounts.VerifyPassword(hash, "old password"))
}
