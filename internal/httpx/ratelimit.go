package httpx

import (
	"net/http"
	"time"

	"github.com/go-chi/httprate"
)

// Limiter counts requests per key in a sliding one-minute window. Counts
// live in this process, with no write per request; a Limiter shared by
// replicas (NewSharedLimiter) allows each its share of every limit, so the
// limits hold across replicas within a tolerance (docs/operations.md,
// "Rate limits across replicas").
type Limiter struct {
	rl *httprate.RateLimiter
	// live counts the replicas that share every limit; nil: this one only.
	live func() int
}

// NewLimiter returns a Limiter with one-minute windows whose limits are
// this process's alone.
func NewLimiter() *Limiter { return NewSharedLimiter(nil) }

// NewSharedLimiter returns a Limiter whose every limit is shared by live()
// replicas: each allows limit / live(), rounded up (replicas.Counter.Live).
func NewSharedLimiter(live func() int) *Limiter {
	return &Limiter{live: live, rl: httprate.NewRateLimiter(1, time.Minute,
		httprate.WithResponseHeaders(httprate.ResponseHeaders{RetryAfter: "Retry-After"}))}
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
	if l.Exceeded(w, r, key, limit) {
		WriteError(w, r, Errorf(CodeRateLimited, "too many requests; wait for Retry-After seconds (spec 5.6)"))
		return false
	}
	return true
}

// Exceeded counts a request against key with a budget of limit a minute
// and reports whether it is over; over the limit it sets Retry-After and
// leaves the answer to the caller, such as an HTML page's 429. A request
// over the limit is not counted.
func (l *Limiter) Exceeded(w http.ResponseWriter, r *http.Request, key string, limit int) bool {
	r = r.WithContext(httprate.WithRequestLimit(r.Context(), l.Share(limit)))
	return l.rl.OnLimit(w, r, key)
}
