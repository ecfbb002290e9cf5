package platform_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// requireJoinPageHeaders checks the headers every page of the join carries
// (spec 6 step 1: not cached, not framed, no opener reference; 10.6).
func requireJoinPageHeaders(t *testing.T, h http.Header) {
	t.Helper()
	require.True(t, strings.HasPrefix(h.Get("Content-Type"), "text/html"), h.Get("Content-Type"))
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	csp := h.Get("Content-Security-Policy")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
	require.Equal(t, "same-origin", h.Get("Cross-Origin-Opener-Policy"))
	require.Equal(t, "no-referrer", h.Get("Referrer-Policy"))
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
}

// TestBrowserJoinPage is step 1: a page with a form and a one-time code, and the join
// cookie that ties it to the browser, and nothing else.
func TestBrowserJoinPage(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newCompany(t, "shop", "shop.example", nil, nil)
	plain := r.newCompany(t, "plain", "plain.example", map[string]any{"browser_join": false}, nil)

	t.Run("page", func(t *testing.T) {
		b := r.browser(t)
		// A login the browser had from an earlier visit.
		b.setCookie(shop.Domain, &http.Cookie{Name: "shop_login", Value: "earlier", Path: "/"})
		// And a Session cookie from an earlier join.
		b.setCookie(shop.Domain, &http.Cookie{Name: joinSessionCookie, Value: "joined-before", Path: "/", Secure: true})
		p := b.open(t, shop.Domain)
		require.Equal(t, http.StatusOK, p.Status, "%s", p.Body)
		requireJoinPageHeaders(t, p.Header)
		require.Equal(t, "post", strings.ToLower(p.Method))
		require.Equal(t, browserjoin.Path, p.Action)
		require.True(t, strings.HasPrefix(p.Code, "bc_"), p.Code)
		require.GreaterOrEqual(t, len(p.Code), len("bc_")+22, "the code is unguessable: %s", p.Code)
		require.Contains(t, string(p.Body), "Shop shop", "the page names the Company")
		require.NotContains(t, string(p.Body), "<script", "the page runs no script")

		// Exactly one cookie: the join cookie, __Host-, short-lived,
		// not sent cross-site, not readable from script.
		cookies := joinSetCookies(t, p.Response)
		require.Len(t, cookies, 1, "%v", p.Header.Values("Set-Cookie"))
		join := cookies[tenant.JoinCookie]
		require.NotNil(t, join, "%v", p.Header.Values("Set-Cookie"))
		require.Equal(t, "__Host-poppy_join", join.Name)
		require.NotEmpty(t, join.Value)
		require.NotContains(t, join.Value, p.Code)
		require.Equal(t, "/", join.Path)
		require.Empty(t, join.Domain, "host-only")
		require.True(t, join.Secure)
		require.True(t, join.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, join.SameSite)
		require.Positive(t, join.MaxAge)
		require.LessOrEqual(t, join.MaxAge, 300, "short-lived")
		require.True(t, join.Expires.IsZero())

		// The browser's other cookies are as they were.
		require.ElementsMatch(t, []string{"shop_login", joinSessionCookie, tenant.JoinCookie}, b.cookieNames(shop.Domain))
		require.Equal(t, "earlier", b.cookie(shop.Domain, "shop_login"))
		require.Equal(t, "joined-before", b.cookie(shop.Domain, joinSessionCookie))
	})

	t.Run("each load gives a new code and cookie", func(t *testing.T) {
		b := r.browser(t)
		seen := map[string]bool{}
		cookies := map[string]bool{}
		for range 3 {
			seen[b.mustOpen(t, shop.Domain)] = true
			cookies[b.cookie(shop.Domain, tenant.JoinCookie)] = true
		}
		require.Len(t, seen, 3)
		require.Len(t, cookies, 3)
		// Another browser too.
		require.False(t, seen[r.browser(t).mustOpen(t, shop.Domain)])
	})

	t.Run("loading starts no Session", func(t *testing.T) {
		before := r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1`, shop.ID)
		webBefore := r.count(t, `SELECT count(*) FROM web_sessions WHERE company_id = $1`, shop.ID)
		b := r.browser(t)
		for range 2 {
			b.mustOpen(t, shop.Domain)
		}
		// Even with Session headers a Personal Agent must not send here.
		req, err := http.NewRequest(http.MethodGet, r.env.URL(shop.Domain, browserjoin.Path), nil)
		require.NoError(t, err)
		sid := newJoinSID()
		r.agent.Sign(t, req, joinSessionClaims(shop, sid, ""), joinNoOptions)
		resp := peers.Send(t, r.env.Client, req)
		require.Equal(t, http.StatusOK, resp.Status)
		require.Equal(t, before, r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1`, shop.ID))
		require.Equal(t, webBefore, r.count(t, `SELECT count(*) FROM web_sessions WHERE company_id = $1`, shop.ID))
	})

	t.Run("the code is stored hashed", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		require.Zero(t, r.count(t, `SELECT count(*) FROM browser_join_codes WHERE code = convert_to($1, 'UTF8')`, code))
		require.Zero(t, r.count(t, `SELECT count(*) FROM browser_join_codes WHERE browser = convert_to($1, 'UTF8')`,
			b.cookie(shop.Domain, tenant.JoinCookie)))
		require.Equal(t, 1, r.count(t, `SELECT count(*) FROM browser_join_codes WHERE code = sha256(convert_to($1, 'UTF8'))
			AND browser = sha256(convert_to($2, 'UTF8')) AND domain = $3 AND expires_at <= created_at + interval '5 minutes'`,
			code, b.cookie(shop.Domain, tenant.JoinCookie), shop.Domain))
	})

	t.Run("404 without browser join", func(t *testing.T) {
		b := r.browser(t)
		p := b.open(t, plain.Domain)
		require.Equal(t, http.StatusNotFound, p.Status)
		require.Empty(t, p.Header.Values("Set-Cookie"))
		require.Equal(t, http.StatusNotFound, b.submit(t, plain.Domain, "bc_x").Status)
		requireJoinError(t, r.authorize(t, plain, "bc_x", newJoinSID(), ""), http.StatusNotFound, "not_found")
		require.Zero(t, r.count(t, `SELECT count(*) FROM browser_join_codes WHERE company_id = $1`, plain.ID))
		require.Zero(t, r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1`, plain.ID))
	})

	t.Run("not on the platform's host", func(t *testing.T) {
		resp := r.env.Do(t, http.MethodGet, r.env.PublicURL(browserjoin.Path), nil)
		require.Equal(t, http.StatusNotFound, resp.Status)
		require.Empty(t, resp.Header.Values("Set-Cookie"))
	})
}

// TestBrowserJoinAuthorize is step 2: the Personal Agent authorizes a code with its
// Session header and, signed in, its access token.
func TestBrowserJoinAuthorize(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newCompany(t, "shop", "shop.example", nil, nil)
	other := r.newCompany(t, "other", "other.example", nil, nil)
	tok := r.signIn(t, shop, "orders:read")

	codeRow := func(t *testing.T, code string) (clientID, sid *string, account *int64, scopes []string, authorized bool) {
		t.Helper()
		var at *time.Time
		require.NoError(t, r.env.Pool.QueryRow(t.Context(), `SELECT client_id, sid, account_id, scopes, authorized_at
			FROM browser_join_codes WHERE code = sha256(convert_to($1, 'UTF8'))`, code).
			Scan(&clientID, &sid, &account, &scopes, &at))
		return clientID, sid, account, scopes, at != nil
	}

	t.Run("signed out starts the Session", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		sid := newJoinSID()
		resp := r.authorize(t, shop, code, sid, "")
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
		require.Empty(t, resp.Body)
		require.Empty(t, resp.Header.Values("Set-Cookie"), "step 2 sets no cookie")
		require.Equal(t, 1, r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1 AND client_id = $2
			AND sid = $3 AND user_id = $4 AND ended_at IS NULL`, shop.ID, r.agent.ClientID, sid, joinUserID(sid)))
		clientID, gotSID, account, scopes, authorized := codeRow(t, code)
		require.True(t, authorized)
		require.Equal(t, r.agent.ClientID, *clientID)
		require.Equal(t, sid, *gotSID)
		require.Nil(t, account)
		require.Empty(t, scopes)
	})

	t.Run("declared by the header counts for the browser", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		sid := newJoinSID()
		req, err := http.NewRequest(http.MethodPost, r.env.URL(shop.Domain, browserjoin.AuthorizePath),
			strings.NewReader(`{"code": "`+code+`"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Poppy-Extensions", `"gift-wrap";v="1", "operations";v="3"`)
		r.agent.Sign(t, req, peers.SessionClaims{Aud: shop.Aud, SID: sid, Sub: joinUserID(sid)}, peers.SessionOptions{})
		resp := peers.Send(t, r.env.Client, req)
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
		var ext map[string]string
		require.NoError(t, r.env.Pool.QueryRow(t.Context(), `SELECT extensions FROM browser_join_codes
			WHERE code = sha256(convert_to($1, 'UTF8'))`, code).Scan(&ext))
		require.Equal(t, "3", ext["operations"])
	})

	t.Run("signed in records account and scopes", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		sid := newJoinSID()
		r.mustAuthorize(t, shop, code, sid, tok.AccessToken)
		_, gotSID, account, scopes, authorized := codeRow(t, code)
		require.True(t, authorized)
		require.Equal(t, sid, *gotSID)
		require.NotNil(t, account)
		require.Equal(t, shop.Ada, *account)
		require.Equal(t, []string{"orders:read"}, scopes)
		// The Session is bound to the account, as at any resource.
		require.Equal(t, 1, r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1 AND sid = $2 AND account_id = $3`,
			shop.ID, sid, shop.Ada))
	})

	t.Run("an existing Session", func(t *testing.T) {
		b := r.browser(t)
		sid := newJoinSID()
		r.mustAuthorize(t, shop, b.mustOpen(t, shop.Domain), sid, "")
		r.mustAuthorize(t, shop, b.mustOpen(t, shop.Domain), sid, tok.AccessToken)
		r.mustAuthorize(t, shop, b.mustOpen(t, shop.Domain), sid, "")
		require.Equal(t, 1, r.count(t, `SELECT count(*) FROM sessions WHERE company_id = $1 AND sid = $2`, shop.ID, sid))
	})

	t.Run("unknown JSON members are ignored", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		resp := r.authorizeAs(t, r.agent, shop, shop.Domain,
			map[string]any{"code": code, "later": map[string]any{"x": 1}, "note": "hi"}, newJoinSID(), "")
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	})

	t.Run("refused codes", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			code func(t *testing.T) string
		}{
			{"unknown", func(*testing.T) string { return "bc_" + strings.Repeat("A", 26) }},
			{"empty", func(*testing.T) string { return "" }},
			{"no prefix", func(t *testing.T) string {
				return strings.TrimPrefix(r.browser(t).mustOpen(t, shop.Domain), "bc_")
			}},
			{"other prefix", func(t *testing.T) string {
				return "xx_" + strings.TrimPrefix(r.browser(t).mustOpen(t, shop.Domain), "bc_")
			}},
			{"too long", func(*testing.T) string { return "bc_" + strings.Repeat("A", 100) }},
			{"bad characters", func(*testing.T) string { return "bc_AAAA-AAAA/AAAA" }},
			{"lower-cased", func(t *testing.T) string { return strings.ToLower(r.browser(t).mustOpen(t, shop.Domain)) }},
			{"space around", func(t *testing.T) string { return " " + r.browser(t).mustOpen(t, shop.Domain) + " " }},
			{"expired", func(t *testing.T) string {
				code := r.browser(t).mustOpen(t, shop.Domain)
				r.exec(t, `UPDATE browser_join_codes SET expires_at = now() - interval '1 second'
					WHERE code = sha256(convert_to($1, 'UTF8'))`, code)
				return code
			}},
			{"already authorized", func(t *testing.T) string {
				code := r.browser(t).mustOpen(t, shop.Domain)
				r.mustAuthorize(t, shop, code, newJoinSID(), "")
				return code
			}},
			{"already submitted", func(t *testing.T) string {
				b := r.browser(t)
				code := b.mustOpen(t, shop.Domain)
				require.Equal(t, http.StatusBadRequest, b.submit(t, shop.Domain, code).Status)
				return code
			}},
			{"from another Company's domain", func(t *testing.T) string { return r.browser(t).mustOpen(t, other.Domain) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code := tc.code(t)
				sid := newJoinSID()
				resp := r.authorize(t, shop, code, sid, "")
				requireJoinError(t, resp, http.StatusBadRequest, "invalid_request")
				require.Empty(t, resp.Header.Values("Set-Cookie"))
			})
		}
	})

	t.Run("authorized twice, the second time with the same Session", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		sid := newJoinSID()
		r.mustAuthorize(t, shop, code, sid, "")
		requireJoinError(t, r.authorize(t, shop, code, sid, tok.AccessToken), http.StatusBadRequest, "invalid_request")
		// The first authorization stands.
		_, _, account, _, _ := codeRow(t, code)
		require.Nil(t, account)
	})

	t.Run("a code from another Company's domain stays usable there", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, other.Domain)
		requireJoinError(t, r.authorize(t, shop, code, newJoinSID(), ""), http.StatusBadRequest, "invalid_request")
		sid := newJoinSID()
		r.mustAuthorize(t, other, code, sid, "")
		require.Equal(t, http.StatusSeeOther, b.submit(t, other.Domain, code).Status)
	})

	t.Run("body errors", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		for _, body := range [][]byte{[]byte(`{"code":`), []byte(`[]`), []byte(`{"code": 5}`), []byte(``)} {
			resp := r.authorizeAs(t, r.agent, shop, shop.Domain, body, newJoinSID(), "")
			require.Equal(t, http.StatusBadRequest, resp.Status, "%s: %s", body, resp.Body)
		}
		// The code is still good.
		r.mustAuthorize(t, shop, code, newJoinSID(), "")
	})

	t.Run("no Session header", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		requireJoinError(t, r.authorize(t, shop, code, "", ""), http.StatusBadRequest, "invalid_session")
		// Nor with just an access token.
		requireJoinError(t, r.authorize(t, shop, code, "", tok.AccessToken), http.StatusBadRequest, "invalid_session")
		// The code was not used up.
		r.mustAuthorize(t, shop, code, newJoinSID(), "")
	})

	t.Run("a Session JWT for another Company", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		req := newJoinAuthorizeRequest(t, r, shop.Domain, code)
		r.agent.Sign(t, req, joinSessionClaims(other, newJoinSID(), ""), joinNoOptions)
		requireJoinError(t, peers.Send(t, r.env.Client, req), http.StatusBadRequest, "invalid_session")
		r.mustAuthorize(t, shop, code, newJoinSID(), "")
	})

	t.Run("bad token", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		sid := newJoinSID()
		resp := r.authorize(t, shop, code, sid, "not-a-token")
		requireJoinError(t, resp, http.StatusUnauthorized, "invalid_token")
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), "invalid_token")
		// Another Company's token.
		otherTok := r.signIn(t, other, "orders:read")
		requireJoinError(t, r.authorize(t, shop, code, newJoinSID(), otherTok.AccessToken), http.StatusUnauthorized, "invalid_token")
		// The code was not used up.
		r.mustAuthorize(t, shop, code, newJoinSID(), "")
	})

	t.Run("a revoked token", func(t *testing.T) {
		gone := r.signIn(t, shop, "orders:read")
		r.revoke(t, shop, gone.RefreshToken)
		code := r.browser(t).mustOpen(t, shop.Domain)
		requireJoinError(t, r.authorize(t, shop, code, newJoinSID(), gone.AccessToken), http.StatusUnauthorized, "invalid_token")
	})

	t.Run("not JSON", func(t *testing.T) {
		code := r.browser(t).mustOpen(t, shop.Domain)
		req := newJoinAuthorizeRequest(t, r, shop.Domain, code)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.agent.Sign(t, req, joinSessionClaims(shop, newJoinSID(), ""), joinNoOptions)
		resp := peers.Send(t, r.env.Client, req)
		require.Equal(t, http.StatusUnsupportedMediaType, resp.Status, "%s", resp.Body)
	})

	t.Run("GET is not allowed", func(t *testing.T) {
		resp := r.env.Do(t, http.MethodGet, r.env.URL(shop.Domain, browserjoin.AuthorizePath), nil)
		require.Equal(t, http.StatusMethodNotAllowed, resp.Status, "%s", resp.Body)
	})
}

// TestBrowserJoinSubmit is step 3: the browser posts the code with its join cookie and
// gets the Session's cookie.
func TestBrowserJoinSubmit(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newCompany(t, "shop", "shop.example", nil, nil)
	landing := r.newCompany(t, "landing", "landing.example", map[string]any{"landing_path": "/welcome"}, nil)

	t.Run("signed in", func(t *testing.T) {
		tok := r.signIn(t, shop, "orders:read", "orders:write")
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		sid := newJoinSID()
		r.mustAuthorize(t, shop, code, sid, tok.AccessToken)
		resp := b.submit(t, shop.Domain, code)
		require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
		require.Equal(t, "/", resp.Header.Get("Location"))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))

		cookies := joinSetCookies(t, resp)
		require.Len(t, cookies, 2, "%v", resp.Header.Values("Set-Cookie"))
		sc := cookies[joinSessionCookie]
		require.NotNil(t, sc, "%v", resp.Header.Values("Set-Cookie"))
		require.Equal(t, "__Host-poppy_session", sc.Name)
		require.GreaterOrEqual(t, len(sc.Value), 40, "unguessable")
		require.Equal(t, "/", sc.Path)
		require.Empty(t, sc.Domain, "host-only")
		require.True(t, sc.Secure)
		require.True(t, sc.HttpOnly)
		require.Positive(t, sc.MaxAge)
		require.LessOrEqual(t, sc.MaxAge, int(joinIdleTimeout/time.Second), "the cookie does not outlive the Session")
		require.NotEqual(t, http.SameSiteNoneMode, sc.SameSite)

		join := cookies[tenant.JoinCookie]
		require.NotNil(t, join, "the join cookie is cleared")
		require.Empty(t, join.Value)
		require.Negative(t, join.MaxAge)
		require.Equal(t, "/", join.Path)
		require.True(t, join.Secure)

		// The browser now holds the Session cookie and no join cookie.
		require.Equal(t, []string{joinSessionCookie}, b.cookieNames(shop.Domain))
		require.Equal(t, sc.Value, b.cookie(shop.Domain, joinSessionCookie))
		// Stored hashed.
		require.Zero(t, r.count(t, `SELECT count(*) FROM web_sessions WHERE token = convert_to($1, 'UTF8')`, sc.Value))
		require.Equal(t, 1, r.count(t, `SELECT count(*) FROM web_sessions WHERE token = sha256(convert_to($1, 'UTF8'))`, sc.Value))

		r.requireSignedIn(t, shop, sc.Value, sid, shop.Ada, "orders:read", "orders:write")
		in := r.introspect(t, shop, sc.Value)
		require.NotNil(t, in.ExpiresAt)
		require.WithinDuration(t, time.Now().Add(time.Duration(sc.MaxAge)*time.Second), *in.ExpiresAt, time.Minute)
		require.Empty(t, in.AgentID)
	})

	t.Run("signed out", func(t *testing.T) {
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, "")
		r.requireSignedOut(t, shop, cookie, sid)
	})

	t.Run("an Agent ID", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, shop.Domain)
		sid := newJoinSID()
		req := newJoinAuthorizeRequest(t, r, shop.Domain, code)
		cl := joinSessionClaims(shop, sid, "")
		cl.AgentID = "agt_travel"
		r.agent.Sign(t, req, cl, joinNoOptions)
		require.Equal(t, http.StatusNoContent, peers.Send(t, r.env.Client, req).Status)
		require.Equal(t, http.StatusSeeOther, b.submit(t, shop.Domain, code).Status)
		in := r.introspect(t, shop, b.cookie(shop.Domain, joinSessionCookie))
		require.True(t, in.Active)
		require.Equal(t, "agt_travel", in.AgentID)
	})

	t.Run("the configured landing path", func(t *testing.T) {
		b := r.browser(t)
		code := b.mustOpen(t, landing.Domain)
		r.mustAuthorize(t, landing, code, newJoinSID(), "")
		resp := b.submit(t, landing.Domain, code)
		require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
		require.Equal(t, "/welcome", resp.Header.Get("Location"))
	})

	t.Run("a Session with a short idle timeout gets a short cookie", func(t *testing.T) {
		brief := r.newCompany(t, "brief", "brief.example", nil,
			map[string]any{"sessions": map[string]any{"idle_timeout_seconds": 600}})
		b := r.browser(t)
		code := b.mustOpen(t, brief.Domain)
		r.mustAuthorize(t, brief, code, newJoinSID(), "")
		resp := b.submit(t, brief.Domain, code)
		require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
		sc := joinSetCookies(t, resp)[joinSessionCookie]
		require.NotNil(t, sc)
		require.Positive(t, sc.MaxAge)
		require.LessOrEqual(t, sc.MaxAge, 600)
	})

	t.Run("the Company's cookie name", func(t *testing.T) {
		named := r.newCompany(t, "named", "named.example", map[string]any{"cookie_name": "__Host-named_sess"}, nil)
		b := r.browser(t)
		code := b.mustOpen(t, named.Domain)
		sid := newJoinSID()
		r.mustAuthorize(t, named, code, sid, "")
		resp := b.submit(t, named.Domain, code)
		require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
		cookies := joinSetCookies(t, resp)
		require.NotNil(t, cookies["__Host-named_sess"], "%v", resp.Header.Values("Set-Cookie"))
		require.Nil(t, cookies[joinSessionCookie])
		r.requireSignedOut(t, named, cookies["__Host-named_sess"].Value, sid)
	})

	t.Run("a cookie of one Company means nothing to another", func(t *testing.T) {
		b := r.browser(t)
		sid := newJoinSID()
		cookie := r.join(t, b, shop, sid, "")
		r.requireInactive(t, landing, cookie)
		r.requireSignedOut(t, shop, cookie, sid)
	})

	t.Run("introspect and end need a cookie", func(t *testing.T) {
		for _, path := range []string{"/web-sessions/introspect", "/web-sessions/end"} {
			requireJoinError(t, r.companyAPI(t, shop, path, map[string]any{}), http.StatusBadRequest, "invalid_request")
			requireJoinError(t, r.companyAPI(t, shop, path, map[string]any{"cookie": "x", "extra": 1}), http.StatusBadRequest, "invalid_request")
			resp := r.env.Do(t, http.MethodPost, r.env.PublicURL("/company/v1"+path), map[string]any{"cookie": "x"})
			require.Equal(t, http.StatusUnauthorized, resp.Status)
		}
		r.requireInactive(t, shop, "unknown")
		r.requireInactive(t, shop, strings.Repeat("x", 300))
		resp := r.companyAPI(t, shop, "/web-sessions/end", map[string]any{"cookie": "unknown"})
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	})
}

// TestBrowserJoinCookieDomain: with web.cookie_domain the Session cookie covers the
// Company's hosts under it; on a Company domain outside it, the cookie is
// host-only, since a browser refuses a Domain the host is not within.
func TestBrowserJoinCookieDomain(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newCompany(t, "shop", "shop.example",
		map[string]any{"cookie_name": "shop_session", "cookie_domain": "shop.example"},
		map[string]any{"domains": []string{"www.shop.example", "shop-two.test"}})

	for _, tc := range []struct {
		host, domain string
	}{
		{"shop.example", "shop.example"},
		{"www.shop.example", "shop.example"},
		{"shop-two.test", ""},
	} {
		t.Run(tc.host, func(t *testing.T) {
			b := r.browser(t)
			code := b.mustOpen(t, tc.host)
			sid := newJoinSID()
			r.mustAuthorize(t, &joinCompany{Domain: tc.host, Aud: shop.Aud}, code, sid, "")
			resp := b.submit(t, tc.host, code)
			require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
			sc := joinSetCookies(t, resp)["shop_session"]
			require.NotNil(t, sc, "%v", resp.Header.Values("Set-Cookie"))
			require.Equal(t, tc.domain, sc.Domain)
			require.True(t, sc.Secure)
			require.True(t, sc.HttpOnly)
			require.Equal(t, "/", sc.Path)
			// The browser keeps it and sends it back.
			require.Equal(t, sc.Value, b.cookie(tc.host, "shop_session"))
			r.requireSignedOut(t, shop, sc.Value, sid)
		})
	}
}
