package accounts

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// held starts an attempt for company that holds its place until the
// returned function is called, and returns a channel with its result.
type held struct {
	done    chan error
	running chan struct{}
	finish  chan struct{}
}

func hold(g *gate, ctx context.Context, company int64) *held {
	h := &held{done: make(chan error, 1), running: make(chan struct{}), finish: make(chan struct{})}
	go func() {
		h.done <- g.do(ctx, company, func() error {
			close(h.running)
			<-h.finish
			return nil
		})
	}()
	return h
}

// waitFor waits until the gate's state satisfies ok.
func waitFor(t *testing.T, g *gate, ok func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return ok()
	}, 10*time.Second, time.Millisecond)
}

func requireBusy(t *testing.T, err error) {
	t.Helper()
	var be *BusyError
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, err, ErrBusy)
	require.Positive(t, be.RetryAfter)
}

// TestGateShares: a Company holds at most its share of the places, the
// queue is first come first served and bounded, and a full gate sheds at
// once.
func TestGateShares(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newGateMetrics(reg)
	g := newGate(Limits{Hashes: 2, Queue: 2, PerCompany: 3, MaxWait: time.Hour}, m)
	ctx := context.Background()
	const a, b, c = 1, 2, 3

	a1, a2 := hold(g, ctx, a), hold(g, ctx, a)
	<-a1.running
	<-a2.running
	a3 := hold(g, ctx, a)
	waitFor(t, g, func() bool { return len(g.waiting) == 1 })
	require.Equal(t, 2.0, testutil.ToFloat64(m.inFlight))
	require.Equal(t, 1.0, testutil.ToFloat64(m.waiting))

	// A fourth attempt at a is over its share; b still has a place.
	requireBusy(t, g.do(ctx, a, func() error { t.Fatal("ran past its Company's share"); return nil }))
	b1 := hold(g, ctx, b)
	waitFor(t, g, func() bool { return len(g.waiting) == 2 })
	// Now the queue is full for everyone.
	requireBusy(t, g.do(ctx, c, func() error { t.Fatal("ran past a full queue"); return nil }))
	require.Equal(t, 1.0, testutil.ToFloat64(m.shedTotal.WithLabelValues("company")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.shedTotal.WithLabelValues("queue")))

	// Places are handed over in arrival order.
	close(a1.finish)
	require.NoError(t, <-a1.done)
	<-a3.running
	close(a2.finish)
	require.NoError(t, <-a2.done)
	<-b1.running
	close(a3.finish)
	close(b1.finish)
	require.NoError(t, <-a3.done)
	require.NoError(t, <-b1.done)
	waitFor(t, g, func() bool { return g.running == 0 && len(g.waiting) == 0 && len(g.held) == 0 })
	require.Zero(t, testutil.ToFloat64(m.inFlight))
}

// TestGateWaitsBounded: an attempt waits at most MaxWait, or until its
// request is cancelled, and then leaves the queue.
func TestGateWaitsBounded(t *testing.T) {
	t.Parallel()
	g := newGate(Limits{Hashes: 1, Queue: 4, PerCompany: 5, MaxWait: 50 * time.Millisecond}, nil)
	ctx := context.Background()
	first := hold(g, ctx, 1)
	<-first.running

	requireBusy(t, g.do(ctx, 2, func() error { t.Fatal("ran while the place was held"); return nil }))

	cancelled, cancel := context.WithCancel(ctx)
	waiter := hold(g, cancelled, 2)
	waitFor(t, g, func() bool { return len(g.waiting) == 1 })
	cancel()
	require.ErrorIs(t, <-waiter.done, context.Canceled)

	close(first.finish)
	require.NoError(t, <-first.done)
	waitFor(t, g, func() bool { return g.running == 0 && len(g.waiting) == 0 && len(g.held) == 0 })
	// fn's own error comes back.
	boom := errors.New("boom")
	require.ErrorIs(t, g.do(ctx, 1, func() error { return boom }), boom)
}

// TestGateWaitPatient: setting a password is never shed, whatever the
// queue and the Company's share; it waits its turn and still runs no more
// than Hashes at once.
func TestGateWaitPatient(t *testing.T) {
	t.Parallel()
	g := newGate(Limits{Hashes: 1, Queue: 1, PerCompany: 1, MaxWait: time.Millisecond}, nil)
	ctx := context.Background()
	first := hold(g, ctx, 1)
	<-first.running
	done := make(chan error, 2)
	ran := make(chan int, 2)
	for i := range 2 {
		go func() {
			done <- g.wait(ctx, 1, func() error { ran <- i; return nil })
		}()
	}
	waitFor(t, g, func() bool { return len(g.waiting) == 2 })
	require.Empty(t, ran, "nothing runs while the one place is held")
	close(first.finish)
	require.NoError(t, <-first.done)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	waitFor(t, g, func() bool { return g.running == 0 && len(g.waiting) == 0 && len(g.held) == 0 })
}

func TestLimitsDefaults(t *testing.T) {
	t.Parallel()
	l := Limits{Hashes: 2}.withDefaults()
	require.Equal(t, Limits{Hashes: 2, Queue: 4, PerCompany: 3, MaxWait: 2 * time.Second}, l)
	l = Limits{Hashes: 1, Queue: 1}.withDefaults()
	require.Equal(t, 1, l.PerCompany)
	require.Equal(t, min(runtime.GOMAXPROCS(0), DefaultMaxHashes), Limits{}.withDefaults().Hashes)
}
