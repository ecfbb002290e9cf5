package tenant_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestModifyLeavesTheCompanysTrafficAlone: while a change's hooks run,
// rows that name the Company (a Session, here) are still written:
// Modify's lock is not one foreign-key checks wait for.
func TestModifyLeavesTheCompanysTrafficAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	store := tenant.NewStore(pool)
	co, err := store.Create(ctx, "busy", tenant.Settings{Organization: tenant.Organization{Name: "Busy", Domain: "busy.example"}})
	require.NoError(t, err)
	inHook, release := make(chan struct{}), make(chan struct{})
	store.OnModify(func(context.Context, pgx.Tx, *tenant.Company, *tenant.Company) error {
		close(inHook)
		<-release
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := store.Modify(ctx, co.ID, func(c *tenant.Company) (tenant.Settings, error) { return c.Settings, nil })
		done <- err
	}()
	<-inHook
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pool.Exec(wctx, `INSERT INTO sessions (company_id, client_id, sid, user_id)
		VALUES ($1, 'https://agent.example/', 's1', 'usr_1')`, co.ID)
	close(release)
	require.NoError(t, err, "the insert waited for the settings change")
	require.NoError(t, <-done)
}
