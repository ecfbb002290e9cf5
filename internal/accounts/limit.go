package accounts

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrBusy is matched (errors.Is) by every *BusyError.
var ErrBusy = errors.New("too many password checks at once")

// BusyError is the answer when the password hashing of this process is at
// its limit: the attempt was shed before anything was counted or hashed.
type BusyError struct {
	// RetryAfter is a hint for a Retry-After header.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: retry after %v", ErrBusy, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Unwrap() error { return ErrBusy }

// Limits bound the Argon2id hashing of a Store, which costs argonMemory
// (64 MiB) and tens of milliseconds of two cores each. Memory held by
// hashes is at most Hashes × 64 MiB whatever arrives (and the collector
// may let as much again wait as garbage). Zero fields take defaults.
type Limits struct {
	// Hashes is how many hashes run at once in the process. Default:
	// GOMAXPROCS, at most DefaultMaxHashes.
	Hashes int
	// Queue is how many more attempts may wait for a hash, first come
	// first served. Default: 2 × Hashes.
	Queue int
	// PerCompany is how many of the Hashes + Queue places one Company's
	// attempts may hold at once, so that a flood at one Company leaves
	// room for the others. Default: half of Hashes + Queue, rounded up.
	PerCompany int
	// MaxWait is how long an attempt may wait in the queue. Default: 2 s.
	MaxWait time.Duration
}

// DefaultMaxHashes caps the default of Limits.Hashes: without a CPU limit
// GOMAXPROCS is the node's core count, and the chart's pods have 512 MiB.
const DefaultMaxHashes = 2

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.Hashes <= 0 {
		l.Hashes = min(runtime.GOMAXPROCS(0), DefaultMaxHashes)
	}
	if l.Queue <= 0 {
		l.Queue = 2 * l.Hashes
	}
	if l.PerCompany <= 0 {
		l.PerCompany = (l.Hashes + l.Queue + 1) / 2
	}
	if l.MaxWait <= 0 {
		l.MaxWait = 2 * time.Second
	}
	return l
}

// busyRetryAfter is the Retry-After of a shed attempt: a hash takes a
// fraction of a second, so places free up quickly unless a flood holds
// them.
const busyRetryAfter = time.Second

// gate admits password hashes within Limits. Attempts beyond the running
// hashes wait in one FIFO queue; a sign-in that finds its Company's share
// or the queue full, or waits MaxWait, is shed with a *BusyError.
type gate struct {
	limits  Limits
	metrics *gateMetrics

	mu      sync.Mutex
	running int
	waiting []chan struct{} // closed to hand a running place over
	held    map[int64]int   // places (running or waiting) per Company
}

func newGate(l Limits, m *gateMetrics) *gate {
	return &gate{limits: l.withDefaults(), metrics: m, held: map[int64]int{}}
}

// do runs fn, which hashes a password for companyID, once the gate admits
// it, and returns fn's error.
func (g *gate) do(ctx context.Context, companyID int64, fn func() error) error {
	if err := g.acquire(ctx, companyID, false); err != nil {
		return err
	}
	defer g.release(companyID)
	return fn()
}

// wait runs fn like do, but waits its turn however long the queue, until
// ctx ends: for the password changes of operators and Companies, who are
// authenticated and few, so that they are not refused under a flood.
// Memory stays bounded, since no more than Hashes run.
func (g *gate) wait(ctx context.Context, companyID int64, fn func() error) error {
	if err := g.acquire(ctx, companyID, true); err != nil {
		return err
	}
	defer g.release(companyID)
	return fn()
}

func (g *gate) acquire(ctx context.Context, companyID int64, patient bool) error {
	g.mu.Lock()
	switch {
	case g.held[companyID] >= g.limits.PerCompany && !patient:
		g.mu.Unlock()
		return g.metrics.shed("company")
	case g.running < g.limits.Hashes && len(g.waiting) == 0:
		g.running++
		g.held[companyID]++
		g.metrics.set(g.running, len(g.waiting))
		g.mu.Unlock()
		return nil
	case len(g.waiting) >= g.limits.Queue && !patient:
		g.mu.Unlock()
		return g.metrics.shed("queue")
	}
	turn := make(chan struct{})
	g.waiting = append(g.waiting, turn)
	g.held[companyID]++
	g.metrics.set(g.running, len(g.waiting))
	g.mu.Unlock()

	var timeout <-chan time.Time
	if !patient {
		timer := time.NewTimer(g.limits.MaxWait)
		defer timer.Stop()
		timeout = timer.C
	}
	var err error
	select {
	case <-turn:
		return nil
	case <-timeout:
		err = g.metrics.shed("wait")
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, w := range g.waiting {
		if w == turn {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			g.drop(companyID)
			g.metrics.set(g.running, len(g.waiting))
			return err
		}
	}
	// The turn came while timing out: take it rather than waste it.
	return nil
}

func (g *gate) release(companyID int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) > 0 {
		close(g.waiting[0])
		g.waiting = g.waiting[1:]
	} else {
		g.running--
	}
	g.drop(companyID)
	g.metrics.set(g.running, len(g.waiting))
}

func (g *gate) drop(companyID int64) {
	if g.held[companyID]--; g.held[companyID] <= 0 {
		delete(g.held, companyID)
	}
}

// gateMetrics are the gate's Prometheus metrics; nil records nothing.
type gateMetrics struct {
	inFlight, waiting prometheus.Gauge
	hashes            prometheus.Counter
	shedTotal         *prometheus.CounterVec
}

func newGateMetrics(reg prometheus.Registerer) *gateMetrics {
	m := &gateMetrics{
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poppyhost_password_hashes_in_flight",
			Help: "Argon2id password hashes running now (each holds 64 MiB).",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poppyhost_password_hashes_waiting",
			Help: "Sign-in attempts and password changes waiting for a hash.",
		}),
		hashes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poppyhost_password_hashes_total",
			Help: "Argon2id password hashes run, dummy ones for unknown usernames included.",
		}),
		shedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poppyhost_password_hashes_shed_total",
			Help: "Attempts refused because hashing was at its limit, by reason: company (the Company's share), queue (the queue was full), wait (waited too long).",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.inFlight, m.waiting, m.hashes, m.shedTotal)
	return m
}

func (m *gateMetrics) set(running, waiting int) {
	if m != nil {
		m.inFlight.Set(float64(running))
		m.waiting.Set(float64(waiting))
	}
}

func (m *gateMetrics) hashed() {
	if m != nil {
		m.hashes.Inc()
	}
}

// shed counts a shed attempt and returns its error.
func (m *gateMetrics) shed(reason string) error {
	if m != nil {
		m.shedTotal.WithLabelValues(reason).Inc()
	}
	return &BusyError{RetryAfter: busyRetryAfter}
}
