package accounts_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// clock is a settable time source for a Store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// throttleEnv is a database with a Store on a fake clock and a counter of
// the password verifications the Store did.
type throttleEnv struct {
	t        *testing.T
	pool     *pgxpool.Pool
	store    *accounts.Store
	clock    *clock
	verifies interface{ Load() int64 }
}

func newThrottleEnv(t *testing.T) *throttleEnv {
	pool := testdb.NewPool(t)
	c := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	// Room for every attempt these tests make at once: they are about
	// counting, and limit_test.go about shedding.
	store := accounts.NewStore(pool, accounts.WithClock(c.Now),
		accounts.WithLimits(accounts.Limits{Hashes: 2, Queue: 32, PerCompany: 34, MaxWait: time.Minute}))
	return &throttleEnv{t: t, pool: pool, store: store, clock: c, verifies: accounts.CountVerifies(store)}
}

func (e *throttleEnv) company(slug string) int64 {
	var id int64
	require.NoError(e.t, e.pool.QueryRow(context.Background(),
		`INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id`, slug).Scan(&id))
	return id
}

func (e *throttleEnv) account(companyID int64, username, password string) accounts.Account {
	a, err := e.store.Create(context.Background(), companyID, username, password)
	require.NoError(e.t, err)
	return a
}

// fail makes a wrong attempt that is counted.
func (e *throttleEnv) fail(companyID int64, username string) {
	e.t.Helper()
	before := e.verifies.Load()
	_, err := e.store.Authenticate(context.Background(), companyID, username, "wrong password")
	require.ErrorIs(e.t, err, accounts.ErrNotFound)
	require.NotErrorIs(e.t, err, accounts.ErrThrottled)
	require.Equal(e.t, before+1, e.verifies.Load(), "a counted attempt hashes once")
}

// throttled makes an attempt with password and requires it be refused for
// retryAfter without any hashing.
func (e *throttleEnv) throttled(companyID int64, username, password string, retryAfter time.Duration) {
	e.t.Helper()
	before := e.verifies.Load()
	acct, err := e.store.Authenticate(context.Background(), companyID, username, password)
	require.ErrorIs(e.t, err, accounts.ErrThrottled)
	require.NotErrorIs(e.t, err, accounts.ErrNotFound)
	var te *accounts.ThrottledError
	require.ErrorAs(e.t, err, &te)
	require.Equal(e.t, retryAfter, te.RetryAfter)
	require.Zero(e.t, acct)
	require.Equal(e.t, before, e.verifies.Load(), "a throttled attempt does no hashing")
}

func (e *throttleEnv) succeed(companyID int64, username, password string) {
	e.t.Helper()
	acct, err := e.store.Authenticate(context.Background(), companyID, username, password)
	require.NoError(e.t, err)
	require.Equal(e.t, username, acct.Username)
}

// row returns the stored failures and lock of a username, ok false if none.
func (e *throttleEnv) row(companyID int64, username string) (failures int, lockedUntil time.Time, ok bool) {
	e.t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT failures, locked_until FROM login_failures
		WHERE company_id = $1 AND username = $2`, companyID, username).Scan(&failures, &lockedUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, false
	}
	require.NoError(e.t, err)
	return failures, lockedUntil, true
}

func (e *throttleEnv) requireRow(companyID int64, username string, failures int, lockedFor time.Duration) {
	e.t.Helper()
	n, until, ok := e.row(companyID, username)
	require.True(e.t, ok, "a row for %q", username)
	require.Equal(e.t, failures, n, "failures of %q", username)
	require.True(e.t, e.clock.Now().Add(lockedFor).Equal(until), "%q locked until %v, want now+%v", username, until, lockedFor)
}

func TestThrottleLocksAfterFourFailures(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	co := e.company("alpha")
	e.account(co, "alice", "alice password")

	for i := 1; i <= 4; i++ {
		e.fail(co, "alice")
		e.requireRow(co, "alice", i, 0)
	}
	// The fifth failure locks for a second.
	e.fail(co, "alice")
	e.requireRow(co, "alice", 5, time.Second)

	// During the lock even the right password is refused, unchecked, and
	// the refusal is not counted.
	e.throttled(co, "alice", "alice password", time.Second)
	e.throttled(co, "alice", "wrong password", time.Second)
	e.clock.Advance(999 * time.Millisecond)
	e.throttled(co, "alice", "alice password", time.Millisecond)
	e.requireRow(co, "alice", 5, time.Millisecond)

	// When it ends, the right password signs in and clears the count.
	e.clock.Advance(time.Millisecond)
	verifies := e.verifies.Load()
	e.succeed(co, "alice", "alice password")
	require.Equal(t, verifies+1, e.verifies.Load())
	_, _, ok := e.row(co, "alice")
	require.False(t, ok, "success deletes the row")

	// Counting starts over: four free failures again.
	for i := 1; i <= 4; i++ {
		e.fail(co, "alice")
	}
	e.requireRow(co, "alice", 4, 0)
	e.succeed(co, "alice", "alice password")
	_, _, ok = e.row(co, "alice")
	require.False(t, ok)
}

func TestThrottleBackoffDoublesAndCaps(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	co := e.company("alpha")
	e.account(co, "alice", "alice password")

	want := []time.Duration{
		0, 0, 0, 0, // 1–4
		1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, // 5–9
		32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 512 * time.Second, // 10–14
		15 * time.Minute, 15 * time.Minute, 15 * time.Minute, 15 * time.Minute, // 15– (1024 s capped)
	}
	for i, lock := range want {
		n := i + 1
		e.fail(co, "alice")
		e.requireRow(co, "alice", n, lock)
		if lock > 0 {
			e.throttled(co, "alice", "alice password", lock)
			e.clock.Advance(lock - time.Microsecond)
			e.throttled(co, "alice", "alice password", time.Microsecond)
			e.clock.Advance(time.Microsecond)
		}
	}
	require.Equal(t, accounts.MaxLock, want[len(want)-1])

	// A count far past the cap stays capped (no overflow in the backoff).
	_, err := e.pool.Exec(context.Background(), `UPDATE login_failures SET failures = 1000000`)
	require.NoError(t, err)
	e.fail(co, "alice")
	e.requireRow(co, "alice", 1000001, accounts.MaxLock)
	e.clock.Advance(accounts.MaxLock)
	e.succeed(co, "alice", "alice password")
}

func TestThrottleCountRestartsAfterADay(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	co := e.company("alpha")
	e.account(co, "alice", "alice password")

	for range 5 {
		e.fail(co, "alice")
	}
	e.requireRow(co, "alice", 5, time.Second)
	// Just under a day after the last failure, the count goes on.
	e.clock.Advance(accounts.FailureWindow - time.Microsecond)
	e.fail(co, "alice")
	e.requireRow(co, "alice", 6, 2*time.Second)
	// A full day without failures: the next one is the first again.
	e.clock.Advance(accounts.FailureWindow)
	e.fail(co, "alice")
	e.requireRow(co, "alice", 1, 0)

	// Stale rows can be swept; current ones stay.
	e.account(co, "bob", "bob password")
	e.account(co, "carol", "carol password")
	e.fail(co, "bob")
	e.clock.Advance(accounts.FailureWindow - time.Second)
	e.fail(co, "carol")
	e.clock.Advance(time.Second)
	n, err := e.store.DeleteStaleLoginFailures(context.Background(), e.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	_, _, ok := e.row(co, "alice")
	require.False(t, ok)
	_, _, ok = e.row(co, "bob")
	require.False(t, ok)
	e.requireRow(co, "carol", 1, -time.Second)
}

func TestThrottleIsPerCompanyAndUsername(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	alpha, beta := e.company("alpha"), e.company("beta")
	e.account(alpha, "alice", "alpha password")
	e.account(alpha, "Alice", "capital password")
	e.account(alpha, "bob", "bob password")
	e.account(beta, "alice", "beta password")

	for range 5 {
		e.fail(alpha, "alice")
	}
	e.throttled(alpha, "alice", "alpha password", time.Second)

	// Another username, the same one in another case, and the same one at
	// another Company are all unaffected.
	e.succeed(alpha, "bob", "bob password")
	e.succeed(alpha, "Alice", "capital password")
	e.succeed(beta, "alice", "beta password")
	e.fail(beta, "alice")
	e.requireRow(beta, "alice", 1, 0)
	e.requireRow(alpha, "alice", 5, time.Second)

	// A Company's rows go with it.
	_, err := e.pool.Exec(context.Background(), `DELETE FROM companies WHERE id = $1`, alpha)
	require.NoError(t, err)
	_, _, ok := e.row(alpha, "alice")
	require.False(t, ok)
	// A Company that does not exist has nothing to count or find.
	_, err = e.store.Authenticate(context.Background(), alpha, "alice", "alpha password")
	require.ErrorIs(t, err, accounts.ErrNotFound)
}

func TestThrottleUnknownUsernames(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	co := e.company("alpha")
	e.account(co, "alice", "alice password")

	// A username with no account is counted, hashed and locked exactly
	// like one with an account, so probing answers the same. Its count is
	// kept in its bucket's row, not under its own name.
	bucket := accounts.UnknownKey(e.store, co, "nobody")
	for range 5 {
		e.fail(co, "nobody")
	}
	e.requireRow(co, bucket, 5, time.Second)
	_, _, ok := e.row(co, "nobody")
	require.False(t, ok, "no row under an unknown username")
	e.throttled(co, "nobody", "any password", time.Second)
	e.succeed(co, "alice", "alice password")

	// When nobody's lock ends, the attempt is checked (and fails) again.
	e.clock.Advance(time.Second)
	e.fail(co, "nobody")
	e.requireRow(co, bucket, 6, 2*time.Second)

	// Nor does the dummy hash's own password sign anyone in.
	e.clock.Advance(2 * time.Second)
	_, err := e.store.Authenticate(context.Background(), co, "nobody", "not a real password")
	require.ErrorIs(t, err, accounts.ErrNotFound)
}

// TestThrottleUnknownUsernamesShareRows: made-up usernames, as a flood
// sends them, add no row each; their failures land in at most
// UnknownBuckets rows per Company.
func TestThrottleUnknownUsernamesShareRows(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	co := e.company("alpha")
	e.account(co, "alice", "alice password")

	const n = 10
	for i := range n {
		e.fail(co, fmt.Sprintf("made-up-%d", i))
	}
	e.fail(co, "alice")
	rows, err := e.pool.Query(context.Background(), `SELECT username, failures FROM login_failures WHERE company_id = $1`, co)
	require.NoError(t, err)
	counts, err := pgx.CollectRows(rows, pgx.RowToMap)
	require.NoError(t, err)
	total := 0
	for _, r := range counts {
		name := r["username"].(string)
		if name == "alice" {
			continue
		}
		require.Regexp(t, `^unknown usernames \d{4}$`, name)
		total += int(r["failures"].(int32))
	}
	require.Equal(t, n, total, "every failure is counted")
}

// TestThrottleConcurrentAttempts fires attempts from many goroutines at
// once, as replicas and an attacker's parallel requests would: every
// failure is counted, and no attempt slips past the lock the fifth one
// sets, however they interleave.
func TestThrottleConcurrentAttempts(t *testing.T) {
	t.Parallel()
	e := newThrottleEnv(t)
	co := e.company("alpha")
	e.account(co, "alice", "alice password")

	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = e.store.Authenticate(context.Background(), co, "alice", "wrong password")
		})
	}
	wg.Wait()
	var failed, throttled int
	for _, err := range errs {
		switch {
		case errors.Is(err, accounts.ErrNotFound):
			failed++
		case errors.Is(err, accounts.ErrThrottled):
			throttled++
		default:
			t.Fatalf("unexpected result %v", err)
		}
	}
	require.Equal(t, accounts.FreeFailures+1, failed, "exactly the free failures and the one that locks are checked")
	require.Equal(t, n-failed, throttled)
	require.EqualValues(t, failed, e.verifies.Load())
	e.requireRow(co, "alice", failed, time.Second)
}
