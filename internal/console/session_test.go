package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
)

// sessionCookieOf is c's session cookie at the rig Company.
func (r *rig) sessionCookieOf(t *testing.T, c *http.Client) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(r.url("/"))
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "__Host-console-s-"+r.Slug {
			return ck
		}
	}
	t.Fatal("no session cookie")
	return nil
}

// TestSessionTimeouts ends a session unused for longer than the idle
// timeout, and one older than the absolute timeout however used.
func TestSessionTimeouts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, column, age string }{
		{"idle", "last_seen_at", "31 minutes"},
		{"absolute", "created_at", "12 hours 1 minute"},
	} {
		c := r.signIn(t, console.RoleAgent)
		resp, _ := r.get(t, c, "/account")
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.name)
		_, err := r.env.Pool.Exec(ctx, `UPDATE console_sessions SET `+tc.column+` = now() - $1::interval
			WHERE company_id = $2`, tc.age, r.ID)
		require.NoError(t, err)
		resp, _ = r.get(t, c, "/account")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, tc.name)
		require.Equal(t, "/console/"+r.Slug+"/signin", resp.Header.Get("Location"), tc.name)
	}
}

// TestSignOutEverywhere ends every session of the member and no one
// else's.
func TestSignOutEverywhere(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleAdmin)
	laptop, phone := r.client(t), r.client(t)
	for _, c := range []*http.Client{laptop, phone} {
		require.Equal(t, http.StatusSeeOther, r.passwordSignIn(t, c, m.Email, password).StatusCode)
	}
	colleague := r.signIn(t, console.RoleAdmin)

	resp := r.post(t, laptop, "/signout/everywhere", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, c := range []*http.Client{laptop, phone} {
		resp, _ := r.get(t, c, "/account")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	}
	resp, _ = r.get(t, colleague, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Recorded although answered with a redirect, by the member.
	require.Contains(t, r.auditActions(t, m.ID), "POST /console/{slug}/signout/everywhere")
}

// TestCrossTenant: a staff member of one Company gets nothing at
// another's console, neither by signing in there nor with their cookie
// under the other Company's name; an unknown Company's console is a 404.
func TestCrossTenant(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleOwner)
	c := r.signInWith(t, m.Email, password)
	cookie := r.sessionCookieOf(t, c)

	other, _ := r.company(t, "globex")
	otherURL := func(path string) string { return r.env.PublicURL("/console/" + other + path) }

	// Signing in at the other Company with the same credentials fails.
	fresh := r.client(t)
	resp, err := fresh.Get(otherURL("/signin"))
	require.NoError(t, err)
	body := readBody(t, resp)
	token := csrfField.FindStringSubmatch(body)[1]
	resp, err = fresh.PostForm(otherURL("/signin"), url.Values{"csrf": {token}, "email": {m.Email}, "password": {password}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// The cookie, renamed for the other Company, is no session there.
	for _, path := range []string{"/account", "/staff", "/"} {
		req, err := http.NewRequest(http.MethodGet, otherURL(path), nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: "__Host-console-s-" + other, Value: cookie.Value})
		resp, err := r.client(t).Do(req)
		require.NoError(t, err)
		body := readBody(t, resp)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
		require.Equal(t, "/console/"+other+"/signin", resp.Header.Get("Location"))
		require.NotContains(t, body, m.Email)
	}
	// Its own cookie at the other Company's URL is not even sent for it.
	resp, err = c.Get(otherURL("/account"))
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	resp, err = c.Get(r.env.PublicURL("/console/nosuch/account"))
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
