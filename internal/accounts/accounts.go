// Package accounts owns a Company's user accounts: the people who sign in
// at its issuer. Passwords are hashed with Argon2id (RFC 9106), a
// memory-hard function, so a leaked table resists guessing.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/argon2"
)

// Errors at the store boundary.
var (
	ErrNotFound = errors.New("account not found")
	ErrTaken    = errors.New("username is taken")
)

// Account is one user of a Company.
type Account struct {
	ID        int64     `json:"id"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"created_at"`
}

// Store keeps accounts in PostgreSQL, always filtered by Company.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Password limits. The upper bound keeps hashing cost bounded.
const (
	MinPassword = 8
	MaxPassword = 256
	MaxUsername = 100
)

// CheckUsername says what is wrong with a username, or "".
func CheckUsername(u string) string {
	switch {
	case u == "":
		return "is required"
	case !utf8.ValidString(u) || utf8.RuneCountInString(u) > MaxUsername:
		return fmt.Sprintf("must be at most %d characters of text", MaxUsername)
	case strings.IndexFunc(u, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return "must not contain spaces or control characters"
	}
	return ""
}

// CheckPassword says what is wrong with a password, or "".
func CheckPassword(p string) string {
	n := utf8.RuneCountInString(p)
	switch {
	case n < MinPassword:
		return fmt.Sprintf("must be at least %d characters", MinPassword)
	case len(p) > MaxPassword:
		return fmt.Sprintf("must be at most %d bytes", MaxPassword)
	}
	return ""
}

// Create adds an account to a Company. The caller has checked the
// username and password.
func (s *Store) Create(ctx context.Context, companyID int64, username, password string) (Account, error) {
	a := Account{Username: username}
	err := s.pool.QueryRow(ctx, `INSERT INTO accounts (company_id, username, password_hash)
		VALUES ($1, $2, $3) RETURNING id, created_at`, companyID, username, HashPassword(password)).
		Scan(&a.ID, &a.CreatedAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return Account{}, ErrTaken
	}
	return a, err
}

// Authenticate returns the account when username and password match. An
// unknown username costs the same hashing work as a wrong password.
func (s *Store) Authenticate(ctx context.Context, companyID int64, username, password string) (Account, error) {
	var (
		a    Account
		hash string
	)
	err := s.pool.QueryRow(ctx, `SELECT id, username, created_at, password_hash FROM accounts
		WHERE company_id = $1 AND username = $2`, companyID, username).Scan(&a.ID, &a.Username, &a.CreatedAt, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		VerifyPassword(dummyHash(), password)
		return Account{}, ErrNotFound
	}
	if err != nil {
		return Account{}, err
	}
	if !VerifyPassword(hash, password) {
		return Account{}, ErrNotFound
	}
	return a, nil
}

// Argon2id parameters (RFC 9106 §4, the second recommended option, with
// 64 MiB of memory).
const (
	argonTime    = 3
	argonMemory  = 64 * 1024
	argonThreads = 2
	argonKeyLen  = 32
)

// dummyHash is verified against when the username is unknown.
var dummyHash = sync.OnceValue(func() string { return HashPassword("not a real password") })

// HashPassword returns an encoded Argon2id hash of password with a random
// salt: $argon2id$v=19$m=...,t=...,p=...$salt$key.
func HashPassword(password string) string {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// VerifyPassword reports whether password matches an encoded hash.
func VerifyPassword(encoded, password string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var (
		m, t uint32
		p    uint8
	)
	if parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil {
		return false
	}
	// Stored parameters are bounded so that a damaged row can neither
	// panic argon2 (zero values) nor make it allocate without limit.
	if m < 8*uint32(p) || m > 1<<20 || t < 1 || t > 16 || p < 1 || p > 16 {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	key, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(key) == 0 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1
}
