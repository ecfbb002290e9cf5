package console

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// cookieSecret is the secret of the request's session or pre-session
// cookie, which its CSRF token and ceremonies are bound to.
func cookieSecret(r *http.Request) string {
	s, _ := r.Context().Value(csrfKey{}).(string)
	return s
}

// needsSecondFactor reports whether m, having given the right password,
// must also prove a second factor: always when they have one, and when
// their Company requires it.
func (c *Console) needsSecondFactor(ctx context.Context, co *tenant.Company, m Member) (bool, error) {
	totp, passkeys, err := c.staff.factors(ctx, m)
	return co.Settings.Console.RequireSecondFactor || totp || passkeys > 0, err
}

// completeSignIn turns the request's pending session into a signed-in
// one under a new cookie.
func (c *Console) completeSignIn(w http.ResponseWriter, r *http.Request, m Member) error {
	token := newToken()
	if err := c.staff.promote(r.Context(), m, tokenHash(cookieSecret(r)), tokenHash(token), c.now()); err != nil {
		return err
	}
	setCookie(w, sessionCookie(m.CompanySlug), token)
	return nil
}

// secondPage is the second factor page's data.
type secondPage struct {
	HasTOTP    bool
	HasPasskey bool
	// Enroll is set when the member has no second factor and must set up
	// TOTP now.
	Enroll *totpEnrolment
	Error  string
}

// totpEnrolment is a TOTP secret proposed to a member, shown once for
// their authenticator app.
type totpEnrolment struct {
	Secret string
	// URI is the otpauth URI, which we build (html/template would
	// otherwise refuse its scheme).
	URI    template.URL
	Action string
	Error  string
	// CSRF is the request's CSRF token, for the form.
	CSRF string
}

func (c *Console) secondFactorPage(w http.ResponseWriter, r *http.Request) {
	c.renderSecond(w, r, http.StatusOK, "")
}

// renderSecond renders the second factor page: the member's factors, or
// a new TOTP secret to set up when they have none.
func (c *Console) renderSecond(w http.ResponseWriter, r *http.Request, status int, problem string) {
	m := memberFrom(r.Context())
	totp, passkeys, err := c.staff.factors(r.Context(), m)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page := secondPage{HasTOTP: totp, HasPasskey: passkeys > 0, Error: problem}
	if !totp && passkeys == 0 {
		if page.Enroll, err = c.proposeTOTP(r, m, c.base(m.CompanySlug)+"/signin/second/enroll"); err != nil {
			c.fail(w, r, err)
			return
		}
		page.Enroll.Error = problem
	}
	c.render(w, r, status, "second", page)
}

// proposeTOTP shows m a TOTP secret to set up: the one proposed to this
// browser before, until it expires or is confirmed, or a new one, kept
// sealed with the request's cookie until a code confirms it.
func (c *Console) proposeTOTP(r *http.Request, m Member, action string) (*totpEnrolment, error) {
	key, row := ceremonyKey(ceremonyTOTP, cookieSecret(r)), strconv.FormatInt(m.ID, 10)
	var secret []byte
	cer, err := c.staff.peekCeremony(r.Context(), m.CompanyID, key, c.now())
	switch {
	case err == nil && cer.StaffID == m.ID && cer.TOTP != nil:
		if secret, err = c.opts.Sealer.Open(r.Context(), m.CompanyID, sealing.StaffTOTPSecret, row, cer.TOTP); err != nil {
			return nil, err
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return nil, err
	default:
		secret = newTOTPSecret()
		sealed, err := c.opts.Sealer.Seal(r.Context(), m.CompanyID, sealing.StaffTOTPSecret, row, secret)
		if err != nil {
			return nil, err
		}
		if err := c.staff.saveCeremony(r.Context(), m.CompanyID, key, ceremony{StaffID: m.ID, TOTP: sealed}, c.now()); err != nil {
			return nil, err
		}
	}
	co := tenant.FromContext(r.Context())
	issuer := "poppyhost " + co.Slug
	return &totpEnrolment{Secret: totpEncoding.EncodeToString(secret), URI: template.URL(totpURI(secret, issuer, m.Email)),
		Action: action, CSRF: csrfFrom(r.Context())}, nil
}

// errWrongCode: the TOTP code does not match, or was used already.
var errWrongCode = errors.New("console: wrong TOTP code")

// confirmTOTP stores the secret proposed to m if code is one of its
// codes.
func (c *Console) confirmTOTP(r *http.Request, m Member, code string) error {
	cer, err := c.staff.peekCeremony(r.Context(), m.CompanyID, ceremonyKey(ceremonyTOTP, cookieSecret(r)), c.now())
	if errors.Is(err, ErrNotFound) || (err == nil && (cer.StaffID != m.ID || cer.TOTP == nil)) {
		return errWrongCode
	}
	if err != nil {
		return err
	}
	secret, err := c.opts.Sealer.Open(r.Context(), m.CompanyID, sealing.StaffTOTPSecret, strconv.FormatInt(m.ID, 10), cer.TOTP)
	if err != nil {
		return err
	}
	step, ok := totpMatch(secret, normalizeCode(code), c.now(), 0)
	if !ok {
		return errWrongCode
	}
	if _, err := c.staff.takeCeremony(r.Context(), m.CompanyID, ceremonyKey(ceremonyTOTP, cookieSecret(r)), c.now()); err != nil {
		return errWrongCode
	}
	return c.staff.setTOTP(r.Context(), m, cer.TOTP, step)
}

// checkTOTP reports whether code is a code of m's TOTP secret not used
// before, and if so marks it used.
func (c *Console) checkTOTP(r *http.Request, m Member, code string) error {
	sealed, last, err := c.staff.totpSecret(r.Context(), m)
	if errors.Is(err, ErrNotFound) {
		return errWrongCode
	}
	if err != nil {
		return err
	}
	secret, err := c.opts.Sealer.Open(r.Context(), m.CompanyID, sealing.StaffTOTPSecret, strconv.FormatInt(m.ID, 10), sealed)
	if err != nil {
		return err
	}
	step, ok := totpMatch(secret, normalizeCode(code), c.now(), last)
	if !ok {
		return errWrongCode
	}
	accepted, err := c.staff.acceptTOTPStep(r.Context(), m, step)
	if err != nil {
		return err
	}
	if !accepted {
		return errWrongCode
	}
	return nil
}

// normalizeCode drops the spaces people type inside a code.
func normalizeCode(code string) string { return strings.ReplaceAll(strings.TrimSpace(code), " ", "") }

// maxSecondFailures is how many wrong codes a pending session may send
// before it ends: the password must then be given again, and password
// attempts are throttled, so guessing codes is as slow as guessing
// passwords.
const maxSecondFailures = 5

// secondTOTP completes a password sign-in with a TOTP code.
func (c *Console) secondTOTP(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	err := c.checkTOTP(r, m, r.PostForm.Get("code"))
	switch {
	case errors.Is(err, errWrongCode):
		c.wrongCode(w, r, m, "The code is wrong or was used already.")
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	c.finishSecond(w, r, m)
}

// wrongCode counts a wrong code against the pending session, which ends
// at maxSecondFailures, and says so.
func (c *Console) wrongCode(w http.ResponseWriter, r *http.Request, m Member, message string) {
	ended, err := c.staff.failSecond(r.Context(), m.CompanyID, tokenHash(cookieSecret(r)), maxSecondFailures)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if ended {
		setCookie(w, sessionCookie(m.CompanySlug), "")
		c.render(w, r, http.StatusUnauthorized, "signin", signInForm{Email: m.Email,
			Error: "Too many wrong codes. Sign in again."})
		return
	}
	c.renderSecond(w, r, http.StatusUnauthorized, message)
}

// secondEnroll completes a password sign-in by setting up TOTP, for a
// member of a Company that requires a second factor who has none.
func (c *Console) secondEnroll(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	err := c.confirmTOTP(r, m, r.PostForm.Get("code"))
	switch {
	case errors.Is(err, errWrongCode):
		c.wrongCode(w, r, m, "The code is wrong. Check the secret and try again.")
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	c.finishSecond(w, r, m)
}

func (c *Console) finishSecond(w http.ResponseWriter, r *http.Request, m Member) {
	if err := c.completeSignIn(w, r, m); err != nil {
		if errors.Is(err, ErrNotFound) {
			http.Redirect(w, r, c.base(m.CompanySlug)+"/signin", http.StatusSeeOther)
			return
		}
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, c.base(m.CompanySlug)+"/", http.StatusSeeOther)
}
