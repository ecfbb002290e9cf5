package issuer_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestSweepDeletesLongExpiredRows: the sweep deletes codes, tokens,
// device requests and page sign-ins that expired more than a day ago, and
// keeps the others, expired or not.
func TestSweepDeletesLongExpiredRows(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pool := s.env.Pool
	var company, account int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = 'stormline'`).Scan(&company))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM accounts WHERE company_id = $1`, company).Scan(&account))

	now := time.Now()
	ages := map[string]time.Time{
		"gone":   now.Add(-25 * time.Hour),
		"grace":  now.Add(-23 * time.Hour),
		"recent": now.Add(-time.Minute),
		"live":   now.Add(time.Hour),
	}
	for name, exp := range ages {
		for _, kind := range []string{"code", "pkce", "access", "refresh"} {
			_, err := pool.Exec(ctx, `INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id,
				account_id, requested_at, scopes, granted_scopes, form, session, expires_at)
				VALUES ($1, $2, $3, $4, 'https://agent.test/agent.json', $5, $6, '{}', '{}', '{}', '{}', $7)`,
				company, kind, []byte(name+kind), name, account, exp.Add(-time.Hour), exp)
			require.NoError(t, err)
		}
		_, err := pool.Exec(ctx, `INSERT INTO device_grants (company_id, device_code, user_code, client_id, scopes,
			interval_seconds, created_at, expires_at)
			VALUES ($1, $2, $3, 'https://agent.test/agent.json', '{orders:read}', 5, $4, $5)`,
			company, []byte(name), name+rand.Text()[:4], exp.Add(-time.Hour), exp)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO issuer_logins (company_id, token, account_id, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5)`, company, []byte(name), account, exp.Add(-time.Hour), exp)
		require.NoError(t, err)
	}

	testdb.RunSweeps(t, pool, time.Now, issuer.Sweeps(issuer.NewStore(pool))...)

	for table, q := range map[string]string{
		"oauth_tokens":  `SELECT request_id, count(*) FROM oauth_tokens GROUP BY request_id`,
		"device_grants": `SELECT convert_from(device_code, 'UTF8'), count(*) FROM device_grants GROUP BY 1`,
		"issuer_logins": `SELECT convert_from(token, 'UTF8'), count(*) FROM issuer_logins GROUP BY 1`,
	} {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		left := map[string]int{}
		for rows.Next() {
			var name string
			var n int
			require.NoError(t, rows.Scan(&name, &n))
			left[name] = n
		}
		require.NoError(t, rows.Err())
		want := map[string]int{"grace": 1, "recent": 1, "live": 1}
		if table == "oauth_tokens" {
			want = map[string]int{"grace": 4, "recent": 4, "live": 4}
		}
		require.Equal(t, want, left, table)
	}
}
