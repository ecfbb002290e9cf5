package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/platform"
)

// TestSignInWithPassword signs in over HTTPS with a password: the session
// cookie is a __Host- cookie, SameSite=Strict, HttpOnly, the home page
// sends the member on, and the account page shows who they are with the
// security headers. A wrong password signs nobody in.
func TestSignInWithPassword(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleOwner)

	c := r.client(t)
	resp, body := r.get(t, c, "/account")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out: %s", body)
	require.Equal(t, "/console/"+r.Slug+"/signin", resp.Header.Get("Location"))

	resp = r.post(t, c, "/signin", url.Values{"email": {m.Email}, "password": {"not the password"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.False(t, r.signedIn(c))

	resp = r.post(t, c, "/signin", url.Values{"email": {m.Email}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/", resp.Header.Get("Location"))
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-console-s-"+r.Slug {
			cookie = ck
		}
	}
	require.NotNil(t, cookie, "no session cookie")
	require.True(t, cookie.Secure)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.Equal(t, "/", cookie.Path)
	require.Empty(t, cookie.Domain)

	resp, body = r.get(t, c, "/")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/inbox", resp.Header.Get("Location"))

	resp, body = r.get(t, c, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, m.Email)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))

	// Only a hash of the token is stored.
	var n int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM console_sessions WHERE token_hash = convert_to($1, 'UTF8')`, cookie.Value).Scan(&n))
	require.Zero(t, n)

	resp = r.post(t, c, "/signout", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = r.get(t, c, "/account")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out again")
}

// TestUnsafeRequestsNeedCSRFToken refuses a POST without the session's
// CSRF token, or with another's, and does nothing: the session survives
// a forged sign-out. The sign-in form needs its token too.
func TestUnsafeRequestsNeedCSRFToken(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c := r.signIn(t, console.RoleAgent)
	other := r.signIn(t, console.RoleAgent)

	resp := r.postRaw(t, c, "/signout", url.Values{})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = r.postRaw(t, c, "/signout", url.Values{"csrf": {r.csrf(t, other)}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = r.get(t, c, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode, "still signed in")

	// Sent from another origin, even a right token is refused.
	req, err := http.NewRequest(http.MethodPost, r.url("/signout"), nil)
	require.NoError(t, err)
	req.Header.Set("X-CSRF-Token", r.csrf(t, c))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = c.Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = r.get(t, c, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode, "still signed in")

	m, password := r.member(t, console.RoleOwner)
	fresh := r.client(t)
	resp = r.postRaw(t, fresh, "/signin", url.Values{"email": {m.Email}, "password": {password}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.False(t, r.signedIn(fresh))
}

// TestSignInThrottled locks an email after repeated wrong passwords, as
// accounts are: then even the right password is refused, with
// Retry-After, without being checked.
func TestSignInThrottled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleOwner)
	c := r.client(t)
	var resp *http.Response
	for range 12 {
		resp = r.passwordSignIn(t, c, m.Email, "a wrong password")
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp = r.passwordSignIn(t, c, m.Email, password)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.False(t, r.signedIn(c))
}

// TestHostileSignIn: an oversized form, text that is no email and a flood
// from one address are refused without signing anyone in.
func TestHostileSignIn(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleOwner)
	c := r.client(t)
	resp := r.post(t, c, "/signin", url.Values{"email": {m.Email}, "password": {password},
		"padding": {strings.Repeat("x", 70<<10)}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	for _, email := range []string{m.Email + "\x00", "\xff" + m.Email, strings.Repeat("a", 300) + "@example.com"} {
		resp = r.passwordSignIn(t, c, email, password)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q", email)
	}
	resp = r.passwordSignIn(t, c, m.Email, strings.Repeat("p", 300))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.False(t, r.signedIn(c))

	// The signed-out pages count against the client's address.
	patched := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.Slug,
		map[string]any{"rate_limits": map[string]any{"per_address": 3}})
	require.Equal(t, http.StatusOK, patched.Status, "%s", patched.Body)
	limited := false
	for range 10 {
		if resp, _ := r.get(t, c, "/signin"); resp.StatusCode == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	require.True(t, limited)
}

// TestSignInRates: password sign-ins at the console count against the
// Company's sign-in rates, which the issuer's pages share.
func TestSignInRates(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, func(o *platform.Options) {
		o.LoginRates = issuer.LoginRates{PerAddress: 2, PerCompany: 100}
	})
	m, password := r.member(t, console.RoleOwner)
	c := r.client(t)
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, r.passwordSignIn(t, c, m.Email, "wrong password").StatusCode)
	}
	resp := r.passwordSignIn(t, c, m.Email, password)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.False(t, r.signedIn(c))
}
