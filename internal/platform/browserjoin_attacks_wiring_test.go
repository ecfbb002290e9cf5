package platform_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// requireRefused checks a refused step 3: an error page, no cookie set,
// and no web session started.
func (r *joinRig) requireRefused(t *testing.T, c *joinCompany, resp *peers.Response) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	requireJoinPageHeaders(t, resp.Header)
	require.Empty(t, resp.Header.Values("Set-Cookie"), "a refused join sets no cookie")
	require.Empty(t, resp.Header.Get("Location"))
	body := string(resp.Body)
	require.Contains(t, body, "This browser was not connected")
	require.NotContains(t, body, "<form", "an error page has no form to submit")
}

// usedUp reports whether a code has been submitted.
func (r *joinRig) usedUp(t *testing.T, code string) bool {
	t.Helper()
	return r.count(t, `SELECT count(*) FROM browser_join_codes WHERE code = sha256(convert_to($1, 'UTF8'))
		AND submitted_at IS NOT NULL`, code) == 1
}

// TestBrowserJoinAttacks covers spec 10.6: only the browser that loaded the page
// can submit a code, and only once the Personal Agent authorized it.
func TestBrowserJoinAttacks(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newCompany(t, "shop", "shop.example", nil,
		map[string]any{"domains": []string{"www.shop.example"}})
	other := r.newCompany(t, "other", "other.example", nil, nil)
	tok := r.signIn(t, shop, "orders:read", "orders:write")
	webSessions := func(t *testing.T) int {
		return r.count(t, `SELECT count(*) FROM web_sessions WHERE company_id = $1`, shop.ID)
	}

	// An attacker's Personal Agent signs its own Session in to its own
	// account and authorizes a code its own browser loaded; the victim's
	// joinBrowser is made to post it.
	t.Run("a code authorized for another browser, posted without a join cookie", func(t *testing.T) {
		attacker, victim := r.browser(t), r.browser(t)
		code := attacker.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), tok.AccessToken)
		before := webSessions(t)
		r.requireRefused(t, shop, victim.submit(t, shop.Domain, code))
		require.Empty(t, victim.cookieNames(shop.Domain))
		require.Equal(t, before, webSessions(t))
		// The code is used up: the attacker's own browser cannot use it now.
		require.True(t, r.usedUp(t, code))
		r.requireRefused(t, shop, attacker.submit(t, shop.Domain, code))
	})

	t.Run("a code posted with another browser's join cookie", func(t *testing.T) {
		attacker, victim := r.browser(t), r.browser(t)
		code := attacker.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), tok.AccessToken)
		// The victim has loaded the page too, for a code of its own.
		own := victim.mustOpen(t, shop.Domain)
		joinCookie := victim.cookie(shop.Domain, tenant.JoinCookie)
		r.requireRefused(t, shop, victim.submit(t, shop.Domain, code))
		require.Equal(t, []string{tenant.JoinCookie}, victim.cookieNames(shop.Domain), "no Session cookie")
		require.Equal(t, joinCookie, victim.cookie(shop.Domain, tenant.JoinCookie), "the join cookie is untouched")
		// The victim's own code, had its agent authorized it, still works.
		sid := newJoinSID()
		r.mustAuthorize(t, shop, own, sid, "")
		require.Equal(t, http.StatusSeeOther, victim.submit(t, shop.Domain, own).Status)
		r.requireSignedOut(t, shop, victim.cookie(shop.Domain, joinSessionCookie), sid)
	})

	t.Run("a join cookie the attacker planted", func(t *testing.T) {
		// Another host cannot set a __Host- cookie; even if the attacker
		// had its own join cookie value in the victim's browser, it is tied
		// to the attacker's browser's code only through the attacker's
		// own page load, which the attacker can't replay: a value that is
		// not the one from the code's page fails.
		attacker, victim := r.browser(t), r.browser(t)
		code := attacker.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), tok.AccessToken)
		victim.setCookie(shop.Domain, &http.Cookie{Name: tenant.JoinCookie, Value: "planted", Path: "/", Secure: true})
		r.requireRefused(t, shop, victim.submit(t, shop.Domain, code))
	})

	t.Run("a code submitted twice", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		sid := newJoinSID()
		r.mustAuthorize(t, shop, code, sid, tok.AccessToken)
		joinCookie := b.cookie(shop.Domain, tenant.JoinCookie)
		require.Equal(t, http.StatusSeeOther, b.submit(t, shop.Domain, code).Status)
		first := b.cookie(shop.Domain, joinSessionCookie)
		// Replay it with the same join cookie.
		b.setCookie(shop.Domain, &http.Cookie{Name: tenant.JoinCookie, Value: joinCookie, Path: "/", Secure: true})
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Equal(t, first, b.cookie(shop.Domain, joinSessionCookie), "the first join stands")
		r.requireSignedIn(t, shop, first, sid, shop.Ada, "orders:read", "orders:write")
	})

	t.Run("a failed first submission uses the code up", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		joinCookie := b.cookie(shop.Domain, tenant.JoinCookie)
		// Submitted before it is authorized: refused, and used up.
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.True(t, r.usedUp(t, code))
		// Authorizing it now fails, and so does submitting it again.
		requireJoinError(t, r.authorize(t, shop, code, newJoinSID(), ""), http.StatusBadRequest, "invalid_request")
		require.Equal(t, joinCookie, b.cookie(shop.Domain, tenant.JoinCookie))
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
	})

	t.Run("a first submission without the cookie uses the code up for the right browser", func(t *testing.T) {
		b, other := r.browser(t), r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), "")
		r.requireRefused(t, shop, other.submit(t, shop.Domain, code))
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Empty(t, b.cookie(shop.Domain, joinSessionCookie))
	})

	t.Run("an expired code", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), tok.AccessToken)
		r.exec(t, `UPDATE browser_join_codes SET expires_at = now() - interval '1 second'
			WHERE code = sha256(convert_to($1, 'UTF8'))`, code)
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Empty(t, b.cookie(shop.Domain, joinSessionCookie))
	})

	t.Run("an unauthorized code", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		before := r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1`, shop.ID)
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Empty(t, b.cookie(shop.Domain, joinSessionCookie))
		require.Equal(t, before, r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1`, shop.ID))
	})

	t.Run("an unknown or malformed code", func(t *testing.T) {
		b := r.browser(t)
		b.mustOpen(t, shop.Domain)
		for _, code := range []string{"bc_" + strings.Repeat("Z", 26), "", "nope", "bc_a b", strings.Repeat("bc_", 40)} {
			r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		}
		// No code at all, a code in the query only, a body that is not a form.
		for _, req := range []*http.Request{
			mustJoinRequest(t, http.MethodPost, r.env.URL(shop.Domain, browserjoin.Path), "", "application/x-www-form-urlencoded"),
			mustJoinRequest(t, http.MethodPost, r.env.URL(shop.Domain, browserjoin.Path+"?code="+b.mustOpen(t, shop.Domain)), "", "application/x-www-form-urlencoded"),
			mustJoinRequest(t, http.MethodPost, r.env.URL(shop.Domain, browserjoin.Path), `{"code":"bc_x"}`, "application/json"),
			mustJoinRequest(t, http.MethodPost, r.env.URL(shop.Domain, browserjoin.Path), "code="+strings.Repeat("A", 8<<10), "application/x-www-form-urlencoded"),
		} {
			r.requireRefused(t, shop, peers.Send(t, b.client, req))
		}
	})

	t.Run("a code from another Company's domain", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, other.Domain)
		r.mustAuthorize(t, other, code, newJoinSID(), "")
		// The browser carries other.example's join cookie only to
		// other.example; even with the same value on shop.example it fails.
		b.setCookie(shop.Domain, &http.Cookie{Name: tenant.JoinCookie, Value: b.cookie(other.Domain, tenant.JoinCookie),
			Path: "/", Secure: true})
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Empty(t, b.cookie(shop.Domain, joinSessionCookie))
	})

	t.Run("a code from the Company's other domain", func(t *testing.T) {
		b := r.browser(t)
		const www = "www.shop.example"
		code := b.mustOpen(t, www)
		// Authorized on shop.example, where it was not issued: refused.
		requireJoinError(t, r.authorizeAs(t, r.agent, shop, shop.Domain, map[string]any{"code": code}, newJoinSID(), ""),
			http.StatusBadRequest, "invalid_request")
		// Authorized where it was issued but posted to the other domain,
		// with the same join cookie: refused.
		r.mustAuthorize(t, &joinCompany{Domain: www, Aud: shop.Aud}, code, newJoinSID(), "")
		b.setCookie(shop.Domain, &http.Cookie{Name: tenant.JoinCookie, Value: b.cookie(www, tenant.JoinCookie),
			Path: "/", Secure: true})
		r.requireRefused(t, shop, b.submit(t, shop.Domain, code))
		require.Empty(t, b.cookie(shop.Domain, joinSessionCookie))
		require.Empty(t, b.cookie(www, joinSessionCookie))
	})

	t.Run("the page refuses framing and opener references", func(t *testing.T) {
		p := r.browser(t).open(t, shop.Domain)
		requireJoinPageHeaders(t, p.Header)
		csp := p.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "form-action 'self'")
		require.Contains(t, csp, "default-src 'none'")
		// So does the error page.
		requireJoinPageHeaders(t, r.browser(t).submit(t, shop.Domain, "bc_x").Header)
	})

	t.Run("the page escapes the Company's name", func(t *testing.T) {
		xss := r.newCompany(t, "xss", "xss.example", nil,
			map[string]any{"organization": map[string]any{"name": `<script>alert(1)</script>"`, "domain": "xss.example"}})
		p := r.browser(t).open(t, xss.Domain)
		require.Equal(t, http.StatusOK, p.Status)
		require.NotContains(t, string(p.Body), "<script>")
		require.Contains(t, string(p.Body), "&lt;script&gt;")
	})

	t.Run("a form posted without a join cookie never reaches another Session", func(t *testing.T) {
		// The victim has a Session cookie of its own agent's join; a forged
		// post must not replace or end it.
		victim, attacker := r.browser(t), r.browser(t)
		sid := newJoinSID()
		mine := r.join(t, victim, shop, sid, "")
		code := attacker.mustOpen(t, shop.Domain)
		r.mustAuthorize(t, shop, code, newJoinSID(), tok.AccessToken)
		r.requireRefused(t, shop, victim.submit(t, shop.Domain, code))
		require.Equal(t, mine, victim.cookie(shop.Domain, joinSessionCookie))
		r.requireSignedOut(t, shop, mine, sid)
	})
}

func mustJoinRequest(t *testing.T, method, rawURL, body, contentType string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}
