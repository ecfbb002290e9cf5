package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
)

// TestHeaderTokenFormBounded: a form posted with its CSRF token in the
// X-CSRF-Token header is read within the same bound as any other: an
// oversized one is refused 400 and changes nothing.
func TestHeaderTokenFormBounded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	alice := r.connect(t, r.ID, "alice", agentClient)
	c := r.signIn(t, console.RoleOwner)
	form := url.Values{"account_id": {strconv.FormatInt(alice, 10)}, "client_id": {agentClient},
		"pad": {strings.Repeat("x", 200<<10)}}
	req, err := http.NewRequest(http.MethodPost, r.url("/agents/disconnect"), strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", r.csrf(t, c))
	resp, err := c.Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.True(t, r.connected(t, r.ID, alice, agentClient), "nothing is done")
}

// TestNULInQuery: a query with a NUL byte, which PostgreSQL refuses in
// text, is refused 400 rather than failing 500.
func TestNULInQuery(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c := r.signIn(t, console.RoleOwner)
	for _, path := range []string{"/agents?after_account=1&after_client=a%00b", "/operations?target=a%00b",
		"/operations/export.csv?client_id=a%00b"} {
		resp, _ := r.get(t, c, path)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
	}
}

// TestNULInForm: a form with a NUL byte or bytes that are not UTF-8,
// which PostgreSQL refuses in text, is refused 400 with nothing done
// rather than failing 500 (a reply's text went to the database as it was).
func TestNULInForm(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	id := r.handedOff(t, r.ID, "A person, please")
	c := r.signIn(t, console.RoleOwner)
	resp := r.post(t, c, "/conversations/"+id+"/take", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, form := range []url.Values{{"text": {"a\x00b"}}, {"text": {"a\xffb"}}, {"text": {"ab"}, "k\x00": {"v"}}} {
		resp := r.post(t, c, "/conversations/"+id+"/reply", form)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q", form)
	}
	require.Equal(t, "A person, please", r.lastMessage(t, r.ID, id)["text"], "nothing is posted")
}

// TestTOTPGuessesThrottled: someone with a member's password cannot guess
// TOTP codes without end by signing in again each time a pending session
// ends: wrong codes are counted across sessions and soon refused 429.
func TestTOTPGuessesThrottled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.requireSecondFactor(t)
	m, password := r.member(t, console.RoleOwner)
	c := r.client(t)
	require.Equal(t, http.StatusSeeOther, r.passwordSignIn(t, c, m.Email, password).StatusCode)
	_, body := r.get(t, c, "/signin/second")
	secret := totpSecret.FindStringSubmatch(body)[1]
	resp := r.post(t, c, "/signin/second/enroll", url.Values{"code": {console.TOTPCode(secret, time.Now())}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	// A code that is none of the three the window accepts.
	wrong := "000000"
	now := time.Now()
	for _, d := range []time.Duration{-console.TOTPStep, 0, console.TOTPStep} {
		if console.TOTPCode(secret, now.Add(d)) == wrong {
			wrong = "111111"
		}
	}
	attacker := r.client(t)
	for attempt := range 30 {
		if attempt%5 == 0 {
			attacker = r.client(t)
			resp := r.passwordSignIn(t, attacker, m.Email, password)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the password is right")
		}
		resp := r.post(t, attacker, "/signin/second/totp", url.Values{"code": {wrong}})
		if resp.StatusCode == http.StatusTooManyRequests {
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
			return
		}
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	t.Fatal("30 wrong codes, in new pending sessions, were never throttled")
}

// TestInvitesEndWithInviterOwnership: the invite links an owner made stop
// working when the owner is removed or is an owner no more, so that a
// removed owner cannot come back through a link they kept.
func TestInvitesEndWithInviterOwnership(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	other, _ := r.signInAs(t, console.RoleOwner)
	for _, change := range []string{"remove", "role"} {
		c, m := r.signInAs(t, console.RoleOwner)
		resp, body := r.postPage(t, c, "/staff/invite", url.Values{"email": {change + "-back@example.com"},
			"role": {"owner"}})
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		match := inviteLink.FindStringSubmatch(body)
		require.NotNil(t, match, body)
		token := inviteTokenOf(t, match[1])
		resp, body = r.get(t, r.client(t), "/invite?token="+url.QueryEscape(token))
		require.Equal(t, http.StatusOK, resp.StatusCode, "the invite works before its inviter's %s: %s", change, body)

		form := url.Values{}
		if change == "role" {
			form.Set("role", "agent")
		}
		resp = r.post(t, other, "/staff/"+strconv.FormatInt(m.ID, 10)+"/"+change, form)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, change)

		resp = r.post(t, r.client(t), "/invite", url.Values{"token": {token}, "name": {"Back"},
			"password": {"a long enough password"}})
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "the %s owner's invite still works", change)
	}
}

// TestAcceptedInviteKeepsNoToken: accepting an invite leaves its token in
// no audit entry (the link carries it in the query, the form in the body).
func TestAcceptedInviteKeepsNoToken(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, _ := r.signInAs(t, console.RoleOwner)
	resp, body := r.postPage(t, c, "/staff/invite", url.Values{"email": {"new@example.com"}, "role": {"agent"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	match := inviteLink.FindStringSubmatch(body)
	require.NotNil(t, match, body)
	token := inviteTokenOf(t, match[1])
	resp = r.post(t, r.client(t), "/invite", url.Values{"token": {token}, "name": {"New"},
		"password": {"a long enough password"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var entries, leaks int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT count(*), count(*) FILTER (WHERE path LIKE '%' || $2 || '%' OR fields::text LIKE '%' || $2 || '%')
		 FROM audit_log WHERE company_id = $1`, r.ID, token).Scan(&entries, &leaks))
	require.NotZero(t, entries, "the invite and its acceptance are audited")
	require.Zero(t, leaks, "an audit entry keeps the invite's token")
}

// inviteTokenOf returns the token of an invite link.
func inviteTokenOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	require.NoError(t, err)
	token := u.Query().Get("token")
	require.NotEmpty(t, token, link)
	return token
}
