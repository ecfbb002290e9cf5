package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
)

var totpSecret = regexp.MustCompile(`<code id="totp-secret">([A-Z2-7]+)</code>`)

// TestPasswordAndTOTP: at a Company that requires a second factor, a
// member without one sets up TOTP to finish signing in; the next sign-in
// asks for a code, refuses a wrong one and a code used already, and a
// pending session opens nothing else.
func TestPasswordAndTOTP(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.requireSecondFactor(t)
	m, password := r.member(t, console.RoleAgent)

	c := r.client(t)
	resp := r.passwordSignIn(t, c, m.Email, password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/signin/second", resp.Header.Get("Location"))
	// The password alone opens nothing.
	resp, _ = r.get(t, c, "/account")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/signin/second", resp.Header.Get("Location"))

	resp, body := r.get(t, c, "/signin/second")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	match := totpSecret.FindStringSubmatch(body)
	require.NotNil(t, match, "no TOTP secret offered: %s", body)
	secret := match[1]
	require.Contains(t, body, "otpauth://totp/")

	resp = r.post(t, c, "/signin/second/enroll", url.Values{"code": {"000000"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// The page shows the same secret until it is confirmed.
	_, body = r.get(t, c, "/signin/second")
	require.Equal(t, secret, totpSecret.FindStringSubmatch(body)[1])
	now := time.Now()
	resp = r.post(t, c, "/signin/second/enroll", url.Values{"code": {console.TOTPCode(secret, now)}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/", resp.Header.Get("Location"))
	resp, body = r.get(t, c, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "TOTP is set up")

	// Next time: password, then a code.
	c2 := r.client(t)
	resp = r.passwordSignIn(t, c2, m.Email, password)
	require.Equal(t, "/console/"+r.Slug+"/signin/second", resp.Header.Get("Location"))
	resp = r.post(t, c2, "/signin/second/totp", url.Values{"code": {console.TOTPCode(secret, now)}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a code used already")
	resp = r.post(t, c2, "/signin/second/totp", url.Values{"code": {console.TOTPCode(secret, now.Add(console.TOTPStep))}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = r.get(t, c2, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A member with TOTP is asked for it even where the Company does not
	// require it; five wrong codes end the pending session.
	patched := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.Slug,
		map[string]any{"console": map[string]any{"require_second_factor": false}})
	require.Equal(t, http.StatusOK, patched.Status, "%s", patched.Body)
	c3 := r.client(t)
	resp = r.passwordSignIn(t, c3, m.Email, password)
	require.Equal(t, "/console/"+r.Slug+"/signin/second", resp.Header.Get("Location"))
	for range 5 {
		resp = r.post(t, c3, "/signin/second/totp", url.Values{"code": {"123456"}})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	resp, _ = r.get(t, c3, "/signin/second")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/signin", resp.Header.Get("Location"), "the pending session ended")

	require.Contains(t, r.auditActions(t, m.ID), "POST /console/{slug}/signin/second/enroll")
}

// TestSetUpTOTPFromAccount: a member sets up TOTP on their account page
// (a wrong code stores nothing), and their next password sign-in asks for
// a code although the Company does not require one.
func TestSetUpTOTPFromAccount(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleAuditor)
	c := r.signInWith(t, m.Email, password)
	resp, body := r.get(t, c, "/account/totp")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	secret := totpSecret.FindStringSubmatch(body)[1]

	resp = r.post(t, c, "/account/totp", url.Values{"code": {"12345"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_, body = r.get(t, c, "/account")
	require.Contains(t, body, "Set up an authenticator app")

	resp = r.post(t, c, "/account/totp", url.Values{"code": {console.TOTPCode(secret, time.Now())}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/account?done=totp", resp.Header.Get("Location"))

	again := r.client(t)
	resp = r.passwordSignIn(t, again, m.Email, password)
	require.Equal(t, "/console/"+r.Slug+"/signin/second", resp.Header.Get("Location"))
	require.Contains(t, r.auditActions(t, m.ID), "POST /console/{slug}/account/totp")
}
