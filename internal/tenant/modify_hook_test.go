package tenant_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestModifyHooks: Modify tells each hook of the change in its own
// transaction, with the Company before and after; a hook's error aborts
// the change.
func TestModifyHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := tenant.NewStore(testdb.NewPool(t))
	co, err := store.Create(ctx, "hooked", tenant.Settings{Organization: tenant.Organization{Name: "Hooked", Domain: "hooked.example"}})
	require.NoError(t, err)
	var seen [][2]int
	var fail error
	store.OnModify(func(ctx context.Context, tx pgx.Tx, before, after *tenant.Company) error {
		// The change is visible in the transaction the hook is given.
		var stored int
		if err := tx.QueryRow(ctx, `SELECT (settings -> 'conversations' ->> 'idle_close_seconds')::int FROM companies
			WHERE id = $1`, after.ID).Scan(&stored); err != nil {
			return err
		}
		require.Equal(t, after.Settings.Conversations.IdleCloseSeconds, stored)
		seen = append(seen, [2]int{before.Settings.Conversations.IdleCloseSeconds, after.Settings.Conversations.IdleCloseSeconds})
		return fail
	})
	set := func(idle int) error {
		_, err := store.Modify(ctx, co.ID, func(c *tenant.Company) (tenant.Settings, error) {
			s := c.Settings
			s.Conversations.IdleCloseSeconds = idle
			return s, nil
		})
		return err
	}
	require.NoError(t, set(600))
	fail = errors.New("no")
	require.ErrorIs(t, set(900), fail)
	got, err := store.GetByID(ctx, co.ID)
	require.NoError(t, err)
	require.Equal(t, 600, got.Settings.Conversations.IdleCloseSeconds, "the failed change is not written")
	require.Equal(t, [][2]int{{0, 600}, {600, 900}}, seen)
}
