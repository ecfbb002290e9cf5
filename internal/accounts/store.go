package accounts

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/poppyhost/poppyhost/internal/db"
)

// insert stores a new account with an encoded password hash, or returns
// ErrTaken.
func (s *Store) insert(ctx context.Context, companyID int64, username, hash string) (Account, error) {
	a := Account{Username: username}
	err := s.pool.QueryRow(ctx, `INSERT INTO accounts (company_id, username, password_hash)
		VALUES ($1, $2, $3) RETURNING id, created_at`, companyID, username, hash).
		Scan(&a.ID, &a.CreatedAt)
	if db.IsConflict(err, "") {
		return Account{}, ErrTaken
	}
	return a, err
}

// withHash returns a Company's account by username with its encoded
// password hash, or ErrNotFound.
func (s *Store) withHash(ctx context.Context, companyID int64, username string) (Account, string, error) {
	var (
		a    Account
		hash string
	)
	err := s.pool.QueryRow(ctx, `SELECT id, username, created_at, password_hash FROM accounts
		WHERE company_id = $1 AND username = $2`, companyID, username).Scan(&a.ID, &a.Username, &a.CreatedAt, &hash)
	return a, hash, db.NotFound(err, ErrNotFound)
}

// Lookup returns a Company's account by username, or ErrNotFound. It
// checks no password and counts no sign-in attempt: it is for the
// operator's tools, never for signing someone in.
func (s *Store) Lookup(ctx context.Context, companyID int64, username string) (Account, error) {
	var a Account
	err := s.pool.QueryRow(ctx, `SELECT id, username, created_at FROM accounts
		WHERE company_id = $1 AND username = $2`, companyID, username).Scan(&a.ID, &a.Username, &a.CreatedAt)
	if err != nil {
		return Account{}, db.NotFound(err, ErrNotFound)
	}
	return a, nil
}

// updatePassword replaces the encoded password hash of a Company's
// account, or returns ErrNotFound.
func (s *Store) updatePassword(ctx context.Context, companyID, accountID int64, hash string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE accounts SET password_hash = $3 WHERE company_id = $1 AND id = $2`,
		companyID, accountID, hash)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return err
}

// admitSQL counts one attempt at ($1, $2) at time $3 unless the username is
// locked, in one atomic upsert, and returns a row only if it counted it.
// The count restarts when the last failure is FailureWindow ($6 seconds)
// old; once it passes FreeFailures ($4) the username is locked for
// 2^(failures-$4-1) seconds, at most MaxLock ($5 seconds).
const admitSQL = `INSERT INTO login_failures AS f (company_id, username, failures, last_failure_at, locked_until)
VALUES ($1, $2, 1, $3, $3)
ON CONFLICT (company_id, username) DO UPDATE SET (failures, last_failure_at, locked_until) = (
	SELECT n, $3, $3 + CASE WHEN n <= $4 THEN interval '0'
		ELSE LEAST(make_interval(secs => power(2, LEAST(n - $4 - 1, 30))), make_interval(secs => $5)) END
	FROM (SELECT CASE WHEN f.last_failure_at > $3 - make_interval(secs => $6) THEN f.failures + 1 ELSE 1 END AS n) AS c)
WHERE f.locked_until <= $3
RETURNING true`

// count counts one attempt at username at now (admitSQL) and reports
// whether it did: false means the username is locked. An attempt at a
// Company that does not exist counts as counted: it has no accounts to
// guess and nowhere to count, and the attempt fails with ErrNotFound.
func (s *Store) count(ctx context.Context, companyID int64, username string, now time.Time) (bool, error) {
	var counted bool
	err := s.pool.QueryRow(ctx, admitSQL, companyID, username, now, FreeFailures,
		MaxLock.Seconds(), FailureWindow.Seconds()).Scan(&counted)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &pe) && pe.Code == "23503":
		return true, nil
	case db.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// lockedUntil is when username's lock ends; the zero time when it has no
// failures counted (a success cleared them).
func (s *Store) lockedUntil(ctx context.Context, companyID int64, username string) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, `SELECT locked_until FROM login_failures
		WHERE company_id = $1 AND username = $2`, companyID, username).Scan(&until)
	if db.IsNotFound(err) {
		return time.Time{}, nil
	}
	return until, err
}

// clearFailures forgets username's failures after a successful sign-in.
func (s *Store) clearFailures(ctx context.Context, companyID int64, username string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM login_failures WHERE company_id = $1 AND username = $2`,
		companyID, username)
	return err
}

// DeleteStaleLoginFailures removes the failure counts that no longer count
// (the last failure FailureWindow ago, so no lock either), such as those
// left by probes for unknown usernames, as of now, and returns how many
// it removed.
func (s *Store) DeleteStaleLoginFailures(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "login_failures", "last_failure_at <= $1",
		now.Add(-FailureWindow))
}
