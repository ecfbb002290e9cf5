package tenant

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tracing"
)

type ctxKey struct{}

// WithCompany returns ctx carrying the Company a request is for.
func WithCompany(ctx context.Context, c *Company) context.Context {
	if c != nil {
		tracing.SetCompany(ctx, c.Slug)
	}
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the request's Company. Handlers mounted behind
// HostRouter, BySlug or the API key middleware always have one.
func FromContext(ctx context.Context) *Company {
	c, _ := ctx.Value(ctxKey{}).(*Company)
	return c
}

// Lookup finds Companies by domain and by slug.
type Lookup interface {
	GetByDomain(ctx context.Context, domain string) (*Company, error)
	Get(ctx context.Context, slug string) (*Company, error)
}

// HostRouter sends requests for the platform's own host to platform and
// requests for a registered Company domain to companies, with the Company
// in the context. Any other host, an IP literal included, gets a 404 that
// reveals nothing: health, readiness and metrics are on the operations
// listener (platform.OpsHandler), not here.
func HostRouter(lookup Lookup, publicHost string, platform, companies http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := httpx.HostOnly(r.Host)
		if host == publicHost {
			platform.ServeHTTP(w, r)
			return
		}
		if !ValidHostName(host) {
			httpx.NotFound(w, r)
			return
		}
		c, err := lookup.GetByDomain(r.Context(), host)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				httpx.NotFound(w, r)
				return
			}
			httpx.WriteError(w, r, err)
			return
		}
		companies.ServeHTTP(w, r.WithContext(WithCompany(r.Context(), c)))
	})
}

// BySlug loads the Company named by the {slug} URL parameter, for the
// routes under {PUBLIC_URL}/t/{slug}.
func BySlug(lookup Lookup) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			slug := chi.URLParam(r, "slug")
			if !ValidSlug(slug) {
				httpx.NotFound(w, r)
				return
			}
			c, err := lookup.Get(r.Context(), slug)
			if err != nil {
				if errors.Is(err, ErrNotFound) {
					httpx.NotFound(w, r)
					return
				}
				httpx.WriteError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithCompany(r.Context(), c)))
		})
	}
}

// LimitByAddress counts every request to a Company against its client
// address, before anything about the requester is verified (spec 5.6), or
// against its operator when a Web Bot Auth signature recognised one
// (botauth.Recognize): visitors behind one proxy address then do not share
// a budget, and one operator's requests share one whatever their address.
func LimitByAddress(l *httpx.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := FromContext(r.Context())
			key := "addr " + strconv.FormatInt(c.ID, 10) + " " + clientAddr(r)
			if op := botauth.FromContext(r.Context()); op != nil {
				key = "operator " + strconv.FormatInt(c.ID, 10) + " " + op.Host
			}
			if !l.Allow(w, r, key, c.Settings.RateLimits.PerAddress) {
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
