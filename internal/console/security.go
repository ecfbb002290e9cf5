package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// contentSecurityPolicy allows the console's own styles, scripts and
// connections only: no inline script, no framing, forms posted only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// headers sets the security headers of every console answer. Pages show
// customer data, so none is stored by browsers or caches (asset answers
// override Cache-Control).
func (c *Console) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.PageHeaders(w.Header(), contentSecurityPolicy)
		w.Header().Set("Strict-Transport-Security", "max-age=63072000")
		next.ServeHTTP(w, r)
	})
}

// company loads the Company of the URL's slug, or answers the 404 page.
func (c *Console) company(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slug := chi.URLParam(r, "slug")
		if !tenant.ValidSlug(slug) {
			c.renderError(w, r, http.StatusNotFound, "There is no such page.")
			return
		}
		co, err := c.opts.Companies.Get(r.Context(), slug)
		switch {
		case errors.Is(err, tenant.ErrNotFound):
			c.renderError(w, r, http.StatusNotFound, "There is no such page.")
			return
		case err != nil:
			c.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(tenant.WithCompany(r.Context(), co)))
	})
}

// Cookie names: one session and one pre-session cookie per Company, so
// that a person who is staff of two Companies can be signed in to both.
// __Host- makes browsers keep them to this host, Secure, with Path=/.
func sessionCookie(slug string) string { return "__Host-console-s-" + slug }
func preCookie(slug string) string     { return "__Host-console-p-" + slug }

// newToken returns 32 random bytes, base64url, for a cookie or link.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// tokenHash is what the database keeps of a token.
func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// setCookie sets a __Host- cookie: Secure, HttpOnly, SameSite=Strict,
// Path=/, for the browser session. An empty value deletes it.
func setCookie(w http.ResponseWriter, name, value string) {
	ck := &http.Cookie{Name: name, Value: value, Path: "/", Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if value == "" {
		ck.MaxAge = -1
	}
	http.SetCookie(w, ck)
}

type csrfKey struct{}

// withCSRF returns ctx carrying the secret the request's CSRF token is
// derived from: its session's token, or its pre-session cookie's.
func withCSRF(ctx context.Context, secret string) context.Context {
	return context.WithValue(ctx, csrfKey{}, secret)
}

// csrfFrom is the CSRF token forms of the request carry.
func csrfFrom(ctx context.Context) string {
	secret, _ := ctx.Value(csrfKey{}).(string)
	if secret == "" {
		return ""
	}
	return csrfToken(secret)
}

// csrfToken derives the CSRF token of a cookie's secret. It reveals
// nothing of the secret, and nobody without the cookie can compute it.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// maxForm bounds a console form's body.
const maxForm = 64 << 10

// crossOrigin refuses unsafe requests that browsers say come from another
// origin (Sec-Fetch-Site, Origin).
var crossOrigin = http.NewCrossOriginProtection()

// csrf refuses an unsafe request (403, nothing done) unless it carries
// the CSRF token of its cookie, as form field "csrf" or header
// X-CSRF-Token, and comes from the console's own origin. It reads forms
// of at most maxForm bytes, and refuses (400) one that is not text
// PostgreSQL takes.
func (c *Console) csrf(next http.Handler) http.Handler {
	forbidden := func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, http.StatusForbidden, "This form has expired or did not come from the console. Reload the page and try again.")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if err := crossOrigin.Check(r); err != nil {
			forbidden(w, r)
			return
		}
		// Bounded whether the token comes in the form or the header: a
		// handler's r.PostFormValue would otherwise read any size.
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		// A form's text goes on to the database: refuse what PostgreSQL
		// does not take (a NUL byte, bytes that are not UTF-8) here, for
		// every form, as c.text does for the query.
		if err := r.ParseForm(); err != nil || !validText(r.PostForm) {
			c.renderError(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		got := r.Header.Get("X-CSRF-Token")
		if got == "" {
			got = r.PostForm.Get("csrf")
		}
		want := csrfFrom(r.Context())
		if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			forbidden(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// validText reports whether every name and value of vs is text that
// PostgreSQL takes (httpx.ValidText).
func validText(vs url.Values) bool {
	for name, values := range vs {
		if !httpx.ValidText(name) {
			return false
		}
		for _, v := range values {
			if !httpx.ValidText(v) {
				return false
			}
		}
	}
	return true
}

// text refuses (400, nothing done) a request whose path or query is not
// text PostgreSQL takes, as httpx.RequireText does for the APIs, with the
// console's error page.
func (c *Console) text(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpx.ValidText(r.URL.Path) || !validText(r.URL.Query()) {
			c.renderError(w, r, http.StatusBadRequest, "The address is not valid.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// preSession gives a signed-out browser its pre-session cookie, whose
// secret binds the CSRF tokens of the sign-in forms (so that nobody can
// sign a victim in to their own account) and the WebAuthn ceremonies.
func (c *Console) preSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := preCookie(chi.URLParam(r, "slug"))
		secret := ""
		if ck, err := r.Cookie(name); err == nil && len(ck.Value) == 43 {
			secret = ck.Value
		} else {
			secret = newToken()
			setCookie(w, name, secret)
		}
		next.ServeHTTP(w, r.WithContext(withCSRF(r.Context(), secret)))
	})
}

// authenticate lets through requests with a signed-in session of the
// URL's Company, with the member in the context (memberFrom) and named as
// the actor of any change the audit log records. Others are sent to the
// sign-in page (or the second factor), or refused 403 for unsafe methods.
func (c *Console) authenticate(next http.Handler) http.Handler { return c.withSession(false, next) }

// pending is authenticate for the second factor's routes: it lets through
// only sessions that have passed the password and wait for their second
// factor.
func (c *Console) pending(next http.Handler) http.Handler { return c.withSession(true, next) }

func (c *Console) withSession(pending bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		co := tenant.FromContext(r.Context())
		ck, err := r.Cookie(sessionCookie(co.Slug))
		if err != nil {
			c.signInFirst(w, r, "/signin")
			return
		}
		s, err := c.staff.session(r.Context(), co, tokenHash(ck.Value), c.now(), c.opts.IdleTimeout, c.opts.AbsoluteTimeout)
		switch {
		case errors.Is(err, ErrNotFound):
			setCookie(w, sessionCookie(co.Slug), "")
			c.signInFirst(w, r, "/signin")
			return
		case err != nil:
			c.fail(w, r, err)
			return
		case s.secondFactor && !pending:
			c.signInFirst(w, r, "/signin/second")
			return
		case !s.secondFactor && pending:
			c.signInFirst(w, r, "/")
			return
		}
		ctx := withCSRF(withMember(r.Context(), s.member), ck.Value)
		ctx = context.WithValue(ctx, signedInKey{}, s.signedInAt)
		if pending {
			ctx = context.WithValue(ctx, pendingKey{}, true)
		}
		audit.SetActor(ctx, actorOf(s.member))
		audit.SetCompany(ctx, co.ID, co.Slug)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type pendingKey struct{}

type signedInKey struct{}

// signedInAt is when the request's session signed in.
func signedInAt(ctx context.Context) time.Time {
	t, _ := ctx.Value(signedInKey{}).(time.Time)
	return t
}

// isPending reports whether the request's session waits for its second
// factor: the layout then shows no navigation.
func isPending(ctx context.Context) bool {
	p, _ := ctx.Value(pendingKey{}).(bool)
	return p
}

// signInFirst answers a request that needs another session: GET and HEAD
// go to path (of the console), anything else is refused.
func (c *Console) signInFirst(w http.ResponseWriter, r *http.Request, path string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.renderError(w, r, http.StatusForbidden, "You are signed out. Sign in and try again.")
		return
	}
	http.Redirect(w, r, c.base(chi.URLParam(r, "slug"))+path, http.StatusSeeOther)
}
