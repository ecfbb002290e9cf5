package platform_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestBrowserJoinCookieLifetime covers what a Session cookie acts for over time
// (spec 6, "The cookie"): the account only while the Personal Agent stays
// signed in, nothing once the Session ends, the browser signs out or a
// later join replaces it.
//
// The subtests run at once, and each one that signs in does so at a
// Company of its own (r.fresh): every sign-in counts as a failure of its
// username until it succeeds (accounts.Authenticate), so enough of them at
// once at one Company lock ada out with 429.
func TestBrowserJoinCookieLifetime(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	// For the subtests that do not sign in.
	shop := r.newCompany(t, "shop", "shop.example", nil, nil)
	other := r.newCompany(t, "other", "other.example", nil, nil)

	t.Run("the agent signs out", func(t *testing.T) {
		t.Parallel()
		shop, tok, _, sid, cookie := r.joinedSignedIn(t, "orders:read")
		r.requireSignedIn(t, shop, cookie, sid, shop.Ada, "orders:read")
		r.revoke(t, shop, tok.RefreshToken)
		// The Session continues signed out (spec 5.5), and so does the
		// joinBrowser.
		r.requireSignedOut(t, shop, cookie, sid)
	})

	// Spec 4.7: a new sign-in replaces the refresh token, and revoking
	// the replaced one isn't sign-out.
	t.Run("revoking a replaced refresh token keeps the account", func(t *testing.T) {
		t.Parallel()
		shop, first, _, sid, cookie := r.joinedSignedIn(t, "orders:read")
		// The User signs in again for more scopes; the agent revokes the
		// replaced refresh token.
		second := r.signIn(t, shop, "orders:read", "orders:write")
		r.revoke(t, shop, first.RefreshToken)
		// A refresh token for the account is still valid: still signed in.
		r.requireSignedIn(t, shop, cookie, sid, shop.Ada, "orders:read")
		r.revoke(t, shop, second.RefreshToken)
		r.requireSignedOut(t, shop, cookie, sid)
	})

	t.Run("the user disconnects the agent", func(t *testing.T) {
		t.Parallel()
		shop, _, _, sid, cookie := r.joinedSignedIn(t, "orders:read", "orders:write")
		r.requireSignedIn(t, shop, cookie, sid, shop.Ada, "orders:read", "orders:write")
		require.NoError(t, r.env.Platform.Issuer.Store().Disconnect(t.Context(), shop.ID, shop.Ada, r.agent.ClientID))
		r.requireSignedOut(t, shop, cookie, sid)
	})

	t.Run("the user disconnects the agent on the account page", func(t *testing.T) {
		t.Parallel()
		shop, _, _, sid, cookie := r.joinedSignedIn(t, "orders:read")
		disconnectOnAccountPage(t, r, shop)
		r.requireSignedOut(t, shop, cookie, sid)
	})

	t.Run("the Company ends the Session", func(t *testing.T) {
		t.Parallel()
		shop := r.fresh(t)
		tok := r.signIn(t, shop, "orders:read")
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, tok.AccessToken)
		resp := r.companyAPI(t, shop, "/sessions/end", map[string]any{"client_id": r.agent.ClientID, "sid": sid})
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
		r.requireInactive(t, shop, cookie)
		// And the ended Session cannot authorize a new code.
		code := b.mustOpen(t, shop.Domain)
		requireJoinError(t, r.authorize(t, shop, code, sid, ""), http.StatusBadRequest, "session_ended")
	})

	t.Run("the Session ends when idle", func(t *testing.T) {
		t.Parallel()
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, "")
		r.requireSignedOut(t, shop, cookie, sid)
		// Unused for longer than the idle timeout and its slack.
		r.exec(t, `UPDATE sessions SET last_seen_at = now() - $3::interval WHERE company_id = $1 AND sid = $2`,
			shop.ID, sid, (joinIdleTimeout + joinIdleTimeout/4).String())
		r.requireInactive(t, shop, cookie)
		// Just within it, it is active.
		r.exec(t, `UPDATE sessions SET last_seen_at = now() - $3::interval WHERE company_id = $1 AND sid = $2`,
			shop.ID, sid, (joinIdleTimeout - joinIdleTimeout/4).String())
		r.requireSignedOut(t, shop, cookie, sid)
	})

	t.Run("the cookie expires", func(t *testing.T) {
		t.Parallel()
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, "")
		r.exec(t, `UPDATE web_sessions SET expires_at = now() - interval '1 second'
			WHERE token = sha256(convert_to($1, 'UTF8'))`, cookie)
		r.requireInactive(t, shop, cookie)
	})

	t.Run("the website signs the browser out", func(t *testing.T) {
		t.Parallel()
		shop := r.fresh(t)
		tok := r.signIn(t, shop, "orders:read")
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, tok.AccessToken)
		// Another Company's key cannot end it.
		resp := r.companyAPI(t, other, "/web-sessions/end", map[string]any{"cookie": cookie})
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
		r.requireSignedIn(t, shop, cookie, sid, shop.Ada, "orders:read")
		resp = r.companyAPI(t, shop, "/web-sessions/end", map[string]any{"cookie": cookie})
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
		r.requireInactive(t, shop, cookie)
		// Ending it again is fine.
		resp = r.companyAPI(t, shop, "/web-sessions/end", map[string]any{"cookie": cookie})
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
		// The Session itself goes on: the agent can join again.
		again := r.join(t, b, shop, sid, tok.AccessToken)
		require.NotEqual(t, cookie, again)
		r.requireSignedIn(t, shop, again, sid, shop.Ada, "orders:read")
		r.requireInactive(t, shop, cookie)
	})

	t.Run("a later join replaces the cookie and ends the earlier web session", func(t *testing.T) {
		t.Parallel()
		shop := r.fresh(t)
		tok := r.signIn(t, shop, "orders:read", "orders:write")
		b := r.browser(t)
		sid := newJoinSID()
		first := r.join(t, b, shop, sid, tok.AccessToken)
		// The browser's other cookies are not touched by the join.
		b.setCookie(shop.Domain, &http.Cookie{Name: "cart", Value: "3", Path: "/"})
		second := r.join(t, b, shop, sid, tok.AccessToken)
		require.NotEqual(t, first, second)
		require.Equal(t, second, b.cookie(shop.Domain, joinSessionCookie))
		require.Equal(t, "3", b.cookie(shop.Domain, "cart"))
		r.requireInactive(t, shop, first)
		r.requireSignedIn(t, shop, second, sid, shop.Ada, "orders:read", "orders:write")
	})

	t.Run("a later join into another Session", func(t *testing.T) {
		t.Parallel()
		b := r.browser(t)
		one, two := newJoinSID(), newJoinSID()
		first := r.join(t, b, shop, one, "")
		second := r.join(t, b, shop, two, "")
		r.requireInactive(t, shop, first)
		r.requireSignedOut(t, shop, second, two)
	})

	t.Run("a join without a token after a signed-in join leaves the browser signed out", func(t *testing.T) {
		t.Parallel()
		shop := r.fresh(t)
		tok := r.signIn(t, shop, "orders:read")
		b := r.browser(t)
		sid := newJoinSID()
		signedIn := r.join(t, b, shop, sid, tok.AccessToken)
		r.requireSignedIn(t, shop, signedIn, sid, shop.Ada, "orders:read")
		signedOut := r.join(t, b, shop, sid, "")
		// The Personal Agent is still signed in, but the browser is not.
		r.requireSignedOut(t, shop, signedOut, sid)
		r.requireInactive(t, shop, signedIn)
		// A later signed-in join signs it in again, with the new scopes.
		tok2 := r.signIn(t, shop, "orders:write")
		again := r.join(t, b, shop, sid, tok2.AccessToken)
		r.requireSignedIn(t, shop, again, sid, shop.Ada, "orders:write")
		r.requireInactive(t, shop, signedOut)
	})

	t.Run("a failed join leaves the earlier cookie in place", func(t *testing.T) {
		t.Parallel()
		shop := r.fresh(t)
		tok := r.signIn(t, shop, "orders:read")
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, tok.AccessToken)
		code := b.mustOpen(t, shop.Domain) // never authorized
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Equal(t, cookie, b.cookie(shop.Domain, joinSessionCookie))
		r.requireSignedIn(t, shop, cookie, sid, shop.Ada, "orders:read")
	})

	t.Run("expired codes and web sessions are swept", func(t *testing.T) {
		t.Parallel()
		shop := r.fresh(t)
		b := r.browser(t)
		stale := b.mustOpen(t, shop.Domain)
		live := b.mustOpen(t, shop.Domain)
		oldCookie := r.join(t, r.browser(t), shop, newJoinSID(), "")
		newCookie := r.join(t, r.browser(t), shop, newJoinSID(), "")
		r.exec(t, `UPDATE browser_join_codes SET expires_at = now() - interval '2 hours'
			WHERE code = sha256(convert_to($1, 'UTF8'))`, stale)
		r.exec(t, `UPDATE web_sessions SET expires_at = now() - interval '2 hours'
			WHERE token = sha256(convert_to($1, 'UTF8'))`, oldCookie)
		_, err := browserjoin.Sweeps(browserjoin.NewStore(r.env.Pool))[0].Run(t.Context(), time.Now().Add(-time.Hour))
		require.NoError(t, err)
		codes := func(code string) int {
			return r.count(t, `SELECT count(*) FROM browser_join_codes WHERE code = sha256(convert_to($1, 'UTF8'))`, code)
		}
		webs := func(cookie string) int {
			return r.count(t, `SELECT count(*) FROM web_sessions WHERE token = sha256(convert_to($1, 'UTF8'))`, cookie)
		}
		require.Zero(t, codes(stale))
		require.Equal(t, 1, codes(live))
		require.Zero(t, webs(oldCookie))
		require.Equal(t, 1, webs(newCookie))
		r.requireInactive(t, shop, oldCookie)
	})
}

// TestBrowserJoinSignInDoesNotComeBack: once the User signs out or disconnects the
// Personal Agent, or the sign-in's refresh tokens expire, the cookie's sign-in has ended (spec 6: "The Session's
// sign-in ends when ... the User signs out or disconnects the Personal
// Agent"; "an earlier login doesn't come back"). A later sign-in, perhaps
// with fewer scopes, must not bring back the join's account and scopes:
// the issuer tells the web sessions of each sign-out (issuer.SignedOut).
func TestBrowserJoinSignInDoesNotComeBack(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	for _, tc := range []struct {
		name    string
		signOut func(t *testing.T, shop *joinCompany, refreshToken string)
	}{
		{"sign-out", func(t *testing.T, shop *joinCompany, refreshToken string) { r.revoke(t, shop, refreshToken) }},
		{"disconnect", func(t *testing.T, shop *joinCompany, _ string) {
			require.NoError(t, r.env.Platform.Issuer.Store().Disconnect(t.Context(), shop.ID, shop.Ada, r.agent.ClientID))
		}},
		// Spec 5.5: "The account is signed out once no refresh token the
		// Company issued to that client_id for the account is still
		// valid": running out ends the sign-in as revoking does, once the
		// issuer's sweep has recorded it.
		{"expiry", func(t *testing.T, shop *joinCompany, _ string) {
			r.exec(t, `UPDATE oauth_tokens SET expires_at = now()
				WHERE company_id = $1 AND account_id = $2 AND kind = 'refresh'`, shop.ID, shop.Ada)
			now := time.Now()
			n, err := r.env.Platform.Issuer.Store().EndExpiredSignIns(t.Context(), now.Add(-time.Minute), now)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shop, tok, _, sid, cookie := r.joinedSignedIn(t, "orders:read", "orders:write")
			tc.signOut(t, shop, tok.RefreshToken)
			r.requireSignedOut(t, shop, cookie, sid)
			// The User signs the agent in again, granting less.
			r.signIn(t, shop, "orders:read")
			r.requireSignedOut(t, shop, cookie, sid)
		})
	}
}

// TestBrowserJoinExpiryOfAReplacedSignIn: as with revocation (spec 4.7),
// a refresh token that expires while a newer sign-in's is valid is no
// sign-out; once that one expires too, it is.
func TestBrowserJoinExpiryOfAReplacedSignIn(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop, _, _, sid, cookie := r.joinedSignedIn(t, "orders:read")
	r.signIn(t, shop, "orders:read", "orders:write")
	rows, err := r.env.Pool.Query(t.Context(), `SELECT request_id FROM oauth_tokens WHERE company_id = $1
		AND kind = 'refresh' GROUP BY request_id ORDER BY min(requested_at)`, shop.ID)
	require.NoError(t, err)
	grants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, grants, 2)
	sweep := func() int64 {
		now := time.Now()
		n, err := r.env.Platform.Issuer.Store().EndExpiredSignIns(t.Context(), now.Add(-time.Minute), now)
		require.NoError(t, err)
		return n
	}
	expire := func(grant string) {
		r.exec(t, `UPDATE oauth_tokens SET expires_at = now() WHERE company_id = $1 AND request_id = $2
			AND kind = 'refresh'`, shop.ID, grant)
	}

	expire(grants[0])
	require.Zero(t, sweep())
	r.requireSignedIn(t, shop, cookie, sid, shop.Ada, "orders:read")
	expire(grants[1])
	require.EqualValues(t, 1, sweep(), "the second expiry ends the sign-in")
	r.requireSignedOut(t, shop, cookie, sid)
	r.signIn(t, shop, "orders:read")
	r.requireSignedOut(t, shop, cookie, sid)
}

// TestBrowserJoinConcurrentSubmit races submissions of one authorized code from the
// browser that loaded it: exactly one joins.
func TestBrowserJoinConcurrentSubmit(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newCompany(t, "shop", "shop.example", nil, nil)
	for range 3 {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), "")
		statuses := make(chan int, 8)
		for range cap(statuses) {
			go func() {
				req, err := http.NewRequest(http.MethodPost, r.env.URL(shop.Domain, browserjoin.Path),
					strings.NewReader(url.Values{"code": {code}}.Encode()))
				if err != nil {
					statuses <- 0
					return
				}
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := b.client.Do(req)
				if err != nil {
					statuses <- 0
					return
				}
				_ = resp.Body.Close()
				statuses <- resp.StatusCode
			}()
		}
		var won, lost int
		for range cap(statuses) {
			switch <-statuses {
			case http.StatusSeeOther:
				won++
			case http.StatusBadRequest:
				lost++
			}
		}
		require.Equal(t, 1, won)
		require.Equal(t, cap(statuses)-1, lost)
		require.Equal(t, 1, r.count(t, `SELECT count(*) FROM web_sessions w JOIN browser_join_codes c USING (company_id, client_id, sid)
			WHERE c.code = sha256(convert_to($1, 'UTF8'))`, code))
	}

	// Concurrent authorizations of one code: exactly one succeeds.
	code := r.browser(t).mustOpen(t, shop.Domain)
	statuses := make(chan int, 8)
	for range cap(statuses) {
		go func() {
			req := newJoinAuthorizeRequest(t, r, shop.Domain, code)
			r.agent.Sign(t, req, joinSessionClaims(shop, newJoinSID(), ""), joinNoOptions)
			resp, err := r.env.Client.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_ = resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	var won int
	for range cap(statuses) {
		if <-statuses == http.StatusNoContent {
			won++
		}
	}
	require.Equal(t, 1, won)
}

// TestBrowserJoinBrowsingKeepsTheSessionInUse: the browser's requests belong to the
// Session (spec 6), so browsing the website records its use and keeps it
// from ending idle.
func TestBrowserJoinBrowsingKeepsTheSessionInUse(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newWebsite(t)
	b := r.browser(t)
	sid := newJoinSID()
	r.join(t, b, shop.joinCompany, sid, "")
	lastSeen := func() time.Time {
		var at time.Time
		require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT last_seen_at FROM sessions
			WHERE company_id = $1 AND sid = $2`, shop.ID, sid).Scan(&at))
		return at
	}
	old := time.Now().Add(-joinIdleTimeout / 2).Truncate(time.Second)
	_, err := r.env.Pool.Exec(context.Background(), `UPDATE sessions SET last_seen_at = $3
		WHERE company_id = $1 AND sid = $2`, shop.ID, sid, old)
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodGet, r.env.URL(shop.Domain, "/"), nil)
	require.NoError(t, err)
	resp := peers.Send(t, b.client, req)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, sid, shop.origin.Last().Claims.SID)
	require.True(t, lastSeen().After(old.Add(time.Minute)), "the website request counts as a use of the Session")
}

// joinedSignedIn signs ada in at a fresh Company with scopes and joins a
// new browser to a new Session with the token.
func (r *joinRig) joinedSignedIn(t *testing.T, scopes ...string) (*joinCompany, *oauth2.Token, *joinBrowser, string, string) {
	t.Helper()
	shop := r.fresh(t)
	tok := r.signIn(t, shop, scopes...)
	b := r.browser(t)
	sid := newJoinSID()
	return shop, tok, b, sid, r.join(t, b, shop, sid, tok.AccessToken)
}

// TestBrowserJoinIntoAnEndedSession: a Session that ended between steps 2 and 3
// gets no cookie; the failed step 3 answers with the error page.
func TestBrowserJoinIntoAnEndedSession(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.fresh(t)
	b := r.browser(t)
	sid := newJoinSID()
	code := b.mustOpen(t, shop.Domain)
	r.mustAuthorize(t, shop, code, sid, "")
	_, err := r.env.Pool.Exec(context.Background(), `UPDATE sessions SET ended_at = now() WHERE company_id = $1 AND sid = $2`, shop.ID, sid)
	require.NoError(t, err)
	resp := b.submit(t, shop.Domain, code)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Empty(t, b.cookie(shop.Domain, joinSessionCookie))
	require.Zero(t, r.count(t, `SELECT count(*) FROM web_sessions WHERE company_id = $1`, shop.ID))
}
