package console

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Errors at the store boundary.
var (
	ErrNotFound = errors.New("console: not found")
	ErrTaken    = errors.New("console: a staff member has this email")
)

// passwordNamespace is where staff sign-in failures are counted in
// login_failures (accounts.Store.AuthenticateOther).
const passwordNamespace = "staff"

// Store keeps a Company's staff and their console sessions in
// PostgreSQL, always filtered by Company.
type Store struct {
	pool      *pgxpool.Pool
	passwords *accounts.Store
}

// NewStore returns a Store on pool whose passwords are hashed and checked
// by passwords.
func NewStore(pool *pgxpool.Pool, passwords *accounts.Store) *Store {
	return &Store{pool: pool, passwords: passwords}
}

// Limits of a staff member's fields.
const (
	MaxEmail = 254
	MaxName  = 100
)

// NormalizeEmail returns the email as stored (trimmed, lower case) and
// what is wrong with it, or "".
func NormalizeEmail(email string) (string, string) {
	valid := utf8.ValidString(email)
	email = strings.ToLower(strings.TrimSpace(email))
	switch {
	case email == "":
		return "", "is required"
	case !valid || len(email) > MaxEmail:
		return "", fmt.Sprintf("must be at most %d bytes of text", MaxEmail)
	case strings.IndexFunc(email, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return "", "must not contain spaces or control characters"
	}
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		return "", "must be an email address such as ada@example.com"
	}
	return email, ""
}

// CheckName says what is wrong with a staff member's name, or "".
func CheckName(name string) string {
	switch {
	case !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxName:
		return fmt.Sprintf("must be at most %d characters of text", MaxName)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "must not contain control characters"
	}
	return ""
}

// Create adds a staff member with a password to a Company, or returns
// ErrTaken. The caller has checked every field (NormalizeEmail, CheckName,
// accounts.CheckPassword, Role.Valid).
func (s *Store) Create(ctx context.Context, companyID int64, email, name string, role Role, password string) (Member, error) {
	hash, err := s.passwords.Hash(ctx, companyID, password)
	if err != nil {
		return Member{}, err
	}
	handle := randomHandle()
	m := Member{CompanyID: companyID, Email: email, Name: name, Role: role}
	err = s.pool.QueryRow(ctx, `INSERT INTO staff (company_id, email, name, role, password_hash, user_handle)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, (SELECT slug FROM companies WHERE id = $1)`,
		companyID, email, name, string(role), hash, handle).Scan(&m.ID, &m.CompanySlug)
	if db.IsConflict(err, "") {
		return Member{}, ErrTaken
	}
	return m, err
}

// Authenticate returns the Company's staff member with email and
// password, ErrNotFound when they do not match, or accounts' throttling
// and busy errors (accounts.ErrThrottled, accounts.ErrBusy).
func (s *Store) Authenticate(ctx context.Context, co *tenant.Company, email, password string) (Member, error) {
	m := Member{CompanyID: co.ID, CompanySlug: co.Slug}
	err := s.passwords.AuthenticateOther(ctx, co.ID, passwordNamespace, email, password,
		func(ctx context.Context) (string, error) {
			var hash, role string
			err := s.pool.QueryRow(ctx, `SELECT id, email, name, role, password_hash FROM staff
				WHERE company_id = $1 AND email = $2`, co.ID, email).Scan(&m.ID, &m.Email, &m.Name, &role, &hash)
			m.Role = Role(role)
			if err == nil && hash == "" {
				// A member without a password signs in with a passkey only.
				err = accounts.ErrNotFound
			}
			return hash, db.NotFound(err, accounts.ErrNotFound)
		})
	if errors.Is(err, accounts.ErrNotFound) {
		return Member{}, ErrNotFound
	}
	if err != nil {
		return Member{}, err
	}
	return m, nil
}

// session is a console session as authenticate reads it.
type session struct {
	member Member
	// secondFactor: the password was checked, the second factor not yet.
	secondFactor bool
	// signedInAt is when the member signed in (for a password sign-in
	// with a second factor, when they gave it).
	signedInAt time.Time
}

// createSession stores a new session of a member under the hash of its
// token.
func (s *Store) createSession(ctx context.Context, m Member, hash []byte, secondFactor bool, now time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO console_sessions (token_hash, company_id, staff_id, second_factor, created_at, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $5)`, hash, m.CompanyID, m.ID, secondFactor, now)
	return err
}

// session returns the Company's session with hash if it is neither idle
// nor older than absolute at now, and marks it used; ErrNotFound
// otherwise. A session of another Company is not found.
func (s *Store) session(ctx context.Context, co *tenant.Company, hash []byte, now time.Time, idle, absolute time.Duration) (session, error) {
	out := session{member: Member{CompanyID: co.ID, CompanySlug: co.Slug}}
	var role string
	err := s.pool.QueryRow(ctx, `UPDATE console_sessions AS cs SET last_seen_at = $3
		FROM staff AS st
		WHERE cs.token_hash = $1 AND cs.company_id = $2 AND st.id = cs.staff_id AND st.company_id = $2
			AND cs.last_seen_at > $4 AND cs.created_at > $5
		RETURNING st.id, st.email, st.name, st.role, cs.second_factor, cs.created_at`,
		hash, co.ID, now, now.Add(-idle), now.Add(-absolute)).
		Scan(&out.member.ID, &out.member.Email, &out.member.Name, &role, &out.secondFactor, &out.signedInAt)
	out.member.Role = Role(role)
	return out, db.NotFound(err, ErrNotFound)
}

// deleteSession ends one session of the Company.
func (s *Store) deleteSession(ctx context.Context, companyID int64, hash []byte) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1 AND company_id = $2`, hash, companyID)
	return err
}
