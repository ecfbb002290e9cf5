package tenant

import (
	"context"
	"net/http"
	"strconv"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Default limits of the admin and Company APIs: requests a minute per
// operator token and per Company API key, across all replicas.
const (
	DefaultPerOperatorToken = 1200
	DefaultPerAPIKey        = 1200
)

// APIRates bound the admin and Company APIs: requests a minute per operator
// token and per Company API key. Zero fields take the defaults.
type APIRates struct {
	PerOperatorToken, PerAPIKey int
}

// WithDefaults returns r with its zero fields set to the defaults.
func (r APIRates) WithDefaults() APIRates {
	if r.PerOperatorToken <= 0 {
		r.PerOperatorToken = DefaultPerOperatorToken
	}
	if r.PerAPIKey <= 0 {
		r.PerAPIKey = DefaultPerAPIKey
	}
	return r
}

type credentialKey struct{}

// withCredential records which credential authenticated the request, by
// its kind and row id (the lookup already found it; the secret is never
// kept), for LimitByCredential to count against.
func withCredential(ctx context.Context, kind string, id int64) context.Context {
	return context.WithValue(ctx, credentialKey{}, kind+" "+strconv.FormatInt(id, 10))
}

// LimitByCredential counts each request against the operator token or
// Company API key that authenticated it (RequireOperator, RequireAPIKey),
// with a budget of limit a minute; over it the answer is 429 rate_limited
// with Retry-After, in the APIs' error format. A request with no
// credential in its context passes.
func LimitByCredential(l *httpx.Limiter, limit int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if allowCredential(w, r, l, limit) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

func allowCredential(w http.ResponseWriter, r *http.Request, l *httpx.Limiter, limit int) bool {
	key, _ := r.Context().Value(credentialKey{}).(string)
	return key == "" || l.Allow(w, r, key, limit)
}

// LimitOperators limits the admin API to perToken requests a minute per
// operator token (LimitByCredential); without it the admin API is not
// limited. Call it before the first request.
func (a *Admin) LimitOperators(l *httpx.Limiter, perToken int) {
	a.limiter, a.perToken = l, perToken
}

// limitOperators is the admin API's limit, after RequireOperator.
func (a *Admin) limitOperators(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.limiter == nil || allowCredential(w, r, a.limiter, a.perToken) {
			next.ServeHTTP(w, r)
		}
	})
}
