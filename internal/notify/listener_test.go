package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// receive waits for a value on ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestListener: notifications committed on the pool reach the handler of
// their channel in order, and none of a rolled-back transaction; when the
// connection is killed, the Listener reports it is not listening, then
// reconnects, tells OnConnect, and delivers again.
func TestListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	l := notify.New(pool, nil)
	got := make(chan string, 16)
	other := make(chan string, 16)
	connects := make(chan struct{}, 16)
	l.Handle("test_a", func(p string) { got <- p })
	l.Handle("test_b", func(p string) { other <- p })
	l.OnConnect(func() { connects <- struct{}{} })
	require.False(t, l.Connected())
	stop := l.Start(ctx)
	defer stop()
	receive(t, connects, "first connection")
	require.Eventually(t, l.Connected, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, notify.Send(ctx, pool, "test_a", "one"))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, notify.Send(ctx, tx, "test_a", "rolled back"))
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, notify.Send(ctx, pool, "test_b", "b"))
	require.NoError(t, notify.Send(ctx, pool, "test_a", "two"))
	require.Equal(t, "one", receive(t, got, "notification"))
	require.Equal(t, "two", receive(t, got, "notification"))
	require.Equal(t, "b", receive(t, other, "notification on the other channel"))

	// Kill the listening backend: the Listener notices, reconnects and
	// says so.
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`)
	require.NoError(t, err)
	receive(t, connects, "reconnection")
	require.Eventually(t, l.Connected, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, notify.Send(ctx, pool, "test_a", "three"))
	require.Equal(t, "three", receive(t, got, "notification after reconnecting"))
	require.Empty(t, got)
}

// TestRegisterAfterStart: handlers are fixed once the Listener runs.
func TestRegisterAfterStart(t *testing.T) {
	t.Parallel()
	l := notify.New(testdb.NewPool(t), nil)
	stop := l.Start(context.Background())
	defer stop()
	require.Eventually(t, l.Connected, 10*time.Second, 10*time.Millisecond)
	require.Panics(t, func() { l.Handle("late", func(string) {}) })
	require.Panics(t, func() { l.OnConnect(func() {}) })
}
