package accounts

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Lookup returns a Company's account by username, or ErrNotFound. It
// checks no password and counts no sign-in attempt: it is for the
// operator's tools, never for signing someone in.
func (s *Store) Lookup(ctx context.Context, companyID int64, username string) (Account, error) {
	var a Account
	err := s.pool.QueryRow(ctx, `SELECT id, username, created_at FROM accounts
		WHERE company_id = $1 AND username = $2`, companyID, username).Scan(&a.ID, &a.Username, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, ErrNotFound
	}
	return a, err
}

// SetPassword replaces the password of a Company's account, or returns
// ErrNotFound. The caller has checked the password. The hash waits its
// turn behind the sign-ins being checked (Limits).
func (s *Store) SetPassword(ctx context.Context, companyID, accountID int64, password string) error {
	hash, err := s.hash(ctx, companyID, password)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE accounts SET password_hash = $3 WHERE company_id = $1 AND id = $2`,
		companyID, accountID, hash)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return err
}
