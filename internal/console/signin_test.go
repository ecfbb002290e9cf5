package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
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
