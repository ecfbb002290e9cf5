package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// cacheFor is how long a compiled API is used before the gateway checks
// whether it changed; a change reaches every replica within it.
const cacheFor = 2 * time.Second

// Options configure the gateway. Every field is required but Now.
type Options struct {
	// Store has the registered APIs.
	Store  *registry.Store
	Tokens *bearer.Validator
	URLs   tenant.URLs
	// Origins calls the APIs' origins.
	Origins *origin.Caller
	// Session is the Session middleware (sessions.Manager.Require with the
	// rate limits), which every call passes.
	Session func(http.Handler) http.Handler
	// Operations keeps the operations of Companies that turned the
	// extension on; SetEngine gives the engine that performs them.
	Operations *operations.Store
	// Metrics, when set, is where the calls' metrics are registered.
	Metrics prometheus.Registerer
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Gateway serves registered APIs at {issuer}/api/{name}/... and their
// descriptions at {issuer}/openapi/{name}.json.
type Gateway struct {
	opts Options
	// engine performs approved operations (SetEngine).
	engine *operations.Engine
	calls  *calls

	mu    sync.Mutex
	cache map[apiKey]*compiled
}

type apiKey struct {
	company int64
	name    string
}

// compiled is a registered API ready to serve.
type compiled struct {
	api     *registry.API
	spec    *registry.Spec
	origin  *url.URL
	checked time.Time
	// published is its description as served, made on first request
	// from the Company's settings as of companyAt.
	published func() ([]byte, error)
	companyAt time.Time
}

// withDefaults fills in the defaults in brackets.
func (opts Options) withDefaults() Options {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return opts
}

// New returns a Gateway.
func New(opts Options) (*Gateway, error) {
	opts = opts.withDefaults()
	if opts.Store == nil || opts.Tokens == nil || opts.Origins == nil || opts.Session == nil {
		return nil, errors.New("gateway: Store, Tokens, Origins and Session are required")
	}
	return &Gateway{opts: opts, calls: newCalls(opts.Metrics), cache: map[apiKey]*compiled{}}, nil
}

// SetEngine gives the gateway the engine that performs approved
// operations; the engine routes through the gateway (Route), so it is made
// after it (origin.Router). Call it before serving when Operations is set.
func (g *Gateway) SetEngine(e *operations.Engine) { g.engine = e }

// Public serves the APIs at /api/{name}/... and their descriptions at
// /openapi/{name}.json under /t/{slug}.
func (g *Gateway) Public(r chi.Router) {
	r.Get("/openapi/{name}.json", g.serveDescription)
	r.With(counted(g.calls.api), g.opts.Session).Handle("/api/{name}/*", http.HandlerFunc(g.serve))
}

// load returns the Company's API named name, compiled, from the cache when
// it has not changed.
func (g *Gateway) load(ctx context.Context, name string) (*compiled, error) {
	co := tenant.FromContext(ctx)
	key := apiKey{co.ID, name}
	now := g.opts.Now()
	g.mu.Lock()
	c := g.cache[key]
	g.mu.Unlock()
	if c != nil && !c.companyAt.Equal(co.UpdatedAt) {
		c = nil
	}
	if c != nil && now.Sub(c.checked) < cacheFor {
		return c, nil
	}
	if c != nil {
		updated, err := g.opts.Store.APIUpdatedAt(ctx, co.ID, name)
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return nil, err
		}
		if err == nil && updated.Equal(c.api.UpdatedAt) {
			fresh := *c
			fresh.checked = now
			g.put(key, &fresh)
			return &fresh, nil
		}
	}
	api, err := g.opts.Store.GetAPI(ctx, co.ID, name)
	if errors.Is(err, registry.ErrNotFound) {
		g.mu.Lock()
		delete(g.cache, key)
		g.mu.Unlock()
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	spec, err := registry.Compile(ctx, api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("gateway: stored description of %s no longer compiles: %w", name, err)
	}
	origin, err := url.Parse(api.Origin)
	if err != nil {
		return nil, fmt.Errorf("gateway: stored origin of %s: %w", name, err)
	}
	c = &compiled{api: api, spec: spec, origin: origin, checked: now, companyAt: co.UpdatedAt,
		published: sync.OnceValues(func() ([]byte, error) {
			return registry.Published(api.OpenAPI, registry.URL(g.opts.URLs, co, name), g.opts.URLs.Issuer(co),
				co.Settings.Auth.OfferedGrantTypes())
		})}
	g.put(key, c)
	return c, nil
}

func (g *Gateway) put(key apiKey, c *compiled) {
	g.mu.Lock()
	g.cache[key] = c
	g.mu.Unlock()
}

func (g *Gateway) serveDescription(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c, err := g.load(ctx, chi.URLParam(r, "name"))
	if errors.Is(err, registry.ErrNotFound) {
		httpx.NotFound(w, r)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	doc, err := c.published()
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(doc)
}

// serve verifies a call and forwards it to the origin.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	co := tenant.FromContext(ctx)
	c, err := g.load(ctx, chi.URLParam(r, "name"))
	if errors.Is(err, registry.ErrNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeNotFound, "this Company has no API of that name"))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rest := "/" + chi.URLParam(r, "*")
	if escaped := r.URL.EscapedPath(); strings.HasPrefix(escaped, URLPath(co, c.api.Name)+"/") {
		rest = strings.TrimPrefix(escaped, URLPath(co, c.api.Name))
	}
	if !safehttp.ValidPath(rest) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "the path must be %s", safehttp.PathRule))
		return
	}
	access, allow := c.spec.Match(r.Method, rest)
	if access == nil {
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeMethodNotAllowed, "this API does not declare %s for this path", r.Method))
			return
		}
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeNotFound, "this API does not declare this path"))
		return
	}
	grant, err := g.authorize(ctx, r, co, access)
	if err != nil {
		bearer.WriteError(w, r, err)
		return
	}
	if r.ContentLength > c.api.MaxRequestBytes {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRequestTooLarge, "the body is larger than this API's %d bytes", c.api.MaxRequestBytes))
		return
	}
	facts := origin.Facts(sessions.FromContext(ctx), grant)
	target := origin.Target(c.origin, rest, r.URL.RawQuery)
	r.Body = http.MaxBytesReader(w, r.Body, c.api.MaxRequestBytes)
	if co.Settings.Operations.Enabled {
		g.serveOperations(w, r, &call{co: co, api: c.api, target: target, rest: rest, facts: facts, grant: grant})
		return
	}
	jwt, err := g.sign(ctx, co, c.api, target, r.Method, facts)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	g.opts.Origins.Forward(w, r, c.api, target, jwt, nil)
}

// sign makes the Poppy-Verified of a call to target.
func (g *Gateway) sign(ctx context.Context, co *tenant.Company, api *registry.API, target *url.URL, method string,
	facts *verified.Facts) (string, error) {
	return g.opts.Origins.Sign(ctx, co, verified.Claims{Audience: api.Origin,
		Facts: *facts, API: api.Name, Method: method, Path: target.EscapedPath()})
}

// URLPath is the escaped path of an API's gateway URL on the platform's
// host.
func URLPath(c *tenant.Company, name string) string { return "/t/" + c.Slug + "/api/" + name }

// authorize validates the access token, when there is one, for the
// Session, then checks the operation's access against it.
func (g *Gateway) authorize(ctx context.Context, r *http.Request, co *tenant.Company, access *registry.Access) (*bearer.Grant, error) {
	grant, err := g.opts.Tokens.Authorize(ctx, r, bearer.Resource{})
	if err != nil {
		return nil, err
	}
	var scopes []string
	if grant != nil {
		scopes = grant.Scopes
	}
	if access.Allows(grant != nil, scopes) {
		return grant, nil
	}
	ch := &bearer.Challenge{Scopes: access.Needed(scopes), ResourceMetadata: g.opts.Tokens.MetadataURL(co, bearer.Resource{})}
	if grant == nil {
		ch.Description = "this operation needs account access: sign in and send an access token"
	} else {
		ch.Code = httpx.CodeInsufficientScope
		ch.Description = "the access token lacks scopes this operation needs"
	}
	return nil, ch
}
