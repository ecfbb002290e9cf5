package console

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
)

// accountPage is the account page's data.
type accountPage struct {
	Passkeys []Passkey
	HasTOTP  bool
	Notice   string
	// Reauth: the member must sign in again to change their second
	// factors (reauth.go).
	Reauth bool
}

// account shows the member their own account: passkeys, TOTP, sign-out
// everywhere.
func (c *Console) account(w http.ResponseWriter, r *http.Request) {
	c.renderAccount(w, r, http.StatusOK, r.URL.Query().Get("done"))
}

// accountNotices are the messages a finished action shows, by ?done=.
var accountNotices = map[string]string{
	"totp":    "TOTP is set up: sign-ins with your password now ask for a code.",
	"passkey": "The passkey is added.",
	"removed": "The passkey is removed.",
}

func (c *Console) renderAccount(w http.ResponseWriter, r *http.Request, status int, done string) {
	m := memberFrom(r.Context())
	keys, err := c.staff.passkeys(r.Context(), m)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	totp, _, err := c.staff.factors(r.Context(), m)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	reauth, err := c.mustReauthenticate(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, status, "account", accountPage{Passkeys: keys, HasTOTP: totp, Notice: accountNotices[done], Reauth: reauth})
}

// totpPage shows a new TOTP secret to set up.
func (c *Console) totpPage(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	e, err := c.proposeTOTP(r, m, c.base(m.CompanySlug)+"/account/totp")
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "totp", e)
}

// setUpTOTP confirms the secret shown with one of its codes and stores it.
func (c *Console) setUpTOTP(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	err := c.confirmTOTP(r, m, r.PostForm.Get("code"))
	switch {
	case errors.Is(err, errWrongCode):
		e, err := c.proposeTOTP(r, m, c.base(m.CompanySlug)+"/account/totp")
		if err != nil {
			c.fail(w, r, err)
			return
		}
		e.Error = "The code is wrong. Check the secret in your app and try again."
		c.render(w, r, http.StatusBadRequest, "totp", e)
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, c.base(m.CompanySlug)+"/account?done=totp", http.StatusSeeOther)
}

// removePasskey deletes one of the member's own passkeys.
func (c *Console) removePasskey(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err == nil {
		err = c.staff.removePasskey(r.Context(), m, id)
	}
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, strconv.ErrSyntax) || errors.Is(err, strconv.ErrRange) {
			c.renderError(w, r, http.StatusNotFound, "There is no such passkey.")
			return
		}
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, c.base(m.CompanySlug)+"/account?done=removed", http.StatusSeeOther)
}

// signOutEverywhere ends every session of the member, this one included.
func (c *Console) signOutEverywhere(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	if err := c.staff.deleteSessions(r.Context(), m.CompanyID, m.ID); err != nil {
		c.fail(w, r, err)
		return
	}
	setCookie(w, sessionCookie(m.CompanySlug), "")
	http.Redirect(w, r, c.base(m.CompanySlug)+"/signin", http.StatusSeeOther)
}
