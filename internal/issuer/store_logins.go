package issuer

import (
	"context"
	"time"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/db"
)

// The issuer's pages remember a signed-in browser by a random token in a
// cookie; issuer_logins keeps its hash.

// loginAccount returns the account a browser's login token is signed in
// to while it has not expired at now, or nil.
func (s *Store) loginAccount(ctx context.Context, companyID int64, token string, now time.Time) (*accounts.Account, error) {
	var a accounts.Account
	err := s.pool.QueryRow(ctx, `
		SELECT a.id, a.username, a.created_at FROM issuer_logins l
		JOIN accounts a ON a.id = l.account_id AND a.company_id = l.company_id
		WHERE l.company_id = $1 AND l.token = $2 AND l.expires_at > $3`,
		companyID, hashSig(token), now).Scan(&a.ID, &a.Username, &a.CreatedAt)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// createLogin stores a browser's login token for accountID.
func (s *Store) createLogin(ctx context.Context, companyID int64, token string, accountID int64, now, expires time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO issuer_logins (company_id, token, account_id, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5)`, companyID, hashSig(token), accountID, now, expires)
	return err
}

// deleteLogin forgets a browser's login token.
func (s *Store) deleteLogin(ctx context.Context, companyID int64, token string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM issuer_logins WHERE company_id = $1 AND token = $2`,
		companyID, hashSig(token))
	return err
}
