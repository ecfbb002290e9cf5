package console

import (
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// signInForm is the sign-in page's data.
type signInForm struct {
	Email string
	Error string
}

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "signin", signInForm{})
}

// signIn checks an email and password and starts a session. Wrong
// emails and wrong passwords get the same answer.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	co := tenant.FromContext(r.Context())
	form := signInForm{Email: r.PostForm.Get("email")}
	email, problem := NormalizeEmail(form.Email)
	password := r.PostForm.Get("password")
	if problem != "" || password == "" || len(password) > accounts.MaxPassword {
		form.Error = "Enter your email and password."
		c.render(w, r, http.StatusBadRequest, "signin", form)
		return
	}
	if c.opts.LoginAllowed != nil && !c.opts.LoginAllowed(w, r) {
		form.Error = "Too many sign-in attempts. Wait a moment and try again."
		c.render(w, r, http.StatusTooManyRequests, "signin", form)
		return
	}
	m, err := c.staff.Authenticate(r.Context(), co, email, password)
	var throttled *accounts.ThrottledError
	var busy *accounts.BusyError
	switch {
	case errors.Is(err, ErrNotFound):
		form.Error = "The email or password is wrong."
		c.render(w, r, http.StatusUnauthorized, "signin", form)
		return
	case errors.As(err, &throttled):
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(throttled.RetryAfter.Seconds()))))
		form.Error = "Too many failed attempts. Wait a moment and try again."
		c.render(w, r, http.StatusTooManyRequests, "signin", form)
		return
	case errors.As(err, &busy):
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(busy.RetryAfter.Seconds()))))
		form.Error = "The console is busy. Try again in a moment."
		c.render(w, r, http.StatusServiceUnavailable, "signin", form)
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	c.passwordAccepted(w, r, co, m)
}

// passwordAccepted starts the session of a member who gave their
// password and sends them on: to the second factor when they need one,
// or into the console.
func (c *Console) passwordAccepted(w http.ResponseWriter, r *http.Request, co *tenant.Company, m Member) {
	second, err := c.needsSecondFactor(r.Context(), co, m)
	if err == nil {
		err = c.startSession(w, r, m, second)
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	to := c.base(m.CompanySlug) + "/"
	if second {
		to = c.base(m.CompanySlug) + "/signin/second"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// startSession stores a new session of m and sets its cookie: a new
// token at every sign-in, so no token known before it is worth anything.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, m Member, secondFactor bool) error {
	token := newToken()
	if err := c.staff.createSession(r.Context(), m, tokenHash(token), secondFactor, c.now()); err != nil {
		return err
	}
	setCookie(w, sessionCookie(m.CompanySlug), token)
	return nil
}

// signOut ends this session.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	ck, err := r.Cookie(sessionCookie(m.CompanySlug))
	if err == nil {
		if err := c.staff.deleteSession(r.Context(), m.CompanyID, tokenHash(ck.Value)); err != nil {
			c.fail(w, r, err)
			return
		}
	}
	setCookie(w, sessionCookie(m.CompanySlug), "")
	http.Redirect(w, r, c.base(m.CompanySlug)+"/signin", http.StatusSeeOther)
}
