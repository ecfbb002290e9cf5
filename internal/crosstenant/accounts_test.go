package crosstenant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
)

func TestAccounts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// A fixed clock: a lock stays while the test runs.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := accounts.NewStore(w.pool, accounts.WithClock(func() time.Time { return now }))
	const password = "correct horse"
	alice, err := store.Create(w.ctx, w.a.ID, "alice", password)
	require.NoError(t, err)

	// keptA checks, as A, that alice is there and signs in with her
	// password.
	keptA := func(t *testing.T) {
		t.Helper()
		got, err := store.Lookup(w.ctx, w.a.ID, "alice")
		require.NoError(t, err)
		require.Equal(t, alice.ID, got.ID)
		got, err = store.Authenticate(w.ctx, w.a.ID, "alice", password)
		require.NoError(t, err)
		require.Equal(t, alice.ID, got.ID)
	}

	t.Run("accounts.Store/Lookup", func(t *testing.T) {
		_, err := store.Lookup(w.ctx, w.b.ID, "alice")
		require.ErrorIs(t, err, accounts.ErrNotFound)
		keptA(t)
	})
	t.Run("accounts.Store/Authenticate", func(t *testing.T) {
		_, err := store.Authenticate(w.ctx, w.b.ID, "alice", password)
		require.ErrorIs(t, err, accounts.ErrNotFound)
		keptA(t)
	})
	t.Run("accounts.Store/SetPassword", func(t *testing.T) {
		require.ErrorIs(t, store.SetPassword(w.ctx, w.b.ID, alice.ID, "another password"), accounts.ErrNotFound)
		keptA(t)
	})
	t.Run("accounts.Store/Create", func(t *testing.T) {
		bob, err := store.Create(w.ctx, w.b.ID, "alice", "bravo's own password")
		require.NoError(t, err, "a username is per Company")
		require.NotEqual(t, alice.ID, bob.ID)
		got, err := store.Lookup(w.ctx, w.b.ID, "alice")
		require.NoError(t, err)
		require.Equal(t, bob.ID, got.ID)
		keptA(t)
	})
	t.Run("accounts.Store/Authenticate/login failures", func(t *testing.T) {
		// B's failures at its own alice lock B's alice, not A's.
		for range accounts.FreeFailures + 1 {
			_, err := store.Authenticate(w.ctx, w.b.ID, "alice", "wrong password")
			require.ErrorIs(t, err, accounts.ErrNotFound)
		}
		_, err := store.Authenticate(w.ctx, w.b.ID, "alice", "wrong password")
		require.ErrorIs(t, err, accounts.ErrThrottled)
		keptA(t)

		// Later, A's alice is locked; B's alice signing in clears B's
		// failures only.
		now = now.Add(accounts.FailureWindow + time.Hour)
		for range accounts.FreeFailures + 1 {
			_, err := store.Authenticate(w.ctx, w.a.ID, "alice", "wrong password")
			require.ErrorIs(t, err, accounts.ErrNotFound)
		}
		_, err = store.Authenticate(w.ctx, w.a.ID, "alice", password)
		require.ErrorIs(t, err, accounts.ErrThrottled)
		_, err = store.Authenticate(w.ctx, w.b.ID, "alice", "bravo's own password")
		require.NoError(t, err)
		_, err = store.Authenticate(w.ctx, w.a.ID, "alice", password)
		require.ErrorIs(t, err, accounts.ErrThrottled, "A's lock stands")
	})
}
