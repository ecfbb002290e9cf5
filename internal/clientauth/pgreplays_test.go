package clientauth_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

const (
	pgAgent  = "https://agent.test/agent.json"
	pgAgent2 = "https://other-agent.test/agent.json"
	pgOther  = "https://poppyhost.test/t/globex"
)

// jtis lists the jti column of client_assertion_jtis, sorted.
func jtis(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT jti FROM client_assertion_jtis ORDER BY jti`)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestPGReplaysUse checks that a jti is fresh once per issuer and client.
func TestPGReplaysUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := clientauth.NewPGReplays(testdb.NewPool(t))
	exp := time.Now().Add(time.Minute)

	use := func(issuer, clientID, jti string) bool {
		t.Helper()
		fresh, err := store.Use(ctx, issuer, clientID, jti, exp)
		require.NoError(t, err)
		return fresh
	}
	require.True(t, use(testIssuer, pgAgent, "j1"), "fresh jti")
	require.False(t, use(testIssuer, pgAgent, "j1"), "same jti again")
	require.False(t, use(testIssuer, pgAgent, "j1"), "and again")
	require.True(t, use(testIssuer, pgAgent2, "j1"), "same jti, other client")
	require.True(t, use(pgOther, pgAgent, "j1"), "same jti, other issuer")
	require.True(t, use(testIssuer, pgAgent, "j2"), "other jti")
	require.False(t, use(pgOther, pgAgent, "j1"))
	require.False(t, use(testIssuer, pgAgent2, "j1"))

	// A cancelled context is an error, never a fresh jti.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	fresh, err := store.Use(cctx, testIssuer, pgAgent, "j3", exp)
	require.Error(t, err)
	require.False(t, fresh)
}

// TestPGReplaysConcurrent races the same jti from several goroutines, as
// replicas would: exactly one wins.
func TestPGReplaysConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := clientauth.NewPGReplays(testdb.NewPool(t))
	exp := time.Now().Add(time.Minute)
	const n = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		fresh [n]bool
		errs  [n]error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fresh[i], errs[i] = store.Use(ctx, testIssuer, pgAgent, "raced", exp)
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for i := range n {
		require.NoError(t, errs[i])
		if fresh[i] {
			wins++
		}
	}
	require.Equal(t, 1, wins)
}

// TestPGReplaysSweep checks that the sweep forgets only jtis past their
// exp, called directly and through River.
func TestPGReplaysSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	store := clientauth.NewPGReplays(pool)
	now := time.Now()

	use := func(jti string, exp time.Duration) {
		t.Helper()
		fresh, err := store.Use(ctx, testIssuer, pgAgent, jti, now.Add(exp))
		require.NoError(t, err)
		require.True(t, fresh)
	}
	use("expired-1", -time.Second)
	use("expired-2", -time.Hour)
	use("live-1", time.Minute)
	use("live-2", time.Hour)
	n, err := store.Sweep(ctx, now)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{"live-1", "live-2"}, jtis(t, pool))

	// A swept jti is fresh again; a live one is still refused.
	fresh, err := store.Use(ctx, testIssuer, pgAgent, "expired-1", now.Add(-time.Second))
	require.NoError(t, err)
	require.True(t, fresh)
	fresh, err = store.Use(ctx, testIssuer, pgAgent, "live-1", now.Add(time.Minute))
	require.NoError(t, err)
	require.False(t, fresh)

	// Through River, as the platform runs it, with the jobs' clock two
	// minutes ahead: live-1 is past its exp too.
	sweeps := clientauth.Sweeps(store)
	testdb.RunSweeps(t, pool, func() time.Time { return now.Add(2 * time.Minute) }, sweeps...)
	require.Equal(t, []string{"live-2"}, jtis(t, pool))

	// One sweep a minute, under the kind queued rows carry.
	require.Len(t, sweeps, 1)
	require.Equal(t, "clientauth_sweep_jtis", sweeps[0].Name)
	require.Equal(t, time.Minute, sweeps[0].Every)
}

// TestVerifyPGReplays runs Verify on PGReplays: an assertion passes once,
// its replay is an invalid_client refusal, not a server_error.
func TestVerifyPGReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := testdb.NewPool(t)
	v := clientauth.NewVerifier(b.resolver, clientauth.Options{
		Now:     func() time.Time { return testNow },
		Replays: clientauth.NewPGReplays(pool),
	})
	a := b.assertion(t, spec{})
	client, err := v.Verify(ctx, testIssuer, form(a))
	require.NoError(t, err)
	require.Equal(t, b.agent.ClientID, client.ClientID)
	_, err = v.Verify(ctx, testIssuer, form(a))
	requireRefused(t, err, "jti already used")
	require.Len(t, jtis(t, pool), 1)
}

// TestPGReplaysDeferred: in a context from Defer the first jti accepted is
// kept, not recorded, until the caller records it in a batch of its own
// (Queue) or alone (Record), once; a jti used before then fails with
// invalid_client, and a batch that queued it runs nothing after it.
func TestPGReplaysDeferred(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	store := clientauth.NewPGReplays(pool)
	exp := time.Now().Add(time.Minute)
	replayed := func(t *testing.T, err error) {
		t.Helper()
		var ce *clientauth.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, clientauth.CodeInvalidClient, ce.Code)
	}

	t.Run("record", func(t *testing.T) {
		ctx, d := clientauth.Defer(context.Background())
		require.Same(t, d, clientauth.DeferredFrom(ctx))
		fresh, err := store.Use(ctx, testIssuer, pgAgent, "kept", exp)
		require.NoError(t, err)
		require.True(t, fresh)
		fresh, err = store.Use(ctx, testIssuer, pgAgent, "second", exp)
		require.NoError(t, err)
		require.True(t, fresh, "only the first jti is kept")
		require.Equal(t, []string{"second"}, jtis(t, pool))
		require.NoError(t, d.Record(ctx))
		require.NoError(t, d.Record(ctx), "recorded once")
		require.Equal(t, []string{"kept", "second"}, jtis(t, pool))

		ctx, d = clientauth.Defer(context.Background())
		_, err = store.Use(ctx, testIssuer, pgAgent, "kept", exp)
		require.NoError(t, err)
		replayed(t, d.Record(ctx))
	})

	t.Run("queue", func(t *testing.T) {
		ctx, d := clientauth.Defer(context.Background())
		_, err := store.Use(ctx, testIssuer, pgAgent2, "batched", exp)
		require.NoError(t, err)
		var after string
		b := &pgx.Batch{}
		require.True(t, d.Queue(b))
		require.False(t, d.Queue(&pgx.Batch{}), "queued once")
		b.Queue(`SELECT jti FROM client_assertion_jtis WHERE client_id = $1`, pgAgent2).QueryRow(func(row pgx.Row) error {
			return row.Scan(&after)
		})
		require.NoError(t, pool.SendBatch(ctx, b).Close())
		require.Equal(t, "batched", after, "what the batch runs next sees the jti")
		require.NoError(t, d.Record(ctx), "sent already")

		ctx, d = clientauth.Defer(context.Background())
		_, err = store.Use(ctx, testIssuer, pgAgent2, "batched", exp)
		require.NoError(t, err)
		b = &pgx.Batch{}
		require.True(t, d.Queue(b))
		ran := false
		b.Queue(`SELECT 1`).Exec(func(pgconn.CommandTag) error { ran = true; return nil })
		replayed(t, pool.SendBatch(ctx, b).Close())
		require.False(t, ran)
	})

	t.Run("nothing kept", func(t *testing.T) {
		ctx, d := clientauth.Defer(context.Background())
		require.False(t, d.Queue(&pgx.Batch{}))
		require.NoError(t, d.Record(ctx))
		var none *clientauth.Deferred
		require.False(t, none.Queue(&pgx.Batch{}))
		require.NoError(t, none.Record(ctx))
		require.Nil(t, clientauth.DeferredFrom(context.Background()))
	})
}
