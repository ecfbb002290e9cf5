package issuer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
)

// TestDevicePlans is the plan test (internal/plans) of Device Sign-In's
// statements, which only the token endpoint and the device page reach:
// each is planned through the index it needs as a custom and a generic
// plan, on a few rows never analyzed, on many never analyzed, and after
// ANALYZE.
func TestDevicePlans(t *testing.T) {
	pool, conn, rec := plancheck.NewDatabase(t)
	ctx := context.Background()
	s := tenant.DefaultSettings()
	s.Organization.Name, s.Organization.Domain = "Device", "device.example"
	c, err := tenant.NewStore(pool).Create(ctx, "device", s)
	require.NoError(t, err)
	alice, err := accounts.NewStore(pool).Create(ctx, c.ID, "alice", "alpha's password")
	require.NoError(t, err)
	ctx = tenant.WithCompany(ctx, c)
	store := NewStore(pool)
	now := time.Now()
	const client = "https://agent.test/client"

	byCode := plancheck.Want{Index: map[string]string{"device_grants": "device_grants_pkey"}}
	byUserCode := plancheck.Want{Index: map[string]string{"device_grants": "device_grants_user_code_company_id_key"},
		Also: map[string][]string{"device_grants": {"device_grants_pkey"}}}
	stmts := rec.Record(func() {
		device, user, err := store.createDevice(ctx, client, []string{"orders"}, "", now)
		require.NoError(t, err)
		_, err = store.deviceByUserCode(ctx, user, now)
		require.NoError(t, err)
		_, err = store.decideDevice(ctx, user, alice.ID, []string{"orders"}, now)
		require.NoError(t, err)
		_, err = store.pollDevice(ctx, device, client, now)
		require.NoError(t, err)
		_, err = store.useDevice(ctx, device)
		require.NoError(t, err)
	})
	// The INSERT, then the user code's page (a tie allowed while new,
	// docs/decisions.md), then the polls.
	wants := []plancheck.Want{{}, byUserCode, byUserCode, byCode, byCode}
	plancheck.Phases(t, conn, plancheck.Pair(t, "device", stmts, wants), func(t *testing.T) {
		for i, n := range []int{20000, 300, 300} {
			_, err := conn.Exec(ctx, `WITH c AS (INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id)
				INSERT INTO device_grants (company_id, device_code, user_code, client_id, scopes, interval_seconds,
					created_at, expires_at)
				SELECT c.id, sha256(('device ' || g)::bytea), 'CODE' || g, $2, '{orders}', 5, now(),
					now() + interval '10 minutes'
				FROM c, generate_series(1, $3::int) g`, fmt.Sprint("loaded-", i), client, n)
			require.NoError(t, err)
		}
	})
}
