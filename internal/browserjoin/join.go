package browserjoin

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Paths on every Company domain (DESIGN.md, "Hosts and routes").
const (
	Path          = "/poppy/browser-session"
	AuthorizePath = Path + "/authorize"
)

const (
	// codeLifetime bounds steps 1 to 3, which a Personal Agent completes
	// right away (spec 6).
	codeLifetime = 2 * time.Minute
	codePrefix   = "bc_"
	maxCode      = 64
	maxForm      = 4 << 10
	// maxWebSession bounds a web session of a Session without an idle
	// timeout.
	maxWebSession = 30 * 24 * time.Hour
)

// Options configure a Handler.
type Options struct {
	Store  *Store
	Tokens *bearer.Validator
	Logger *slog.Logger
	// Session is the Session middleware step 2 runs behind.
	Session func(http.Handler) http.Handler
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Handler serves browser join and answers what a Session cookie acts for.
type Handler struct {
	opts Options
}

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{opts: opts}
}

// Domain mounts the three steps on a Company domain's router
// (httpx.DomainRoutes), step 2 behind Options.Session.
func (h *Handler) Domain(r chi.Router) {
	r.Get(Path, h.page)
	r.Post(Path, h.submit)
	r.With(h.opts.Session).Post(AuthorizePath, h.authorize)
}

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

type pageData struct {
	Company string
	Code    string
	Action  string
	Title   string
	Message string
}

// pageHeaders are sent with every page of the join: not stored by caches,
// not framed, not kept as a window reference by its opener, no Referer
// (spec 6, step 1).
func pageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	httpx.PageHeaders(w.Header(), "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, d pageData) {
	pageHeaders(w)
	w.WriteHeader(status)
	if err := pageTemplate.Execute(w, d); err != nil {
		httpx.Logger(r.Context()).WarnContext(r.Context(), "browserjoin: render page", slog.Any("err", err))
	}
}

// page is step 1: a new code in a form, and the join cookie that ties it
// to this browser. It touches no Session and no other cookie.
func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	if r.Method == http.MethodHead {
		// A HEAD shows the page's headers; only a GET makes a code.
		pageHeaders(w)
		return
	}
	now := h.opts.Now()
	code, browser := codePrefix+rand.Text(), rand.Text()+rand.Text()
	if err := h.opts.Store.newCode(ctx, c.ID, code, httpx.HostOnly(r.Host), browser, now, now.Add(codeLifetime)); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tenant.JoinCookie, Value: browser, Path: "/", MaxAge: int(codeLifetime / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	h.render(w, r, http.StatusOK, pageData{Company: c.Settings.Organization.Name, Code: code, Action: Path})
}

// validCode reports whether s looks like one of our codes.
func validCode(s string) bool {
	return strings.HasPrefix(s, codePrefix) && len(s) <= maxCode && strings.IndexFunc(s[len(codePrefix):], func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) < 0
}

// authorize is step 2: the Personal Agent authorizes a code for its
// Session and, with an access token, for the token's account and scopes.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	sess := sessions.FromContext(ctx)
	grant, err := h.opts.Tokens.Authorize(ctx, r, bearer.Resource{})
	if err != nil {
		bearer.WriteError(w, r, err)
		return
	}
	var body struct {
		Code string `json:"code"`
	}
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxForm}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	invalid := httpx.Errorf(httpx.CodeInvalidRequest, "the code is not one this page issued, has expired or was already authorized; start again at step 1")
	if !validCode(body.Code) {
		httpx.WriteError(w, r, invalid)
		return
	}
	g := &Grant{ClientID: sess.ClientID, SID: sess.SID, Extensions: sess.Extensions}
	if operations.Declared(nil, r.Header.Values(operations.ExtensionsHeader)) {
		// The browser's requests declare what this step declared, by the
		// client metadata or by the header (Operations extension 2).
		g.Extensions = operations.WithVersion(sess.Extensions)
	}
	if grant != nil {
		g.AccountID, g.Scopes = grant.AccountID, grant.Scopes
	}
	ok, err := h.opts.Store.authorize(ctx, c.ID, body.Code, httpx.HostOnly(r.Host), g, h.opts.Now())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if !ok {
		httpx.WriteError(w, r, invalid)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// submit is step 3: the browser posts the code with its join cookie and,
// when everything checks, gets the Session's cookie and goes to the
// website. The first submission uses the code up, whatever the result.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	fail := func(msg string) {
		h.render(w, r, http.StatusBadRequest, pageData{Company: c.Settings.Organization.Name,
			Title: "This browser was not connected", Message: msg})
	}
	if err := r.ParseForm(); err != nil {
		if httpx.BodyTimedOut(r) {
			httpx.WriteError(w, r, err)
			return
		}
		fail("The form could not be read. Go back to your personal agent and start again.")
		return
	}
	code := r.PostForm.Get("code")
	if !validCode(code) {
		fail("The code is not valid. Go back to your personal agent and start again.")
		return
	}
	browser := ""
	if ck, err := r.Cookie(tenant.JoinCookie); err == nil {
		browser = ck.Value
	}
	now := h.opts.Now()
	g, err := h.opts.Store.submit(ctx, c.ID, code, httpx.HostOnly(r.Host), browser, now)
	if errors.Is(err, errCode) {
		fail("The code was not authorized for this browser, was already used or has expired. Go back to your personal agent and start again.")
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	web := &c.Settings.Web
	// Every earlier Session cookie of the browser ends: a join replaces
	// it (spec 6, step 3), also one of another Domain with the same name.
	var previous []string
	for _, ck := range r.CookiesNamed(web.Cookie()) {
		previous = append(previous, ck.Value)
	}
	lifetime := maxWebSession
	if idle := time.Duration(c.Settings.Sessions.IdleTimeoutSeconds) * time.Second; idle > 0 && idle < lifetime {
		lifetime = idle
	}
	token := rand.Text() + rand.Text()
	if err := h.opts.Store.start(ctx, c.ID, token, previous, g, now, now.Add(lifetime)); errors.Is(err, errCode) {
		fail("The Session this browser was to join has ended. Go back to your personal agent and start again.")
		return
	} else if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	session := &http.Cookie{Name: web.Cookie(), Value: token, Path: "/",
		MaxAge: int(lifetime / time.Second), Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode}
	// web.cookie_domain covers the Company's hosts under it; on one of its
	// domains outside it a browser would refuse that Domain, so the
	// cookie is host-only there.
	if d := web.CookieDomain; d != "" {
		if host := httpx.HostOnly(r.Host); host == d || strings.HasSuffix(host, "."+d) {
			session.Domain = d
		}
	}
	http.SetCookie(w, session)
	http.SetCookie(w, &http.Cookie{Name: tenant.JoinCookie, Value: "", Path: "/", MaxAge: -1,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, web.Landing(), http.StatusSeeOther)
}

// idleLimit is how long a Session may go unused before it counts as
// ended, with the slack sessions.Manager allows its last_seen_at.
func idleLimit(c *tenant.Company) time.Duration {
	idle := time.Duration(c.Settings.Sessions.IdleTimeoutSeconds) * time.Second
	if idle <= 0 {
		return 0
	}
	return idle + min(time.Minute, idle/4)
}

// Lookup returns what the request's Session cookie acts for, or nil when
// it carries none that is active (LookupToken).
func (h *Handler) Lookup(ctx context.Context, c *tenant.Company, r *http.Request) (*WebSession, error) {
	// A browser may hold cookies of the same name for several Domains;
	// the active one acts.
	for _, ck := range r.CookiesNamed(c.Settings.Web.Cookie()) {
		ws, err := h.LookupToken(ctx, c, ck.Value)
		if err != nil || ws != nil {
			return ws, err
		}
	}
	return nil, nil
}

// LookupToken returns what a Session cookie's value acts for, or nil. The
// lookup counts as a use of the Session: the website asks because the
// browser is browsing.
func (h *Handler) LookupToken(ctx context.Context, c *tenant.Company, token string) (*WebSession, error) {
	if token == "" || len(token) > 256 {
		return nil, nil
	}
	now := h.opts.Now()
	ws, err := h.opts.Store.lookup(ctx, c.ID, token, idleLimit(c), now)
	if err != nil || ws == nil {
		return ws, err
	}
	return ws, h.opts.Store.touch(ctx, c.ID, ws, now)
}

// End ends the web session of a Session cookie's value: the browser
// signed out on the website. It reports whether one was active.
func (h *Handler) End(ctx context.Context, c *tenant.Company, token string) (bool, error) {
	if token == "" || len(token) > 256 {
		return false, nil
	}
	return h.opts.Store.end(ctx, c.ID, token, h.opts.Now())
}
