package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
)

// TestSecondFactorChangesNeedRecentSignIn: once a member has a second
// factor, replacing their TOTP and adding or removing a passkey is
// refused (403, nothing changed) to a session that signed in more than 5
// minutes ago, as a stolen cookie would be, and allowed after a fresh
// sign-in with the second factor. A member without one sets up their
// first at any time.
func TestSecondFactorChangesNeedRecentSignIn(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	m, password := r.member(t, console.RoleAdmin)
	c := r.signInWith(t, m.Email, password)
	signedInAgo := func(age string) {
		t.Helper()
		_, err := r.env.Pool.Exec(ctx, `UPDATE console_sessions SET created_at = now() - $1::interval
			WHERE company_id = $2 AND staff_id = $3`, age, r.ID, m.ID)
		require.NoError(t, err)
	}
	totpSecretStored := func() []byte {
		t.Helper()
		var sealed []byte
		require.NoError(t, r.env.Pool.QueryRow(ctx, `SELECT totp_secret FROM staff WHERE id = $1`, m.ID).Scan(&sealed))
		return sealed
	}

	// No second factor yet: the first is set up whenever.
	signedInAgo("6 minutes")
	resp, body := r.get(t, c, "/account/totp")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	now, secret := time.Now(), totpSecret.FindStringSubmatch(body)[1]
	resp = r.post(t, c, "/account/totp", url.Values{"code": {console.TOTPCode(secret, now)}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	first := totpSecretStored()

	// A replacement proposed while fresh is refused once the sign-in is
	// old; so is a new proposal, and the account page says why.
	signedInAgo("1 minute")
	_, body = r.get(t, c, "/account/totp")
	replacement := totpSecret.FindStringSubmatch(body)[1]
	signedInAgo("6 minutes")
	resp = r.post(t, c, "/account/totp", url.Values{"code": {console.TOTPCode(replacement, now.Add(console.TOTPStep))}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, first, totpSecretStored(), "TOTP unchanged")
	resp, body = r.get(t, c, "/account/totp")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.NotRegexp(t, totpSecret, body)
	_, body = r.get(t, c, "/account")
	require.Contains(t, body, "sign in again")

	// Passkeys: adding and removing are refused alike.
	_, err := r.env.Pool.Exec(ctx, `INSERT INTO staff_passkeys (company_id, staff_id, credential_id, name, credential)
		VALUES ($1, $2, '\x010203', 'old', '{"id":"AQID"}')`, r.ID, m.ID)
	require.NoError(t, err)
	var passkeyID int64
	require.NoError(t, r.env.Pool.QueryRow(ctx, `SELECT id FROM staff_passkeys WHERE staff_id = $1`, m.ID).Scan(&passkeyID))
	remove := "/account/passkeys/" + strconv.FormatInt(passkeyID, 10) + "/remove"
	resp = r.post(t, c, "/account/passkeys/begin", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = r.post(t, c, remove, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	var passkeys int
	require.NoError(t, r.env.Pool.QueryRow(ctx, `SELECT count(*) FROM staff_passkeys WHERE staff_id = $1`, m.ID).Scan(&passkeys))
	require.Equal(t, 1, passkeys, "passkey kept")

	// A fresh sign-in, password and code, may change them.
	fresh := r.client(t)
	resp = r.passwordSignIn(t, fresh, m.Email, password)
	require.Equal(t, "/console/"+r.Slug+"/signin/second", resp.Header.Get("Location"))
	resp = r.post(t, fresh, "/signin/second/totp", url.Values{"code": {console.TOTPCode(secret, now.Add(console.TOTPStep))}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp = r.post(t, fresh, remove, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.NoError(t, r.env.Pool.QueryRow(ctx, `SELECT count(*) FROM staff_passkeys WHERE staff_id = $1`, m.ID).Scan(&passkeys))
	require.Zero(t, passkeys, "passkey removed")
	resp = r.post(t, fresh, "/account/passkeys/begin", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = r.get(t, fresh, "/account/totp")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
