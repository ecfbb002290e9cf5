package sessions

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
)

// TestSessionPlans is the plan test (internal/plans) of the Session
// check's statements, which only a signed Session JWT reaches: the jti
// recorded with the Session's lookup in one statement, the first request's
// INSERT, the account binding and the record of a use, each planned
// through the primary key as a custom and a generic plan, on a few rows
// never analyzed, on many never analyzed, and after ANALYZE.
func TestSessionPlans(t *testing.T) {
	pool, conn, rec := plancheck.NewDatabase(t)
	ctx := context.Background()
	// The Company's row alone: its settings play no part here.
	var companyID int64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('sessions', '{}') RETURNING id`).
		Scan(&companyID))
	store := NewStore(pool)
	now := time.Now()
	claims := &Claims{ClientID: "https://agent.test/client", UserID: "usr_1", SID: "sid_1", JTI: "jti_1"}

	stmts := rec.Record(func() {
		sess, err := store.create(ctx, companyID, claims)
		require.NoError(t, err)
		_, _, err = store.lookup(ctx, companyID, claims, now.Add(time.Minute), true)
		require.NoError(t, err)
		require.NoError(t, store.touch(ctx, companyID, sess, now))
		_, err = store.BindAccount(ctx, companyID, claims.ClientID, claims.SID, 1)
		require.NoError(t, err)
	})
	pk := plancheck.Want{Index: map[string]string{"sessions": "sessions_pkey"}}
	wants := []plancheck.Want{{}, pk, pk, pk}
	plancheck.Phases(t, conn, plancheck.Pair(t, "session", stmts, wants), func(t *testing.T) {
		for i, n := range []int{30000, 300, 300} {
			_, err := conn.Exec(ctx, `WITH c AS (INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id),
				s AS (INSERT INTO sessions (company_id, client_id, sid, user_id)
					SELECT c.id, 'https://agent' || g % 50 || '.test/client', 'sid_' || g, 'usr_' || g % 1000
					FROM c, generate_series(1, $2::int) g)
				INSERT INTO session_jtis (company_id, client_id, jti, expires_at)
				SELECT c.id, 'https://agent.test/client', 'jti_' || g, now() + interval '1 minute'
				FROM c, generate_series(1, $2::int) g`, fmt.Sprint("loaded-", i), n)
			require.NoError(t, err)
		}
	})
}
