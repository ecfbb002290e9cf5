package issuer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/issuer/pages"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Cookies of the issuer's pages. Every Company's issuer shares the
// platform's host, so they are scoped by path to /t/{slug}/ and cannot use
// the __Host- prefix, which requires Path=/.
const (
	loginCookie = "__Secure-poppyhost-login"
	csrfCookie  = "__Secure-poppyhost-csrf"
	// loginLifetime is how long a browser stays signed in to the pages.
	loginLifetime = 12 * time.Hour
	maxPageForm   = 16 << 10
)

func (s *Server) cookiePath(c *tenant.Company) string { return "/t/" + c.Slug + "/" }

func (s *Server) brand(c *tenant.Company) pages.Brand {
	o := c.Settings.Organization
	return pages.Brand{CompanyName: o.Name, Domain: o.Domain, LogoURI: o.LogoURI}
}

// messagePage answers with a page saying what went wrong or what happened.
func (s *Server) messagePage(w http.ResponseWriter, r *http.Request, status int, title, body string) {
	pages.Render(w, status, pages.Message{Brand: s.brand(tenant.FromContext(r.Context())), Title: title, Body: body})
}

// csrfToken returns the form token of this browser, setting its cookie
// when it has none. The token is an HMAC of the cookie under the
// Company's secret, so a page of one Company cannot forge another's.
func (s *Server) csrfToken(w http.ResponseWriter, r *http.Request) (string, error) {
	c := tenant.FromContext(r.Context())
	value := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 26 {
		value = ck.Value
	} else {
		value = rand.Text()
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: value, Path: s.cookiePath(c),
			Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	return s.csrfFor(r, value)
}

func (s *Server) csrfFor(r *http.Request, cookie string) (string, error) {
	c := tenant.FromContext(r.Context())
	secret, err := s.keys.Secret(r.Context(), c.ID)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("csrf\x00" + cookie))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// checkCSRF reports whether a POSTed form carries this browser's token.
func (s *Server) checkCSRF(r *http.Request) (bool, error) {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) < 26 {
		return false, nil
	}
	want, err := s.csrfFor(r, ck.Value)
	if err != nil {
		return false, err
	}
	got := r.PostForm.Get("csrf")
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1, nil
}

// crossOrigin refuses POSTs that a browser marks as coming from another
// origin (Sec-Fetch-Site, else Origin against Host). Requests with neither
// header, such as from browsers too old to send them, rely on the CSRF
// token alone.
var crossOrigin = http.NewCrossOriginProtection()

// parsePageForm reads a page's POSTed form and checks that it comes from
// the page itself: same origin, and this browser's CSRF token. On failure
// it has answered.
func (s *Server) parsePageForm(w http.ResponseWriter, r *http.Request) bool {
	if err := crossOrigin.Check(r); err != nil {
		s.messagePage(w, r, http.StatusForbidden, "This form was sent from another site",
			"For your safety the form was not accepted. Go back to the sign-in page and try again.")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxPageForm)
	if err := r.ParseForm(); err != nil {
		if slowForm(w, r, err) {
			return false
		}
		s.messagePage(w, r, http.StatusBadRequest, "Something went wrong", "The form could not be read. Go back and try again.")
		return false
	}
	ok, err := s.checkCSRF(r)
	if err != nil {
		s.failPage(w, r, err)
		return false
	}
	if !ok {
		s.messagePage(w, r, http.StatusForbidden, "This form has expired",
			"For your safety the form was not accepted. Go back, reload the page and try again.")
		return false
	}
	return true
}

func (s *Server) failPage(w http.ResponseWriter, r *http.Request, err error) {
	logFailure(r, err)
	s.messagePage(w, r, http.StatusInternalServerError, "Something went wrong", "Please try again in a moment.")
}

// currentAccount returns the account this browser is signed in to, or
// nil.
func (s *Server) currentAccount(r *http.Request) (*accounts.Account, error) {
	ck, err := r.Cookie(loginCookie)
	if err != nil || ck.Value == "" {
		return nil, nil
	}
	return s.store.loginAccount(r.Context(), tenant.FromContext(r.Context()).ID, ck.Value, s.now())
}

// login checks the login form; on success the browser is signed in. A
// wrong password or a lock gives a message for the User, never which of
// username and password was wrong, and the page's status: 400 for a wrong
// password, 429 with Retry-After over a rate or while the username is
// locked, 503 with Retry-After when password checking is at its limit.
func (s *Server) login(w http.ResponseWriter, r *http.Request) (*accounts.Account, string, int, error) {
	c := tenant.FromContext(r.Context())
	if !s.LoginAllowed(w, r) {
		return nil, "Too many sign-in attempts. Try again in a minute.", http.StatusTooManyRequests, nil
	}
	username := r.PostForm.Get("username")
	if !storableText(username) {
		// PostgreSQL text refuses it, and no account has it.
		return nil, "The username or password is not right.", http.StatusBadRequest, nil
	}
	a, err := s.accounts.Authenticate(r.Context(), c.ID, username, r.PostForm.Get("password"))
	var (
		throttled *accounts.ThrottledError
		busy      *accounts.BusyError
	)
	switch {
	case errors.As(err, &throttled):
		secs := retryAfter(w, throttled.RetryAfter)
		unit := "seconds"
		if secs == 1 {
			unit = "second"
		}
		return nil, fmt.Sprintf("Too many failed attempts. Try again in %d %s.", secs, unit), http.StatusTooManyRequests, nil
	case errors.As(err, &busy):
		retryAfter(w, busy.RetryAfter)
		return nil, "Signing in is very busy right now. Try again in a moment.", http.StatusServiceUnavailable, nil
	case errors.Is(err, accounts.ErrNotFound):
		return nil, "The username or password is not right.", http.StatusBadRequest, nil
	case err != nil:
		return nil, "", 0, err
	}
	token := rand.Text() + rand.Text()
	now := s.now()
	if err := s.store.createLogin(r.Context(), c.ID, token, a.ID, now, now.Add(loginLifetime)); err != nil {
		return nil, "", 0, err
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: token, Path: s.cookiePath(c),
		MaxAge: int(loginLifetime.Seconds()), Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	return &a, "", http.StatusOK, nil
}

// retryAfter sets Retry-After to d in whole seconds, at least one, and
// returns them.
func retryAfter(w http.ResponseWriter, d time.Duration) int {
	secs := max(1, int(math.Ceil(d.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
}

// signOut ends this browser's sign-in to the pages.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) error {
	c := tenant.FromContext(r.Context())
	if ck, err := r.Cookie(loginCookie); err == nil {
		if err := s.store.deleteLogin(r.Context(), c.ID, ck.Value); err != nil {
			return err
		}
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: s.cookiePath(c), MaxAge: -1,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	return nil
}

// scopeViews describes requested scopes for the consent page.
func scopeViews(c *tenant.Company, requested []string) []pages.Scope {
	out := make([]pages.Scope, 0, len(requested))
	for _, name := range requested {
		v := pages.Scope{Name: name, Description: c.Settings.Auth.Scopes[name], Checked: true}
		if h, ok := c.Settings.Auth.ScopeHints[name]; ok {
			v.Changes, v.PersonalData = h.Changes, h.PersonalData
		}
		out = append(out, v)
	}
	return out
}

// approvedScopes are the ticked scopes that were requested, in the
// requested order: a User can leave scopes out, never add one (spec 4.7).
func approvedScopes(ticked, requested []string) []string {
	var out []string
	for _, s := range requested {
		for _, t := range ticked {
			if s == t {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// signedIn returns the account this browser is signed in to, signing it
// in when the form posted is the login form, and the action to take next
// ("" right after a login). Otherwise it shows the login page with intro
// and returns false.
func (s *Server) signedIn(w http.ResponseWriter, r *http.Request, action, intro string) (*accounts.Account, string, bool) {
	acct, err := s.currentAccount(r)
	if err != nil {
		s.failPage(w, r, err)
		return nil, "", false
	}
	if acct != nil {
		return acct, action, true
	}
	msg, status := "", http.StatusOK
	if action == "login" {
		if acct, msg, status, err = s.login(w, r); err != nil {
			s.failPage(w, r, err)
			return nil, "", false
		}
	}
	if acct == nil {
		s.loginPage(w, r, status, msg, intro)
		return nil, "", false
	}
	return acct, "", true
}

// pageMethod answers a method the pages do not take (GET, HEAD and POST)
// with a 405 page, and reports whether the request may go on.
func (s *Server) pageMethod(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
		return true
	}
	w.Header().Set("Allow", "GET, HEAD, POST")
	s.messagePage(w, r, http.StatusMethodNotAllowed, "Not allowed", "Use GET or POST.")
	return false
}

// storableText says whether PostgreSQL text can hold v: valid UTF-8
// without U+0000.
func storableText(v string) bool {
	return utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}
