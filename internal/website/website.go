package website

import (
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The website proxy serves every path of a Company domain that the
// platform does not serve itself (DESIGN.md, "Hosts and routes") from the
// Company's web.origin, and is where a joined browser's Session cookie
// takes effect (spec 6, step 4):
//
//   - A request with an active Session cookie reaches the origin with
//     Poppy-Verified (aud: web.origin exactly, iss: the Company's
//     identifier) stating the web session's Session and, signed in, its
//     account and scopes. Without one the request passes as it came.
//     Either way the origin never sees our cookies (the Session cookie
//     and the join cookie), nor a Poppy-Verified or Poppy-Session the
//     browser sent.
//   - web.scope_rules apply to joined browsers only: requests that carry
//     the Session cookie, active or not. A rule's scopes the web session
//     lacks (all of them signed out, or with a cookie no longer active)
//     get a 403 page naming them, and the origin is not called. An
//     ordinary visitor, without the cookie, passes to the website, which
//     handles its own logins.
//   - The origin signs a browser out with the response header
//     Poppy-Web-Session: end, which ends the web session and deletes the
//     cookie.
//   - The origin's other cookies reach the browser (the domain is the
//     Company's own), but not one named like the Session cookie or the
//     join cookie, which only the platform sets.

// WebSessionHeader is the response header with which a Company's website
// signs the browser out of its web session: "Poppy-Web-Session: end".
const WebSessionHeader = "Poppy-Web-Session"

const (
	// websiteMaxRequestBytes bounds a request body (uploads). Answers
	// are not bounded: they stream through.
	websiteMaxRequestBytes = 100 << 20
	// endTimeout bounds ending a web session after the browser has gone.
	endTimeout = 5 * time.Second
)

// WebSessions answers what a Session cookie acts for and ends web
// sessions: browserjoin.Handler.
type WebSessions interface {
	Lookup(ctx context.Context, c *tenant.Company, r *http.Request) (*browserjoin.WebSession, error)
	End(ctx context.Context, c *tenant.Company, token string) (bool, error)
}

// Options configure a Proxy. Every field is required but Operations,
// Engine and Now.
type Options struct {
	// Origins calls the website's origin.
	Origins *origin.Caller
	// Sessions answers what a Session cookie acts for.
	Sessions WebSessions
	// Session (the Session middleware) and Tokens check a Personal
	// Agent's requests to OperationsPath.
	Session func(http.Handler) http.Handler
	Tokens  *bearer.Validator
	// Operations keeps the operations of Companies whose website uses the
	// extension, and Engine performs them.
	Operations *operations.Store
	Engine     *operations.Engine
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Proxy proxies a Company's domains to its website origin.
type Proxy struct {
	opts Options
}

// New returns a Proxy.
func New(opts Options) *Proxy {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Proxy{opts: opts}
}

// Domain serves every path of a Company domain that no other route of r
// serves.
func (s *Proxy) Domain(r chi.Router) { r.NotFound(s.ServeHTTP) }

// Public serves OperationsPath under /t/{slug}, to Sessions with a valid
// access token when they send one.
func (s *Proxy) Public(r chi.Router) {
	r.With(s.opts.Session, s.opts.Tokens.Require(bearer.Resource{})).Post(OperationsPath, s.serveOperations)
}

// ServeHTTP proxies a request for a Company domain, the Company in the
// context, to its web.origin; a Company without one has no website here
// (404).
func (s *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	web := &c.Settings.Web
	if web.Origin == "" || !strings.HasPrefix(r.URL.Path, "/") {
		httpx.NotFound(w, r)
		return
	}
	base, err := url.Parse(web.Origin)
	if err != nil {
		httpx.WriteError(w, r, fmt.Errorf("website: stored web.origin of %s: %w", c.Slug, err))
		return
	}
	name := web.Cookie()
	tokens := cookieValues(r, name)
	joined := len(tokens) > 0
	var ws *browserjoin.WebSession
	if joined {
		if ws, err = s.opts.Sessions.Lookup(ctx, c, r); err != nil {
			httpx.Logger(ctx).ErrorContext(ctx, "website: look up web session", slog.Any("err", err))
			w.Header().Set("Retry-After", "5")
			s.page(w, r, http.StatusServiceUnavailable, httpx.CodeUnavailable, websitePage{
				Title:   "Try again shortly",
				Message: "This page is temporarily unavailable. Try again in a few seconds.",
			})
			return
		}
		if rule := matchScopeRule(web.ScopeRules, r.Method, r.URL.Path); rule != nil {
			var have []string
			if ws != nil {
				have = ws.Scopes
			}
			if missing := missingScopes(rule.Scopes, have); len(missing) > 0 {
				s.needScopes(w, r, c, ws, missing)
				return
			}
		}
	}
	if r.ContentLength > websiteMaxRequestBytes {
		s.fail(w, r, httpx.CodeRequestTooLarge, nil)
		return
	}
	// Website operations (weboperations.go): a recorded approval may
	// perform the request here.
	wr, done := s.webOperation(w, r, c, ws)
	if done {
		return
	}

	target := origin.Target(base, r.URL.EscapedPath(), r.URL.RawQuery)
	jwt := ""
	if ws != nil {
		jwt, err = s.opts.Origins.Sign(ctx, c, verified.Claims{
			Audience: web.Origin, Facts: *ws.Facts(), Method: r.Method, Path: target.EscapedPath(),
		})
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
	}

	host := forwardedHost(r.Host)
	client := ""
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		client = h
	}
	ours := []string{name, tenant.JoinCookie}
	r.Body = http.MaxBytesReader(w, r.Body, websiteMaxRequestBytes)
	s.opts.Origins.Relay(w, r, &origin.Relay{
		Target:   target,
		Timeout:  origin.WebsiteTimeout,
		Upgrades: true,
		Rewrite: func(out *http.Request) {
			for _, h := range websiteStripped {
				out.Header.Del(h)
			}
			stripCookies(out.Header, ours)
			// The website learns which of the Company's domains it
			// serves, over https, and for whom; it never gets the
			// browser's own claims about these.
			out.Header.Set("X-Forwarded-Host", host)
			out.Header.Set("X-Forwarded-Proto", "https")
			if client != "" {
				out.Header.Set("X-Forwarded-For", client)
			}
			if jwt != "" {
				out.Header.Set(verified.Header, jwt)
			}
		},
		Modify: func(resp *http.Response) error {
			dropCookies(resp.Header, ours)
			end := strings.EqualFold(strings.TrimSpace(resp.Header.Get(WebSessionHeader)), "end")
			resp.Header.Del(WebSessionHeader)
			if end && joined {
				s.end(ctx, c, tokens)
				resp.Header.Add("Set-Cookie", deleteCookie(web, name, r.Host).String())
			}
			if httpx.IsMediaType(resp.Header.Get("Content-Type"), operations.ProposalType) {
				if end {
					// Signed out in the same answer: no Session to ask.
					return s.proposal(r, c, nil, resp)
				}
				return s.proposal(r, c, wr, resp)
			}
			return nil
		},
		// Informational answers (103 Early Hints) pass before modify sees
		// the final one: the same cookies are dropped from them.
		Head: func(code int, h http.Header) {
			if code < http.StatusOK {
				dropCookies(h, ours)
				h.Del(WebSessionHeader)
			}
		},
		Fail: s.fail,
	})
}

// websiteStripped never reach the website: a Poppy-Verified the browser
// made up, a Session header (web pages carry the cookie instead: spec 6),
// and claims about the connection the website could mistake for ours.
// Hop-by-hop headers are dropped by httputil.ReverseProxy, and every
// X-Forwarded-* header the browser sent by the relay.
var websiteStripped = []string{verified.Header, "Poppy-Session", "Forwarded", "X-Real-Ip", "X-Client-Ip",
	"True-Client-Ip", operations.ApprovalHeader, origin.IdempotencyKeyHeader}

// end ends the web sessions of tokens: the website signed the browser
// out. It runs even if the browser has gone, and a failure is logged: the
// cookie is deleted all the same.
func (s *Proxy) end(ctx context.Context, c *tenant.Company, tokens []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	for _, t := range tokens {
		if _, err := s.opts.Sessions.End(ctx, c, t); err != nil {
			httpx.Logger(ctx).ErrorContext(ctx, "website: end web session", slog.Any("err", err))
		}
	}
}

// cookieValues returns the values of the request's cookies named name.
func cookieValues(r *http.Request, name string) []string {
	var values []string
	for _, ck := range r.CookiesNamed(name) {
		values = append(values, ck.Value)
	}
	return values
}

// stripCookies removes the cookies named in names from the request's
// Cookie headers, keeping the others as the browser sent them.
func stripCookies(h http.Header, names []string) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			name, _, _ := strings.Cut(part, "=")
			if slices.Contains(names, strings.TrimSpace(name)) {
				continue
			}
			kept = append(kept, part)
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// dropCookies removes each Set-Cookie that names a cookie of names, in any
// case (browsers match cookie prefixes such as __Host- without regard to
// case).
func dropCookies(h http.Header, names []string) {
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		name := setCookieName(line)
		if !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, name) }) {
			kept = append(kept, line)
		}
	}
	h.Del("Set-Cookie")
	for _, line := range kept {
		h.Add("Set-Cookie", line)
	}
}

// setCookieName is the name a Set-Cookie's cookie is read back under. A
// nameless cookie ("=a=b" or "a") is sent back as its bare value, which a
// server reads as a cookie named a.
func setCookieName(line string) string {
	pair, _, _ := strings.Cut(line, ";")
	name, value, ok := strings.Cut(pair, "=")
	switch {
	case !ok:
		name = pair
	case strings.TrimSpace(name) == "":
		name, _, _ = strings.Cut(value, "=")
	}
	return strings.TrimSpace(name)
}

// deleteCookie is the Set-Cookie that removes the Session cookie, with
// the Domain it was set with where host is within web.cookie_domain.
func deleteCookie(web *tenant.Web, name, host string) *http.Cookie {
	ck := &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode}
	if d := web.CookieDomain; d != "" {
		if h := httpx.HostOnly(host); h == d || strings.HasSuffix(h, "."+d) {
			ck.Domain = d
		}
	}
	return ck
}

// forwardedHost is the Company domain the request was for, with its port
// unless it is https's own.
func forwardedHost(hostport string) string {
	host := httpx.HostOnly(hostport)
	if _, port, err := net.SplitHostPort(hostport); err == nil && port != "443" {
		return net.JoinHostPort(host, port)
	}
	return host
}

// matchScopeRule returns the rule that decides a request: of the rules
// whose path prefixes the request's path (as strings: /account also
// prefixes /accounts) and whose methods, if any, include its method, the
// one with the longest path; at equal paths, one that lists methods; then
// the first. HEAD counts as GET. Both paths are compared percent-decoded,
// with backslashes read as slashes, repeated slashes as one and dot
// segments resolved, so that no spelling of a path an origin may read as
// a ruled one escapes its rule. Comparison is case-sensitive.
func matchScopeRule(rules []tenant.WebScopeRule, method, p string) *tenant.WebScopeRule {
	if len(rules) == 0 {
		return nil
	}
	p = rulePath(p)
	var (
		best    *tenant.WebScopeRule
		bestLen int
	)
	for i := range rules {
		rule := &rules[i]
		rp, err := url.PathUnescape(rule.Path)
		if err != nil {
			continue
		}
		rp = rulePath(rp)
		if !strings.HasPrefix(p, rp) || !ruleMethod(rule.Methods, method) {
			continue
		}
		if best == nil || len(rp) > bestLen || len(rp) == bestLen && len(rule.Methods) > 0 && len(best.Methods) == 0 {
			best, bestLen = rule, len(rp)
		}
	}
	return best
}

// rulePath is the decoded path p as scope rules see it.
func rulePath(p string) string {
	p = strings.ReplaceAll(p, `\`, "/")
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

func ruleMethod(methods []string, method string) bool {
	if len(methods) == 0 {
		return true
	}
	if method == http.MethodHead {
		method = http.MethodGet
	}
	return slices.Contains(methods, method)
}

// missingScopes returns the scopes of need not in have, in need's order.
func missingScopes(need, have []string) []string {
	var missing []string
	for _, s := range need {
		if !slices.Contains(have, s) && !slices.Contains(missing, s) {
			missing = append(missing, s)
		}
	}
	return missing
}

// needScopes answers a joined browser whose web session lacks scopes a
// page needs with a page naming them, so the Personal Agent can request
// them (spec 6, 5.4).
func (s *Proxy) needScopes(w http.ResponseWriter, r *http.Request, c *tenant.Company, ws *browserjoin.WebSession, missing []string) {
	p := websitePage{Title: "More access needed", Scopes: missing}
	name := c.Settings.Organization.Name
	switch {
	case ws == nil:
		p.Message = "This browser's session with your personal agent has ended. This page of " + name +
			" needs the scopes below: have your personal agent sign in with them and join this browser again."
	case ws.AccountID == 0:
		p.Message = "This browser is signed out. This page of " + name +
			" needs the scopes below: have your personal agent sign in with them and join this browser again."
	default:
		p.Message = "This page of " + name + " needs scopes this browser's sign-in lacks, listed below: " +
			"have your personal agent request them and join this browser again."
	}
	s.page(w, r, http.StatusForbidden, httpx.CodeInsufficientScope, p)
}

// fail answers a request the origin did not answer.
func (s *Proxy) fail(w http.ResponseWriter, r *http.Request, code string, cause error) {
	p := websitePage{Title: "This page is not available"}
	status := http.StatusBadGateway
	switch code {
	case httpx.CodeRequestTooLarge:
		status = http.StatusRequestEntityTooLarge
		p.Title, p.Message = "Too large", fmt.Sprintf("What was sent is larger than the %d bytes this website accepts.", websiteMaxRequestBytes)
	case origin.CodeTimeout:
		status = http.StatusGatewayTimeout
		p.Message = "The website did not answer in time. Try again later."
	default:
		p.Message = "The website could not be reached. Try again later."
	}
	if cause != nil {
		httpx.Logger(r.Context()).WarnContext(r.Context(), "website: origin call failed",
			slog.String("code", code), slog.Any("err", cause))
	}
	s.page(w, r, status, code, p)
}

// websitePage is a page of the website proxy: an error, or a request
// waiting for approval (weboperations.go).
type websitePage struct {
	Title   string
	Message string
	// Scopes are the missing scopes a 403 names.
	Scopes []string
	// Continue repeats a request waiting for approval.
	Continue *continueControl
}

// page.html is the page of every answer the proxy gives a browser itself.
//
//go:embed page.html
var pageHTML string

var websiteTemplate = template.Must(template.New("website").Parse(pageHTML))

// page writes a page: HTML, unless a script asked (fromScript), which
// gets {"error", "error_description"} and, for missing scopes, "scope"
// (space-separated, as in OAuth). It is never stored, and its only form
// (Continue) submits to the same domain.
func (s *Proxy) page(w http.ResponseWriter, r *http.Request, status int, code string, p websitePage) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if fromScript(r) {
		e := &httpx.Error{Code: code, Description: p.Message}
		if len(p.Scopes) > 0 {
			e.Extra = map[string]any{"scope": strings.Join(p.Scopes, " ")}
		}
		// The page's own status: a page's code may have none in httpx's
		// table (origin_timeout), or another one there.
		httpx.WriteJSON(w, status, e.Body())
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	if err := websiteTemplate.Execute(w, p); err != nil {
		httpx.Logger(r.Context()).WarnContext(r.Context(), "website: render page", slog.Any("err", err))
	}
}
