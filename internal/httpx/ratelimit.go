package httpx

import (
	"net/http"
	"time"

	"github.com/go-chi/httprate"
)

// Limiter counts requests per key in a sliding one-minute window. Counts
// live in this process: with several replicas each allows the limit, so a
// Company's effective budget is the limit times the replicas behind the
// load balancer (docs/decisions.md).
type Limiter struct {
	rl *httprate.RateLimiter
}

// NewLimiter returns a Limiter with one-minute windows.
func NewLimiter() *Limiter {
	return &Limiter{rl: httprate.NewRateLimiter(1, time.Minute,
		httprate.WithResponseHeaders(httprate.ResponseHeaders{RetryAfter: "Retry-After"}))}
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
	r = r.WithContext(httprate.WithRequestLimit(r.Context(), limit))
	return l.rl.OnLimit(w, r, key)
}
