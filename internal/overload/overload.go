// Package overload sheds a replica's new requests while the replica is
// overloaded, so that past its capacity it answers some requests at once
// with 503 and serves the rest in time, instead of queueing every request
// until memory and latency run out.
//
// Overloaded means that work waits too long for what every request
// needs: goroutines for a CPU (the Go scheduler's latency, runtime/metrics
// /sched/latencies:seconds), or requests for a database connection (the
// pool's acquire time), both read every quarter second. Requests in
// flight are not the signal: a request waiting for a slow origin, a
// long-poll or a parked event stream uses neither, and counting them
// would let one Company's slow origin shed every other Company's
// requests.
package overload

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Options configure a Shedder.
type Options struct {
	// Delay is the wait above which the replica is overloaded: the
	// scheduling latency's 90th percentile over one sample, or the mean
	// time an acquire of a database connection took; 0 never sheds.
	Delay time.Duration
	// Pool reads the database pool's counters; nil leaves the pool out.
	Pool func() PoolStats
	// Every is how often the latency is sampled [250 ms].
	Every time.Duration
	// Registerer takes the Shedder's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger says when shedding starts and ends [slog.Default()].
	Logger *slog.Logger
}

// PoolStats are a database pool's counters since it opened
// (pgxpool.Stat's AcquireCount, AcquireDuration and NewConnsCount).
type PoolStats struct {
	// Acquires is how many connections were acquired, Took how long
	// those acquires took in all.
	Acquires int64
	Took     time.Duration
	// NewConns is how many connections the pool made: an acquire that
	// waited for one being made waited for PostgreSQL's handshake, not
	// for other requests.
	NewConns int64
}

// minAcquires is the fewest acquires a sample must have for their mean
// to say anything: a quiet replica's few acquires say little.
const minAcquires = 20

// The controller: shedding starts after overSamples samples in a row over
// Delay, and the share of new requests shed then rises by raise a sample
// while the replica stays overloaded and falls by lower a sample once it
// is not, never above maxShare: a few requests are always served.
const (
	overSamples = 2
	raise       = 0.1
	lower       = 0.05
	maxShare    = 0.95
	quantile    = 0.9
)

// retryAfter is the Retry-After of a shed request, in seconds.
const retryAfter = "1"

// latencies is the runtime metric read: how long goroutines waited,
// runnable, for a CPU.
const latencies = "/sched/latencies:seconds"

// Shedder decides which new requests a replica sheds.
type Shedder struct {
	opts  Options
	share atomic.Uint64 // math.Float64bits of the share of new requests shed

	// What the last step read; only step, on Start's goroutine, uses them.
	sample []metrics.Sample
	prev   *metrics.Float64Histogram
	pool   PoolStats
	over   int

	shed     prometheus.Counter
	latencyG prometheus.Gauge
	acquireG prometheus.Gauge
	// read returns the latencies counted since the process began
	// (readRuntime; tests give their own).
	read func() *metrics.Float64Histogram
}

// New returns a Shedder; it sheds nothing until Start runs.
func New(opts Options) *Shedder {
	if opts.Every <= 0 {
		opts.Every = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Shedder{
		opts:   opts,
		sample: []metrics.Sample{{Name: latencies}},
		shed: prometheus.NewCounter(prometheus.CounterOpts{Name: "poppyhost_requests_shed_total",
			Help: "Requests answered 503 at once because the replica was overloaded."}),
		latencyG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "poppyhost_scheduling_latency_p90_seconds",
			Help: "90th percentile of the Go scheduler's latency over the last sample, an overload signal."}),
		acquireG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "poppyhost_db_acquire_mean_seconds",
			Help: "Mean time an acquire of a database connection took over the last sample, an overload signal."}),
	}
	s.read = s.readRuntime
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.shed, s.latencyG, s.acquireG,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "poppyhost_shed_share",
				Help: "Share of new requests the replica sheds, from 0 to 0.95."}, s.Share))
	}
	return s
}

// Start samples the scheduler's latency and the pool's acquires until ctx
// ends or stop is called; call it once. With Delay 0 it does nothing.
func (s *Shedder) Start(ctx context.Context) (stop func()) {
	if s.opts.Delay <= 0 {
		return func() {}
	}
	s.opts.Logger.Info("overload: new requests are shed while work waits longer than the delay",
		slog.Duration("delay", s.opts.Delay))
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.opts.Every)
		defer t.Stop()
		s.step()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.step()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Share is the share of new requests shed now, from 0 to 0.95.
func (s *Shedder) Share() float64 { return math.Float64frombits(s.share.Load()) }

// Middleware answers a request it sheds with 503 unavailable and
// Retry-After before next runs, so a shed request has no effect.
func (s *Shedder) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if share := s.Share(); share > 0 && rand.Float64() < share {
			// Not logged each: shedding's start and end are, and its
			// count is a metric.
			s.shed.Inc()
			httpx.WriteUnavailable(w, r, retryAfter,
				"the server is overloaded; send the request again after Retry-After seconds")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readRuntime reads the scheduler's latency histogram since the process
// began, into the sample's own memory (reused, so copied before keeping).
func (s *Shedder) readRuntime() *metrics.Float64Histogram {
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	h := s.sample[0].Value.Float64Histogram()
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
}

// step reads the latency since the last step and moves the share.
func (s *Shedder) step() {
	cur := s.read()
	if cur == nil {
		return
	}
	prev := s.prev
	s.prev = cur
	var acquire time.Duration
	if s.opts.Pool != nil {
		now := s.opts.Pool()
		// Only a sample with enough acquires, none of which waited for a
		// connection being made.
		if n := now.Acquires - s.pool.Acquires; prev != nil && n >= minAcquires && now.NewConns == s.pool.NewConns {
			acquire = (now.Took - s.pool.Took) / time.Duration(n)
		}
		s.pool = now
	}
	if prev == nil || len(prev.Counts) != len(cur.Counts) {
		return
	}
	p := percentile(prev, cur, quantile)
	s.latencyG.Set(p.Seconds())
	s.acquireG.Set(acquire.Seconds())
	share := s.Share()
	was := share
	if p > s.opts.Delay || acquire > s.opts.Delay {
		s.over++
		if s.over >= overSamples {
			share = min(maxShare, share+raise)
		}
	} else {
		s.over = 0
		share = max(0, share-lower)
		if share < lower/2 {
			share = 0
		}
	}
	s.share.Store(math.Float64bits(share))
	switch {
	case was == 0 && share > 0:
		s.opts.Logger.Warn("overloaded: shedding new requests", slog.Duration("scheduling_latency_p90", p),
			slog.Duration("db_acquire_mean", acquire), slog.Duration("over", s.opts.Delay), slog.Float64("share", share))
	case was > 0 && share == 0:
		s.opts.Logger.Info("no longer overloaded: serving every request", slog.Duration("scheduling_latency_p90", p),
			slog.Duration("db_acquire_mean", acquire))
	}
}

// percentile is the q-quantile of the latencies counted between prev and
// cur: the lower bound of the bucket it falls in, so that it never says
// more than was seen. No latency counted is 0.
func percentile(prev, cur *metrics.Float64Histogram, q float64) time.Duration {
	var total uint64
	for i := range cur.Counts {
		total += cur.Counts[i] - prev.Counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range cur.Counts {
		seen += cur.Counts[i] - prev.Counts[i]
		if seen >= rank {
			lo := cur.Buckets[i]
			if math.IsInf(lo, -1) || lo < 0 {
				return 0
			}
			return time.Duration(lo * float64(time.Second))
		}
	}
	return 0
}
