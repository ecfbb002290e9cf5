package accounts

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/argon2"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Errors at the store boundary.
var (
	ErrNotFound = errors.New("account not found")
	ErrTaken    = errors.New("username is taken")
	// ErrThrottled is matched (errors.Is) by every *ThrottledError.
	ErrThrottled = errors.New("too many failed sign-in attempts")
)

// ThrottledError is Authenticate's answer while a username is locked after
// too many failures. The password was not checked.
type ThrottledError struct {
	// RetryAfter is how long until the lock ends (a Retry-After header
	// should round it up to whole seconds).
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%v: retry after %v", ErrThrottled, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// Login throttling parameters.
const (
	// FreeFailures is how many failures in a row lock nothing.
	FreeFailures = 4
	// MaxLock caps the backoff: failure FreeFailures+1 locks for one
	// second, each further one for twice as long, up to MaxLock.
	MaxLock = 15 * time.Minute
	// FailureWindow is how long without a failure restarts the count.
	FailureWindow = 24 * time.Hour
	// UnknownBuckets is how many login_failures rows at most a Company's
	// unknown usernames share.
	UnknownBuckets = 1024
)

// Account is one user of a Company.
type Account struct {
	ID        int64     `json:"id"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"created_at"`
}

// Store keeps accounts and their sign-in failures in PostgreSQL, always
// filtered by Company.
type Store struct {
	pool    *pgxpool.Pool
	now     func() time.Time
	verify  func(encoded, password string) bool
	secret  func(ctx context.Context, companyID int64) ([]byte, error)
	limits  Limits
	reg     prometheus.Registerer
	gate    *gate
	signIns *signIns
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the Store read the time from now instead of time.Now,
// for tests. Locks are stored as instants, so replicas' clocks should agree
// (as NTP keeps them); the database's own clock is not used.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithLimits bounds the Store's password hashing (zero fields: defaults).
func WithLimits(l Limits) Option { return func(s *Store) { s.limits = l } }

// WithMetrics registers the hashing metrics on reg.
func WithMetrics(reg prometheus.Registerer) Option { return func(s *Store) { s.reg = reg } }

// WithSecrets gives the Companies' secrets (signing.Keys.Secret), which
// choose the row an unknown username's failures are counted in, the same
// on every replica. Without it a key random to this Store is used, fine
// for one process.
func WithSecrets(secret func(ctx context.Context, companyID int64) ([]byte, error)) Option {
	return func(s *Store) { s.secret = secret }
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, now: time.Now, verify: VerifyPassword}
	for _, o := range opts {
		o(s)
	}
	if s.secret == nil {
		key := make([]byte, 32)
		_, _ = rand.Read(key) // never fails (crypto/rand)
		s.secret = func(context.Context, int64) ([]byte, error) { return key, nil }
	}
	var m *gateMetrics
	if s.reg != nil {
		m = newGateMetrics(s.reg)
	}
	s.gate = newGate(s.limits, m)
	s.signIns = newSignIns(s.reg)
	return s
}

// hash returns HashPassword(password) once its turn at the gate comes.
func (s *Store) hash(ctx context.Context, companyID int64, password string) (string, error) {
	var h string
	err := s.gate.wait(ctx, companyID, func() error {
		s.gate.metrics.hashed()
		h = HashPassword(password)
		return nil
	})
	return h, err
}

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
	// The Company's people read usernames (account lists, conversations).
	return httpx.DisguiseProblem(u)
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
// The hash waits its turn behind the sign-ins being checked (Limits).
func (s *Store) Create(ctx context.Context, companyID int64, username, password string) (Account, error) {
	hash, err := s.hash(ctx, companyID, password)
	if err != nil {
		return Account{}, err
	}
	return s.insert(ctx, companyID, username, hash)
}

// SetPassword replaces the password of a Company's account, or returns
// ErrNotFound. The caller has checked the password. The hash waits its
// turn behind the sign-ins being checked (Limits).
func (s *Store) SetPassword(ctx context.Context, companyID, accountID int64, password string) error {
	hash, err := s.hash(ctx, companyID, password)
	if err != nil {
		return err
	}
	return s.updatePassword(ctx, companyID, accountID, hash)
}

// Authenticate returns the account when username and password match,
// ErrNotFound when they do not, a *ThrottledError (errors.Is ErrThrottled)
// while the username is locked after too many failures, in which case the
// password is not checked at all, and a *BusyError (errors.Is ErrBusy)
// when hashing is at its Limits, in which case nothing is counted. An
// unknown username costs the same work as a wrong password (a dummy hash
// under the same Limits) and is counted and locked the same way, in its
// bucket's row. Success clears the username's failures.
//
// Every attempt is counted as a failure before the password is hashed, in
// the same statement that checks the lock, and the count is removed again
// on success. So concurrent guesses cannot slip past a lock that an earlier
// one is about to set: of any number of attempts at once, at most those
// the schedule allows get hashed.
func (s *Store) Authenticate(ctx context.Context, companyID int64, username, password string) (Account, error) {
	a, err := s.authenticate(ctx, companyID, username, password)
	s.signIns.count(err)
	return a, err
}

// authenticate is Authenticate, uncounted.
func (s *Store) authenticate(ctx context.Context, companyID int64, username, password string) (Account, error) {
	var a Account
	err := s.check(ctx, companyID, username, unknownUsernames, password, func(ctx context.Context) (string, error) {
		var (
			hash string
			err  error
		)
		a, hash, err = s.withHash(ctx, companyID, username)
		return hash, err
	})
	if err != nil {
		return Account{}, err
	}
	return a, nil
}

// AuthenticateOther checks the password of someone other than an account
// who signs in at a Company (the console's staff) exactly as Authenticate
// does, under the same Limits and throttle: failures are counted in
// login_failures under namespace + " " + name, which no username (they
// contain no spaces) can equal, and unknown names share UnknownBuckets
// rows of their own. find returns the encoded hash (HashPassword) of the
// name, or an error that is ErrNotFound when it has none. The answer is
// nil on a match and as Authenticate's otherwise.
func (s *Store) AuthenticateOther(ctx context.Context, companyID int64, namespace, name, password string,
	find func(context.Context) (string, error)) error {
	return s.check(ctx, companyID, namespace+" "+name, "unknown "+namespace, password, find)
}

// Hash returns HashPassword(password) once its turn at the Store's gate
// comes, waiting as SetPassword does, for the passwords of those who sign
// in with AuthenticateOther.
func (s *Store) Hash(ctx context.Context, companyID int64, password string) (string, error) {
	return s.hash(ctx, companyID, password)
}

// unknownUsernames names the buckets of unknown usernames' failures.
const unknownUsernames = "unknown usernames"

// check is Authenticate for the name counted under key, whose encoded
// hash find returns; unknown names are counted in buckets named unknown.
func (s *Store) check(ctx context.Context, companyID int64, key, unknown, password string,
	find func(context.Context) (string, error)) error {
	// Computed for every attempt, so known and unknown names do the same
	// work.
	bucket, err := s.unknownKey(ctx, companyID, unknown, key)
	if err != nil {
		return err
	}
	name, known := key, true
	hash, err := find(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		// The dummy hash's password must not sign anyone in.
		hash, key, known = dummyHash(), bucket, false
	case err != nil:
		return err
	}
	var match bool
	// The gate is taken before counting, so a shed attempt leaves no
	// trace, and held while counting, which is quick next to the hash.
	err = s.gate.do(ctx, companyID, func() error {
		if err := s.admit(ctx, companyID, key); err != nil {
			return err
		}
		s.gate.metrics.hashed()
		match = s.verify(hash, password)
		return nil
	})
	switch {
	case err != nil:
		return err
	case !match || !known:
		return ErrNotFound
	}
	if err := s.clearFailures(ctx, companyID, name); err != nil {
		return fmt.Errorf("clearing sign-in failures: %w", err)
	}
	return nil
}

// unknownKey is the login_failures key that counts failures at name if it
// is unknown: one of UnknownBuckets keys per Company, named unknown and a
// number, chosen by an HMAC under the Company's secret so that nobody can
// pick two unknown names that share a row (which would tell them apart
// from known ones). The keys contain spaces, which no account's username
// can.
func (s *Store) unknownKey(ctx context.Context, companyID int64, unknown, name string) (string, error) {
	secret, err := s.secret(ctx, companyID)
	if err != nil {
		return "", fmt.Errorf("reading the Company secret: %w", err)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("login failures\x00" + name))
	return fmt.Sprintf("%s %04d", unknown, binary.BigEndian.Uint32(m.Sum(nil))%UnknownBuckets), nil
}

// admit counts an attempt at username before its password is checked, or
// returns a *ThrottledError if the username is locked.
func (s *Store) admit(ctx context.Context, companyID int64, username string) error {
	// Microseconds, as PostgreSQL stores them, so RetryAfter is exact.
	now := s.now().Truncate(time.Microsecond)
	for range 3 {
		counted, err := s.count(ctx, companyID, username, now)
		switch {
		case err != nil:
			return fmt.Errorf("counting a sign-in attempt: %w", err)
		case counted:
			return nil
		}
		// Locked: say until when.
		until, err := s.lockedUntil(ctx, companyID, username)
		if err != nil {
			return fmt.Errorf("reading a sign-in lock: %w", err)
		}
		if until.After(now) {
			return &ThrottledError{RetryAfter: until.Sub(now)}
		}
		// A success cleared the row in between: count this attempt again.
	}
	return fmt.Errorf("counting a sign-in attempt: %q at Company %d keeps changing", username, companyID)
}

// Argon2id parameters (RFC 9106 §4, the second recommended option, with
// 64 MiB of memory).
const (
	argonTime    = 3
	argonMemory  = 64 * 1024
	argonThreads = 2
	argonKeyLen  = 32
)

// dummyHash is verified against when the username is unknown: computed
// once, so an unknown username costs one verification, like a known one.
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
