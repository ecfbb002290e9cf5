package issuer

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// expiredSignIn is a sign-in that ended when its last refresh token
// expired.
type expiredSignIn struct {
	companyID, accountID int64
	clientID             string
	endedAt              time.Time
}

// EndExpiredSignIns tells signedOut of the sign-ins whose refresh tokens
// ran out after since and by now, as revocation does (spec 5.5: "The
// account is signed out once no refresh token the Company issued to that
// client_id for the account is still valid"), so that what acted for the
// account reads the same whether the sign-in was revoked or expired. A
// refresh token's expiry ends the sign-in unless a refresh token of
// another grant, signed in by then and neither revoked nor expired, was
// still valid. Each is told with the expiry as endedAt, so running it
// again over the same span changes nothing. It returns how many sign-ins
// it found ended.
func (s *Store) EndExpiredSignIns(ctx context.Context, since, now time.Time) (int64, error) {
	if s.signedOut == nil {
		return 0, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT x.company_id, x.account_id, x.client_id, x.expires_at FROM oauth_tokens x
		WHERE x.kind = 'refresh' AND x.account_id IS NOT NULL AND x.expires_at > $1 AND x.expires_at <= $2
			AND NOT EXISTS (SELECT 1 FROM oauth_tokens y
				WHERE y.company_id = x.company_id AND y.account_id = x.account_id AND y.client_id = x.client_id
					AND y.kind = 'refresh' AND y.active AND y.expires_at > x.expires_at
					AND (SELECT min(z.requested_at) FROM oauth_tokens z
						WHERE z.company_id = y.company_id AND z.request_id = y.request_id) <= x.expires_at)
		ORDER BY x.expires_at`, since, now)
	if err != nil {
		return 0, err
	}
	ended, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (expiredSignIn, error) {
		var e expiredSignIn
		err := row.Scan(&e.companyID, &e.accountID, &e.clientID, &e.endedAt)
		return e, err
	})
	if err != nil {
		return 0, err
	}
	for i, e := range ended {
		if err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			return s.signedOut(ctx, tx, e.companyID, e.accountID, e.clientID, e.endedAt)
		}); err != nil {
			return int64(i), err
		}
	}
	return int64(len(ended)), nil
}
