package httpx

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/httprate"
)

// Limiter counts requests per key in a sliding one-minute window. Counts
// live in this process, with no write per request; a Limiter shared by
// replicas (NewSharedLimiter) allows each its share of every limit, so the
// limits hold across replicas within a tolerance (docs/operations.md,
// "Rate limits across replicas").
//
// The window is httprate's: its in-memory counter, the current minute's
// count plus the previous minute's weighted by how much of it the window
// still covers, and minutes aligned to when the Limiter was made so that
// resets spread out. The limit is passed to each call rather than through
// the request's context, as httprate's middleware takes it: a Session
// request is counted three times, and each count then cost a copy of the
// request, a context value and response headers nobody reads (issue 19).
type Limiter struct {
	counter httprate.LimitCounter
	// offset aligns the minutes to the Limiter's start.
	offset time.Duration
	// mu makes a count's read and increment one step.
	mu sync.Mutex
	// live counts the replicas that share every limit; nil: this one only.
	live func() int
}

// window is the length of a Limiter's window.
const window = time.Minute

// retryAfter is the Retry-After of a request over a limit: a window.
var retryAfter = strconv.Itoa(int(window.Seconds()))

// NewLimiter returns a Limiter with one-minute windows whose limits are
// this process's alone.
func NewLimiter() *Limiter { return NewSharedLimiter(nil) }

// NewSharedLimiter returns a Limiter whose every limit is shared by live()
// replicas: each allows limit / live(), rounded up (replicas.Counter.Live).
func NewSharedLimiter(live func() int) *Limiter {
	start := time.Now().UTC()
	return &Limiter{live: live, counter: httprate.NewLocalLimitCounter(window), offset: start.Sub(start.Truncate(window))}
}

// Share is this replica's part of limit: limit divided by the live
// replicas, rounded up, so no replica's part is 0.
func (l *Limiter) Share(limit int) int {
	if l.live == nil {
		return limit
	}
	n := max(l.live(), 1)
	return (limit + n - 1) / n
}

// Allow counts a request against key with a budget of limit a minute. Over
// the limit it writes 429 with Retry-After (spec 5.6) and returns false.
func (l *Limiter) Allow(w http.ResponseWriter, r *http.Request, key string, limit int) bool {
	if l.Exceeded(w, key, limit) {
		WriteError(w, r, Errorf(CodeRateLimited, "too many requests; wait for Retry-After seconds (spec 5.6)"))
		return false
	}
	return true
}

// Exceeded counts a request against key with a budget of limit a minute
// and reports whether it is over; over the limit it sets Retry-After and
// leaves the answer to the caller, such as an HTML page's 429. A request
// over the limit is not counted.
func (l *Limiter) Exceeded(w http.ResponseWriter, key string, limit int) bool {
	if !l.count(key, l.Share(limit), time.Now().UTC()) {
		w.Header().Set("Retry-After", retryAfter)
		return true
	}
	return false
}

// count counts a request against key at now and reports whether it was
// within limit; one over it is not counted. The in-memory counter never
// fails.
func (l *Limiter) count(key string, limit int, now time.Time) bool {
	current := now.Add(-l.offset).Truncate(window).Add(l.offset)
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, prev, _ := l.counter.Get(key, current, current.Add(-window))
	rate := float64(prev)*float64(window-now.Sub(current))/float64(window) + float64(cur)
	if int(math.Round(rate))+1 > limit {
		return false
	}
	_ = l.counter.IncrementBy(key, current, 1)
	return true
}
