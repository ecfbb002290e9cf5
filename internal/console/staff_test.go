package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
)

var inviteLink = regexp.MustCompile(`<code id="invite-link">([^<]+)</code>`)

// TestStaffInviteRoleRemove: an owner invites an auditor, whose link is
// shown once and works once; the owner makes them an admin, then removes
// them, which ends their sessions. Every change is in the audit log under
// the owner's name.
func TestStaffInviteRoleRemove(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	owner, ownerPassword := r.member(t, console.RoleOwner)
	c := r.signInWith(t, owner.Email, ownerPassword)

	resp, err := c.PostForm(r.url("/staff/invite"), url.Values{"csrf": {r.csrf(t, c)},
		"email": {"Grace@Example.com"}, "name": {"Grace <b>Hopper</b>"}, "role": {"auditor"}})
	require.NoError(t, err)
	body := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	m := inviteLink.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	link := m[1]
	require.True(t, strings.HasPrefix(link, r.env.PublicURL("/console/"+r.Slug+"/invite?token=")), link)
	// Shown once: the staff page does not show it again.
	_, body = r.get(t, c, "/staff")
	require.NotContains(t, body, link)

	// Bad fields are refused beside each field, nothing stored.
	resp = r.post(t, c, "/staff/invite", url.Values{"email": {"not an email"}, "role": {"emperor"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	invited := r.client(t)
	resp, err = invited.Get(link)
	require.NoError(t, err)
	body = readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "grace@example.com")
	u, err := url.Parse(link)
	require.NoError(t, err)
	token := u.Query().Get("token")
	resp = r.post(t, invited, "/invite", url.Values{"token": {token}, "name": {"Grace Hopper"}, "password": {"short"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = r.post(t, invited, "/invite", url.Values{"token": {token}, "name": {"Grace Hopper"}, "password": {"a long enough password"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, body = r.get(t, invited, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "auditor")
	// The link worked once.
	other := r.client(t)
	resp = r.post(t, other, "/invite", url.Values{"token": {token}, "name": {"Mallory"}, "password": {"a long enough password"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	var graceID int64
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT id FROM staff WHERE company_id = $1 AND email = 'grace@example.com'`, r.ID).Scan(&graceID))
	// An auditor may not see the staff page.
	resp, _ = r.get(t, invited, "/staff")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	id := strconv.FormatInt(graceID, 10)
	resp = r.post(t, c, "/staff/"+id+"/role", url.Values{"role": {"admin"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	// The new role holds at once: an admin reads the staff page but
	// changes nothing on it.
	resp, body = r.get(t, invited, "/staff")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, owner.Email)
	require.NotContains(t, body, `action="/console/`+r.Slug+`/staff/invite"`)
	resp = r.post(t, invited, "/staff/invite", url.Values{"email": {"x@example.com"}, "role": {"owner"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = r.post(t, invited, "/staff/"+strconv.FormatInt(owner.ID, 10)+"/remove", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp = r.post(t, c, "/staff/"+id+"/remove", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = r.get(t, invited, "/account")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a removed member's session ends")

	require.Equal(t, []string{
		"POST /console/{slug}/staff/invite",
		"POST /console/{slug}/staff/{id}/role",
		"POST /console/{slug}/staff/{id}/remove",
	}, r.auditActions(t, owner.ID))
	require.Equal(t, []string{"POST /console/{slug}/invite"}, r.auditActions(t, graceID))
	// No token is kept in the audit log.
	var leaked int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log WHERE strpos(path, $1) > 0`, token).Scan(&leaked))
	require.Zero(t, leaked)
}

// TestLastOwnerStays: the only owner can be neither demoted nor removed;
// with a second owner, either can.
func TestLastOwnerStays(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	owner, password := r.member(t, console.RoleOwner)
	c := r.signInWith(t, owner.Email, password)
	id := strconv.FormatInt(owner.ID, 10)

	resp := r.post(t, c, "/staff/"+id+"/role", url.Values{"role": {"admin"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	resp = r.post(t, c, "/staff/"+id+"/remove", nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	resp, body := r.get(t, c, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "owner")

	second, _ := r.member(t, console.RoleOwner)
	resp = r.post(t, c, "/staff/"+strconv.FormatInt(second.ID, 10)+"/role", url.Values{"role": {"agent"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp = r.post(t, c, "/staff/"+id+"/remove", nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "the other is an agent now")

	// A staff id of another Company is not found here.
	_, otherID := r.company(t, "globex")
	stranger, _ := r.memberOf(t, otherID, console.RoleOwner)
	resp = r.post(t, c, "/staff/"+strconv.FormatInt(stranger.ID, 10)+"/remove", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp = r.post(t, c, "/staff/"+strconv.FormatInt(stranger.ID, 10)+"/role", url.Values{"role": {"auditor"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	var role string
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT role FROM staff WHERE id = $1`, stranger.ID).Scan(&role))
	require.Equal(t, "owner", role)
}

// TestStaffFormsNeedCSRF refuses every staff and account form without
// the session's token, changing nothing.
func TestStaffFormsNeedCSRF(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c := r.signIn(t, console.RoleOwner)
	target, _ := r.member(t, console.RoleAgent)
	id := strconv.FormatInt(target.ID, 10)
	for _, path := range []string{"/staff/invite", "/staff/" + id + "/role", "/staff/" + id + "/remove",
		"/account/totp", "/account/passkeys/1/remove", "/signout/everywhere", "/signout"} {
		resp := r.postRaw(t, c, path, url.Values{"csrf": {"forged"}, "email": {"x@example.com"}, "role": {"owner"}, "code": {"123456"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
	}
	var n int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM staff_invites`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM staff WHERE id = $1 AND role = 'agent'`, target.ID).Scan(&n))
	require.Equal(t, 1, n)
	resp, _ := r.get(t, c, "/account")
	require.Equal(t, http.StatusOK, resp.StatusCode, "still signed in")
}

// TestStaffPageRoles: owners and admins see the staff page, agents and
// auditors get a 403 page; everyone has their account page, and the
// navigation shows only what the role may open.
func TestStaffPageRoles(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for role, want := range map[console.Role]int{
		console.RoleOwner: http.StatusOK, console.RoleAdmin: http.StatusOK,
		console.RoleAgent: http.StatusForbidden, console.RoleAuditor: http.StatusForbidden,
	} {
		c := r.signIn(t, role)
		resp, body := r.get(t, c, "/staff")
		require.Equal(t, want, resp.StatusCode, role)
		resp, body = r.get(t, c, "/account")
		require.Equal(t, http.StatusOK, resp.StatusCode, role)
		require.Equal(t, want == http.StatusOK, strings.Contains(body, `href="/console/`+r.Slug+`/staff"`), role)
		require.Equal(t, role != console.RoleAuditor, strings.Contains(body, `href="/console/`+r.Slug+`/inbox"`), role)
	}
}

// TestRevokeInvite: an owner sees the invites not yet accepted and
// revokes one, whose link then works no more; admins see them but cannot
// revoke; another Company's invite is not found.
func TestRevokeInvite(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	owner, password := r.member(t, console.RoleOwner)
	c := r.signInWith(t, owner.Email, password)
	resp, err := c.PostForm(r.url("/staff/invite"), url.Values{"csrf": {r.csrf(t, c)},
		"email": {"joan@example.com"}, "role": {"agent"}})
	require.NoError(t, err)
	body := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	link := inviteLink.FindStringSubmatch(body)[1]
	inviteID := regexp.MustCompile(`name="invite" value="([^"]+)"`)

	admin := r.signIn(t, console.RoleAdmin)
	_, body = r.get(t, admin, "/staff")
	require.Contains(t, body, "joan@example.com")
	id := inviteID.FindStringSubmatch(body)
	require.Nil(t, id, "an admin gets no revoke form")

	_, body = r.get(t, c, "/staff")
	id = inviteID.FindStringSubmatch(body)
	require.NotNil(t, id, body)
	resp = r.post(t, admin, "/staff/invites/revoke", url.Values{"invite": {id[1]}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = r.postRaw(t, c, "/staff/invites/revoke", url.Values{"invite": {id[1]}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")

	// Another Company's owner cannot revoke it.
	other, otherID := r.company(t, "globex")
	stranger, strangerPassword := r.memberOf(t, otherID, console.RoleOwner)
	sc := r.client(t)
	otherURL := func(path string) string { return r.env.PublicURL("/console/" + other + path) }
	resp, err = sc.Get(otherURL("/signin"))
	require.NoError(t, err)
	token := csrfField.FindStringSubmatch(readBody(t, resp))[1]
	resp, err = sc.PostForm(otherURL("/signin"), url.Values{"csrf": {token}, "email": {stranger.Email}, "password": {strangerPassword}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, err = sc.Get(otherURL("/account"))
	require.NoError(t, err)
	token = csrfField.FindStringSubmatch(readBody(t, resp))[1]
	resp, err = sc.PostForm(otherURL("/staff/invites/revoke"), url.Values{"csrf": {token}, "invite": {id[1]}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, err = r.client(t).Get(link)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the link still works")

	resp = r.post(t, c, "/staff/invites/revoke", url.Values{"invite": {id[1]}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, err = r.client(t).Get(link)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	_, body = r.get(t, c, "/staff")
	require.NotContains(t, body, "joan@example.com")
	resp = r.post(t, c, "/staff/invites/revoke", url.Values{"invite": {"not base64!"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, r.auditActions(t, owner.ID), "POST /console/{slug}/staff/invites/revoke")
}
