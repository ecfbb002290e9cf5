package issuer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/fosite"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
)

// client is the client_id of the plan tests' grants.
const client = "https://agent.test/client"

// plansCompany is a fresh database for a plan test (plancheck.NewDatabase)
// with one Company, slug.
func plansCompany(t *testing.T, slug string) (*pgxpool.Pool, *pgx.Conn, *plancheck.Recorder, *tenant.Company) {
	t.Helper()
	pool, conn, rec := plancheck.NewDatabase(t)
	s := tenant.DefaultSettings()
	s.Organization.Name, s.Organization.Domain = slug, slug+".example"
	c, err := tenant.NewStore(pool).Create(context.Background(), slug, s)
	require.NoError(t, err)
	return pool, conn, rec, c
}

// TestDevicePlans is the plan test (internal/plans) of Device Sign-In's
// statements, which only the token endpoint and the device page reach:
// each is planned through the index it needs as a custom and a generic
// plan, on a few rows never analyzed, on many never analyzed, and after
// ANALYZE.
func TestDevicePlans(t *testing.T) {
	pool, conn, rec, c := plansCompany(t, "device")
	ctx := context.Background()
	alice, err := accounts.NewStore(pool).Create(ctx, c.ID, "alice", "alpha's password")
	require.NoError(t, err)
	ctx = tenant.WithCompany(ctx, c)
	store := NewStore(pool)
	now := time.Now()

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

// TestRefreshPlans is the plan test of a refresh's statements as the
// token endpoint runs them (refreshGrant): the client assertion's jti with
// the refresh token's read, then the rotation that stores the new tokens,
// which reads the used token by its key. Same phases as TestDevicePlans.
func TestRefreshPlans(t *testing.T) {
	pool, conn, rec, c := plansCompany(t, "refresh")
	ctx := tenant.WithCompany(context.Background(), c)
	store := NewStore(pool)
	now := time.Now()
	sess := &Session{}
	for _, kind := range []fosite.TokenType{fosite.AccessToken, fosite.RefreshToken} {
		sess.SetExpiresAt(kind, now.Add(time.Hour))
	}
	require.NoError(t, store.CreateRefreshTokenSession(ctx, "refresh_1", "", &fosite.Request{ID: "req_1",
		RequestedAt: now, Client: &Client{ID: client}, GrantedScope: fosite.Arguments{"orders"}, Session: sess}))

	byKey := plancheck.Want{Index: map[string]string{"oauth_tokens": "oauth_tokens_pkey"}}
	stmts := rec.Record(func() {
		jti, _ := clientauth.Defer(ctx)
		_, err := clientauth.NewPGReplays(pool).Use(jti, "https://poppy.test/t/refresh", client, "jti_1", now.Add(time.Minute))
		require.NoError(t, err)
		req, err := store.GetRefreshTokenSession(jti, "refresh_1", nil)
		require.NoError(t, err)
		require.NoError(t, store.rotateRefresh(ctx, "refresh_1", "access_2", "refresh_2", req))
	})
	// The jti's INSERT, the read, the rotation (the grant's lock is not
	// listed: it reads no table).
	wants := []plancheck.Want{{}, byKey, byKey}
	plancheck.Phases(t, conn, plancheck.Pair(t, "refresh", stmts, wants), func(t *testing.T) {
		for i, n := range []int{20000, 300, 300} {
			_, err := conn.Exec(ctx, `WITH c AS (INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id)
				INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, requested_at,
					scopes, granted_scopes, form, session, expires_at)
				SELECT c.id, kind, sha256((kind || g)::bytea), 'req_' || g / 4, $2, now(), '{orders}', '{orders}',
					'{}', '{}', now() + interval '1 hour'
				FROM c, generate_series(1, $3::int) g, unnest('{access,refresh}'::text[]) kind`,
				fmt.Sprint("loaded-", i), client, n)
			require.NoError(t, err)
		}
		// And many more of this Company's, in other grants.
		_, err := conn.Exec(ctx, `INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id,
				requested_at, scopes, granted_scopes, form, session, expires_at)
			SELECT $1, kind, sha256((kind || g)::bytea), 'req_' || g, $2, now(), '{orders}', '{orders}', '{}', '{}',
				now() + interval '1 hour'
			FROM generate_series(2, 5000) g, unnest('{access,refresh}'::text[]) kind`, c.ID, client)
		require.NoError(t, err)
	})
}

// TestCompanyConnectionsPlans: the console's Agents page reads the
// Company's grants through the primary key's Company prefix, each grant's
// rows by oauth_tokens_request and the accounts by their keys: never
// through an index that holds every Company's tokens (the account index,
// which leads with account_id, or expires_at) nor by a full scan, whether
// the tables are new, loaded but never analyzed, or analyzed. These are
// a page's statements, not a hot path's (docs/decisions.md, "Query plans
// that hold"): they read as many rows as the Company has tokens, which
// the page needs, and only their custom plans are checked, since with
// the test's two Companies a generic plan takes company_id = $1 for half
// the table, which no real deployment's statistics say.
func TestCompanyConnectionsPlans(t *testing.T) {
	pool, conn, rec, c := plansCompany(t, "agents")
	ctx := context.Background()
	alice, err := accounts.NewStore(pool).Create(ctx, c.ID, "alice", "alpha's password")
	require.NoError(t, err)
	store := NewStore(pool)
	now := time.Now()
	tctx := tenant.WithCompany(ctx, c)
	req := fosite.NewRequest()
	req.ID, req.RequestedAt, req.Client = "req_alice", now, &Client{ID: client}
	req.GrantedScope = fosite.Arguments{"orders"}
	sess := &Session{AccountID: alice.ID, Username: "alice"}
	sess.SetExpiresAt(fosite.RefreshToken, now.Add(time.Hour))
	sess.SetExpiresAt(fosite.AccessToken, now.Add(time.Hour))
	req.Session = sess
	require.NoError(t, store.CreateAccessTokenSession(tctx, "sig_access", req))
	require.NoError(t, store.CreateRefreshTokenSession(tctx, "sig_refresh", "", req))

	stmts := rec.Record(func() {
		_, err := store.CompanyConnections(ctx, c.ID, now, 0, "", 50)
		require.NoError(t, err)
		_, err = store.SignIns(ctx, c.ID, now, time.Time{}, 50)
		require.NoError(t, err)
	})
	require.Len(t, stmts, 2)
	allowed := map[string][]string{"oauth_tokens": {"oauth_tokens_pkey", "oauth_tokens_request"},
		"accounts": {"accounts_pkey", "accounts_company_id_username_key"}}
	check := func(t *testing.T) { plancheck.OnlyIndexes(t, conn, stmts, allowed) }
	t.Run("new", check)
	// Another Company with many accounts, each with an agent signed in.
	_, err = conn.Exec(ctx, `WITH c AS (INSERT INTO companies (slug, settings) VALUES ('loaded', '{}') RETURNING id),
			a AS (INSERT INTO accounts (company_id, username, password_hash)
				SELECT c.id, 'user' || g, 'x' FROM c, generate_series(1, 20000) g RETURNING id, company_id)
		INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, account_id, requested_at,
			scopes, granted_scopes, form, session, expires_at)
		SELECT a.company_id, kind, sha256((kind || a.id)::bytea), 'req_' || a.id, $1, a.id, now(), '{orders}',
			'{orders}', '{}', '{}', now() + interval '1 hour'
		FROM a, unnest('{access,refresh}'::text[]) kind`, client)
	require.NoError(t, err)
	t.Run("loaded", check)
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	t.Run("analyzed", check)
}
