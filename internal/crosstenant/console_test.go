package crosstenant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/console"
)

func TestConsole(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := console.NewStore(w.pool, accounts.NewStore(w.pool))
	const password = "correct horse"
	ada, err := store.Create(w.ctx, w.a.ID, "ada@example.com", "Ada", console.RoleOwner, password)
	require.NoError(t, err)
	agent, err := store.Create(w.ctx, w.a.ID, "grace@example.com", "Grace", console.RoleAgent, password)
	require.NoError(t, err)

	// keptA checks, as A, that both members are there with their roles
	// and that ada signs in with her password.
	keptA := func(t *testing.T) {
		t.Helper()
		list, err := store.List(w.ctx, w.a.ID)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, console.RoleOwner, list[0].Role)
		require.Equal(t, console.RoleAgent, list[1].Role)
		got, err := store.Authenticate(w.ctx, w.a, "ada@example.com", password)
		require.NoError(t, err)
		require.Equal(t, ada.ID, got.ID)
	}

	t.Run("console.Store/List", func(t *testing.T) {
		list, err := store.List(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.Empty(t, list)
		keptA(t)
	})
	t.Run("console.Store/Authenticate", func(t *testing.T) {
		_, err := store.Authenticate(w.ctx, w.b, "ada@example.com", password)
		require.ErrorIs(t, err, console.ErrNotFound)
		keptA(t)
	})
	t.Run("console.Store/SetRole", func(t *testing.T) {
		require.ErrorIs(t, store.SetRole(w.ctx, w.b.ID, agent.ID, console.RoleOwner), console.ErrNotFound)
		keptA(t)
	})
	t.Run("console.Store/Remove", func(t *testing.T) {
		require.ErrorIs(t, store.Remove(w.ctx, w.b.ID, agent.ID), console.ErrNotFound)
		keptA(t)
	})
	t.Run("console.Store/CreateInvite+AcceptInvite+Invites+RevokeInvite", func(t *testing.T) {
		// A's invite is not B's to accept, and B's invite of A's email is
		// B's own.
		token, err := store.CreateInvite(w.ctx, console.Invite{CompanyID: w.a.ID, Email: "joan@example.com",
			Role: console.RoleOwner, ExpiresAt: time.Now().Add(time.Hour)}, ada.ID)
		require.NoError(t, err)
		_, err = store.AcceptInvite(w.ctx, w.b.ID, token, "Mallory", "mallory's password", time.Now())
		require.ErrorIs(t, err, console.ErrNotFound)
		_, err = store.CreateInvite(w.ctx, console.Invite{CompanyID: w.b.ID, Email: "ada@example.com",
			Role: console.RoleAgent, ExpiresAt: time.Now().Add(time.Hour)}, 0)
		require.NoError(t, err, "an email is per Company")
		// A's pending invite is neither listed nor revoked at B.
		listed, err := store.Invites(w.ctx, w.b.ID, time.Now())
		require.NoError(t, err)
		require.Len(t, listed, 1)
		require.Equal(t, console.RoleAgent, listed[0].Role, "B's own invite only")
		pending, err := store.Invites(w.ctx, w.a.ID, time.Now())
		require.NoError(t, err)
		require.Len(t, pending, 1)
		require.ErrorIs(t, store.RevokeInvite(w.ctx, w.b.ID, pending[0].ID), console.ErrNotFound)
		keptA(t)
		joan, err := store.AcceptInvite(w.ctx, w.a.ID, token, "Joan", "joan's password", time.Now())
		require.NoError(t, err, "A's invite still works at A")
		require.Equal(t, w.a.ID, joan.CompanyID)
	})
	t.Run("console.Store/Create", func(t *testing.T) {
		bob, err := store.Create(w.ctx, w.b.ID, "ada@example.com", "B's Ada", console.RoleOwner, "bravo's own password")
		require.NoError(t, err, "an email is per Company")
		require.NotEqual(t, ada.ID, bob.ID)
		got, err := store.Authenticate(w.ctx, w.b, "ada@example.com", "bravo's own password")
		require.NoError(t, err)
		require.Equal(t, bob.ID, got.ID)
		got, err = store.Authenticate(w.ctx, w.a, "ada@example.com", password)
		require.NoError(t, err)
		require.Equal(t, ada.ID, got.ID)
	})
}
