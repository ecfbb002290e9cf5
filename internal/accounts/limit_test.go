package accounts_test

import (
	"context"
	"crypto/rand"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestAuthenticateFloodIsBounded: goroutines hammer one Company with wrong
// passwords for made-up usernames, as an attacker avoiding the per-username
// lock does. The real Argon2id runs. Never more than Limits.Hashes hashes
// run at once, the excess is shed with ErrBusy, another Company's account
// still signs in, and the process's memory grows by about the hashes'
// 64 MiB each, not by one per attempt.
//
// Not parallel: it reads the process's memory.
func TestAuthenticateFloodIsBounded(t *testing.T) {
	pool := testdb.NewPool(t)
	const hashes = 2
	store := accounts.NewStore(pool, accounts.WithLimits(accounts.Limits{
		Hashes: hashes, Queue: 2, PerCompany: 3,
		// Generous, so that the other Company's attempt is never shed for
		// waiting on a slow machine; the flood is shed by the share.
		MaxWait: 20 * time.Second,
	}))
	conc := accounts.TrackConcurrency(store)
	ctx := context.Background()
	var alpha, beta int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('alpha', '{}') RETURNING id`).Scan(&alpha))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('beta', '{}') RETURNING id`).Scan(&beta))
	_, err := store.Create(ctx, beta, "bob", "bob password")
	require.NoError(t, err)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	const attackers = 12
	var (
		stop             = make(chan struct{})
		wg               sync.WaitGroup
		failed, shed     atomic.Int64
		unexpected       = make(chan error, attackers)
		badRetry         atomic.Bool
		attemptsFinished atomic.Int64
	)
	for range attackers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := store.Authenticate(ctx, alpha, rand.Text(), "wrong password")
				attemptsFinished.Add(1)
				var be *accounts.BusyError
				switch {
				case errors.As(err, &be):
					shed.Add(1)
					if be.RetryAfter <= 0 {
						badRetry.Store(true)
					}
				case errors.Is(err, accounts.ErrNotFound):
					failed.Add(1)
				default:
					unexpected <- err
					return
				}
			}
		})
	}
	// Let the flood build: every attacker has had an answer.
	require.Eventually(t, func() bool { return failed.Load()+shed.Load() >= attackers },
		30*time.Second, 5*time.Millisecond)

	// Meanwhile, beta's User signs in. The bound is generous for a loaded
	// 2-core machine: beta waits behind at most alpha's share (3 hashes of
	// a fraction of a second each).
	start := time.Now()
	acct, err := store.Authenticate(ctx, beta, "bob", "bob password")
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, "bob", acct.Username)
	require.Less(t, took, 15*time.Second)

	close(stop)
	wg.Wait()
	close(unexpected)
	for err := range unexpected {
		t.Fatalf("unexpected result %v", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d attempts: %d checked, %d shed; beta signed in in %v; peak %d hashes at once; Sys grew %d MiB",
		attemptsFinished.Load(), failed.Load(), shed.Load(), took, conc.Peak(), (after.Sys-before.Sys)>>20)

	require.LessOrEqual(t, conc.Peak(), int64(hashes), "hashes at once")
	require.Positive(t, shed.Load(), "the excess is shed")
	require.False(t, badRetry.Load(), "a shed attempt says when to retry")
	// Sys only grows, so it shows the peak. Each running hash holds 64 MiB;
	// the collector lets the heap reach twice what is live, so allow three
	// times that, and 64 MiB for the rest of the test. Unbounded, the
	// attackers' hashes alone would hold 12 × 64 MiB.
	require.Less(t, after.Sys-before.Sys, uint64(3*hashes*64+64)<<20, "memory grew")

	// A shed attempt left no trace: only checked ones were counted.
	var counted int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(failures), 0) FROM login_failures WHERE company_id = $1`,
		alpha).Scan(&counted))
	require.Equal(t, failed.Load(), counted)
}
