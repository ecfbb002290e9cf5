package crosstenant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/sessions"
)

func TestSessions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := sessions.NewStore(w.pool)
	const client, sid = "https://agent.test/client", "sid_a"
	w.session(t, w.a.ID, client, sid)
	accts := accounts.NewStore(w.pool)
	bob, err := accts.Create(w.ctx, w.b.ID, "bob", "bravo's password")
	require.NoError(t, err)

	keptA := func(t *testing.T) {
		t.Helper()
		s, err := store.Get(w.ctx, w.a.ID, client, sid)
		require.NoError(t, err)
		require.Nil(t, s.EndedAt, "not ended")
		require.Zero(t, s.AccountID, "bound to no account")
	}

	for _, c := range []struct {
		method string
		call   func() error
	}{
		{"Get", func() error { _, err := store.Get(w.ctx, w.b.ID, client, sid); return err }},
		{"End", func() error { return store.End(w.ctx, w.b.ID, client, sid, time.Now()) }},
		{"BindAccount", func() error { _, err := store.BindAccount(w.ctx, w.b.ID, client, sid, bob.ID); return err }},
	} {
		t.Run("sessions.Store/"+c.method, func(t *testing.T) {
			require.ErrorIs(t, c.call(), sessions.ErrNotFound)
			keptA(t)
		})
	}
}
