package audit

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Kinds of actor.
const (
	KindOperatorToken = "operator_token"
	KindAPIKey        = "api_key"
	// KindStaff is a staff member signed in to the Company console, named
	// by their id and email.
	KindStaff = "staff"
)

// Actor is who made a change: a credential, named by its id, the prefix of
// its secret and its name.
type Actor struct {
	Kind   string `json:"kind"`
	ID     int64  `json:"id"`
	Prefix string `json:"prefix,omitempty"`
	Name   string `json:"name,omitempty"`
}

// maxFields bounds the field names one entry keeps.
const maxFields = 100

// pending is the entry of one write request, filled in as the request
// passes through authentication and the handler.
type pending struct {
	method, path string

	mu          sync.Mutex
	actor       *Actor
	companyID   int64
	companySlug string
	fields      []string
	recorded    bool
	exempt      bool
}

type ctxKey struct{}

func from(ctx context.Context) *pending {
	p, _ := ctx.Value(ctxKey{}).(*pending)
	return p
}

// SetActor names who makes the request's change. Outside a write request
// behind Middleware it does nothing.
func SetActor(ctx context.Context, a Actor) {
	if p := from(ctx); p != nil {
		p.mu.Lock()
		p.actor = &a
		p.mu.Unlock()
	}
}

// SetCompany names the Company the request's change is for.
func SetCompany(ctx context.Context, id int64, slug string) {
	if p := from(ctx); p != nil {
		p.mu.Lock()
		p.companyID, p.companySlug = id, slug
		p.mu.Unlock()
	}
}

// Note adds the names of fields the request's change sets (dotted paths
// into the request's body or the resource, never values).
func Note(ctx context.Context, fields ...string) {
	if p := from(ctx); p != nil {
		p.mu.Lock()
		for _, f := range fields {
			if len(p.fields) < maxFields && !slices.Contains(p.fields, f) {
				p.fields = append(p.fields, f)
			}
		}
		p.mu.Unlock()
	}
}

// Exempt marks the routes behind it as not audited: their writes are not
// administration and are kept where they belong (a conversation's
// messages in the conversation).
func Exempt(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := from(r.Context()); p != nil {
			p.mu.Lock()
			p.exempt = true
			p.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// Record writes the request's entry with exec, the transaction of the
// change, so the two commit together or not at all. Outside an audited
// write request, or once the entry is recorded, it does nothing. Call it
// after the change's own statements succeeded.
func Record(ctx context.Context, exec db.Executor) error {
	p := from(ctx)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recorded || p.exempt || p.actor == nil {
		return nil
	}
	if err := p.insert(ctx, exec); err != nil {
		return err
	}
	p.recorded = true
	return nil
}

// insert writes the entry; p.mu is held.
func (p *pending) insert(ctx context.Context, exec db.Executor) error {
	var company any
	if p.companyID != 0 {
		company = p.companyID
	}
	fields := p.fields
	if fields == nil {
		fields = []string{}
	}
	_, err := exec.Exec(ctx, `INSERT INTO audit_log (company_id, company_slug, actor_kind, actor_id, actor_prefix,
		actor_name, action, path, fields) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		company, p.companySlug, p.actor.Kind, p.actor.ID, p.actor.Prefix, p.actor.Name,
		p.method+" "+routePattern(ctx), p.path, fields)
	return err
}

// routePattern is the route the request matched, without chi's trailing
// slash of a subrouter's root.
func routePattern(ctx context.Context) string {
	rc := chi.RouteContext(ctx)
	if rc == nil {
		return ""
	}
	pat := rc.RoutePattern()
	if len(pat) > 1 {
		pat = strings.TrimSuffix(pat, "/")
	}
	return pat
}

// recordTimeout bounds the write of an entry after the handler answered.
const recordTimeout = 10 * time.Second

// Middleware opens an entry for every write request (any method but GET,
// HEAD and OPTIONS) and, when the handler answered with success and did
// not record the entry itself, records it on exec: the change is then
// already committed, so a crash in between loses the entry, which is why
// handlers whose store allows record it in the change's transaction.
func Middleware(exec db.Executor) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				next.ServeHTTP(w, r)
				return
			}
			p := &pending{method: r.Method, path: r.URL.Path}
			ctx := context.WithValue(r.Context(), ctxKey{}, p)
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(ctx))
			// A handler that wrote nothing answered 200.
			if s := ww.Status(); s != 0 && (s < 200 || s > 299) {
				return
			}
			// The change is made: record it even if the client left.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			defer cancel()
			if err := Record(rctx, exec); err != nil {
				httpx.Logger(ctx).Error("audit: recording a change", "action", r.Method+" "+routePattern(ctx), "err", err)
			}
		})
	}
}
