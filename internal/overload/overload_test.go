package overload

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// fakeLatency feeds step a histogram that grows by n latencies of d each
// time it is read.
type fakeLatency struct {
	h metrics.Float64Histogram
}

func newFakeLatency() *fakeLatency {
	// Buckets as the runtime's: from 0, then powers of two of a
	// nanosecond up to about 17 s, then +Inf.
	b := []float64{0}
	for x := 1e-9; x < 20; x *= 2 {
		b = append(b, x)
	}
	b = append(b, math.Inf(1))
	return &fakeLatency{h: metrics.Float64Histogram{Buckets: b, Counts: make([]uint64, len(b)-1)}}
}

func (f *fakeLatency) add(n uint64, d time.Duration) {
	for i := len(f.h.Buckets) - 2; i >= 0; i-- {
		if d.Seconds() >= f.h.Buckets[i] {
			f.h.Counts[i] += n
			return
		}
	}
}

func (f *fakeLatency) read() *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Buckets: f.h.Buckets, Counts: append([]uint64(nil), f.h.Counts...)}
}

func TestShareFollowsTheSchedulersLatency(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	s := New(Options{Delay: 10 * time.Millisecond, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	f := newFakeLatency()
	s.read = f.read
	step := func(fast, slow uint64) float64 {
		f.add(fast, 50*time.Microsecond)
		f.add(slow, 40*time.Millisecond)
		s.step()
		return s.Share()
	}

	require.Zero(t, step(1000, 0), "the first read only sets the start")
	require.Zero(t, step(1000, 50), "5 % slow: the p90 is fast")
	require.Zero(t, step(0, 0), "nothing scheduled: not overloaded")
	require.Zero(t, step(100, 100), "one sample over is not overload yet")
	require.Equal(t, 1, s.over)
	require.Zero(t, step(1000, 50), "a fast sample starts the count again")
	require.Zero(t, step(100, 100))
	require.InDelta(t, 0.1, step(100, 100), 1e-9, "two samples over in a row")
	require.Contains(t, logs.String(), "overloaded: shedding new requests")
	require.InDelta(t, 0.04, testutil.ToFloat64(s.latencyG), 0.01, "the p90 seen: the slow latencies' bucket")
	for range 20 {
		step(0, 10)
	}
	require.Equal(t, maxShare, s.Share(), "never more than the cap")
	require.Equal(t, maxShare, gauge(t, reg, "poppyhost_shed_share"), "the gauge is the share")
	require.InDelta(t, maxShare-lower, step(1000, 0), 1e-9, "falls by less than it rose")
	for range 18 {
		step(1000, 0)
	}
	require.Zero(t, s.Share(), "back to nothing once the latency stays low")
	require.Zero(t, gauge(t, reg, "poppyhost_shed_share"))
	require.Contains(t, logs.String(), "no longer overloaded")
}

func TestPercentile(t *testing.T) {
	f := newFakeLatency()
	prev := f.read()
	require.Zero(t, percentile(prev, f.read(), 0.9))
	f.add(9, time.Microsecond)
	f.add(1, time.Second)
	require.Less(t, percentile(prev, f.read(), 0.9), 2*time.Microsecond)
	require.GreaterOrEqual(t, percentile(prev, f.read(), 0.9), 512*time.Nanosecond)
	f.add(1, time.Second)
	got := percentile(prev, f.read(), 0.9)
	require.Greater(t, got, 500*time.Millisecond, "two of eleven slow: the p90 is slow")
	require.LessOrEqual(t, got, time.Second, "never more than was seen")
}

func TestMiddlewareShedsBeforeTheHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(Options{Delay: time.Millisecond, Registerer: reg})
	var ran atomic.Int32
	h := s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "https://shop.example/api/x", bytes.NewBufferString("{}")))
		return w
	}

	require.Equal(t, http.StatusNoContent, serve().Code, "nothing shed while not overloaded")
	require.EqualValues(t, 1, ran.Load())

	s.share.Store(math.Float64bits(1))
	w := serve()
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	var body struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), "%s", w.Body)
	require.Equal(t, "unavailable", body.Error)
	require.EqualValues(t, 1, ran.Load(), "a shed request never reaches the handler")
	require.Equal(t, 1.0, testutil.ToFloat64(s.shed))

	s.share.Store(math.Float64bits(0.5))
	for range 200 {
		serve()
	}
	served := ran.Load() - 1
	require.Greater(t, served, int32(40), "about half served")
	require.Less(t, served, int32(160), "about half shed")
}

// TestShedsWhileGoroutinesWaitForACPU loads the runtime for real: with
// one P and goroutines that never block, each waits for the others'
// time slices, and the Shedder must start shedding; once they stop, it
// must stop.
func TestShedsWhileGoroutinesWaitForACPU(t *testing.T) {
	s := New(Options{Delay: 20 * time.Millisecond, Every: 50 * time.Millisecond})
	stop := s.Start(context.Background())
	defer stop()

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var quit atomic.Bool
	for range 8 {
		go func() {
			for !quit.Load() {
			}
		}()
	}
	t.Cleanup(func() { quit.Store(true) })
	require.Eventually(t, func() bool { return s.Share() > 0 }, 20*time.Second, 10*time.Millisecond,
		"eight busy goroutines on one P: each waits about 70 ms for its turn")
	quit.Store(true)
	require.Eventually(t, func() bool { return s.Share() == 0 }, 30*time.Second, 10*time.Millisecond,
		"idle again: the share falls back to nothing")
}

func TestZeroDelayNeverSheds(t *testing.T) {
	s := New(Options{})
	stop := s.Start(context.Background())
	stop()
	require.Nil(t, s.prev, "no sampling at all")
	require.Zero(t, s.Share())
}

func TestShedsWhileRequestsWaitForTheDatabase(t *testing.T) {
	reg := prometheus.NewRegistry()
	var pool PoolStats
	s := New(Options{Delay: 10 * time.Millisecond, Registerer: reg, Pool: func() PoolStats { return pool }})
	f := newFakeLatency()
	s.read = f.read
	step := func(acquires int64, each time.Duration) float64 {
		f.add(1000, 50*time.Microsecond) // the CPU keeps up throughout
		pool.Acquires += acquires
		pool.Took += time.Duration(acquires) * each
		s.step()
		return s.Share()
	}

	require.Zero(t, step(100, time.Hour), "the first read only sets the start")
	require.Zero(t, step(500, 20*time.Microsecond), "connections at hand")
	require.Zero(t, step(0, 0), "no acquire: nothing waited")
	require.Zero(t, step(50, 40*time.Millisecond))
	require.Zero(t, step(19, time.Second), "too few acquires to say anything: the count starts again")
	require.Zero(t, step(50, 40*time.Millisecond))
	pool.NewConns++
	require.Zero(t, step(50, 40*time.Millisecond), "a connection was made: its acquire waited for PostgreSQL, not for others")
	require.Zero(t, step(50, 40*time.Millisecond))
	require.InDelta(t, 0.1, step(50, 40*time.Millisecond), 1e-9, "two samples of acquires waiting 40 ms on average")
	require.InDelta(t, 0.04, testutil.ToFloat64(s.acquireG), 1e-9)
	require.InDelta(t, 0.05, step(500, 20*time.Microsecond), 1e-9, "connections at hand again")
}

// gauge reads the gauge name from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
