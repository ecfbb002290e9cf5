package crosstenant_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

func TestTenant(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := w.companies
	key, secret, err := store.CreateAPIKey(w.ctx, w.a.ID, "deploy")
	require.NoError(t, err)

	// keptA checks, as A, that A's key is listed unrevoked and still
	// resolves to A.
	keptA := func(t *testing.T) {
		t.Helper()
		keys, err := store.ListAPIKeys(w.ctx, w.a.ID)
		require.NoError(t, err)
		require.Len(t, keys, 1)
		require.Equal(t, key.ID, keys[0].ID)
		require.Nil(t, keys[0].RevokedAt)
		c, err := store.CompanyForAPIKey(w.ctx, secret)
		require.NoError(t, err)
		require.Equal(t, w.a.ID, c.ID)
	}

	t.Run("tenant.Store/ListAPIKeys", func(t *testing.T) {
		keys, err := store.ListAPIKeys(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.Empty(t, keys)
		keptA(t)
	})
	t.Run("tenant.Store/RevokeAPIKey", func(t *testing.T) {
		require.ErrorIs(t, store.RevokeAPIKey(w.ctx, w.b.ID, key.ID), tenant.ErrNotFound)
		keptA(t)
	})
	t.Run("tenant.Store/CreateAPIKey", func(t *testing.T) {
		_, secretB, err := store.CreateAPIKey(w.ctx, w.b.ID, "deploy")
		require.NoError(t, err)
		c, err := store.CompanyForAPIKey(w.ctx, secretB)
		require.NoError(t, err)
		require.Equal(t, w.b.ID, c.ID)
		keptA(t)
	})
	t.Run("tenant.Store/CompanyForAPIKey", func(t *testing.T) {
		c, err := store.CompanyForAPIKey(w.ctx, secret)
		require.NoError(t, err)
		require.NotEqual(t, w.b.ID, c.ID)
		keptA(t)
	})
	t.Run("tenant.Store/APIKeyFor", func(t *testing.T) {
		c, k, err := store.APIKeyFor(w.ctx, secret)
		require.NoError(t, err)
		require.Equal(t, w.a.ID, c.ID)
		require.Equal(t, key.ID, k.ID)
		keptA(t)
	})
	t.Run("audit.Store/List", func(t *testing.T) {
		// A change of A's, recorded as an audited request records it.
		_, err := w.pool.Exec(w.ctx, `INSERT INTO audit_log (company_id, company_slug, actor_kind, actor_id, action, path)
			VALUES ($1, $2, 'api_key', $3, 'PATCH /x', '/x')`, w.a.ID, w.a.Slug, key.ID)
		require.NoError(t, err)
		log := audit.NewStore(w.pool, 0)
		entries, err := log.List(w.ctx, w.b.ID, 0, 100)
		require.NoError(t, err)
		require.Empty(t, entries, "A's entries listed as B's")
		entries, err = log.List(w.ctx, w.a.ID, 0, 100)
		require.NoError(t, err)
		require.Len(t, entries, 1)
		require.Equal(t, w.a.Slug, entries[0].Company)
	})
	t.Run("tenant.Store/Modify", func(t *testing.T) {
		_, err := store.Modify(w.ctx, w.b.ID, func(c *tenant.Company) (tenant.Settings, error) {
			s := c.Settings
			s.Domains = append(s.Domains, w.a.Settings.Organization.Domain)
			return s, nil
		})
		var conflict *tenant.ConflictError
		require.ErrorAs(t, err, &conflict, "B cannot take A's domain")
		c, err := store.GetByDomain(w.ctx, w.a.Settings.Organization.Domain)
		require.NoError(t, err)
		require.Equal(t, w.a.ID, c.ID)
		a, err := store.GetByID(w.ctx, w.a.ID)
		require.NoError(t, err)
		require.Equal(t, w.a.Settings, a.Settings)
	})
}
