package api

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractBrowserJoin joins a browser to a Session of acme.
func contractBrowserJoin(t *testing.T, c *contract, f *fixture, acmeKey string) {
	env, issuer, agent, signIn := f.env, f.issuer, f.agent, f.signIn

	t.Run("browser join", func(t *testing.T) {
		// A browser joins a Session of acme over HTTP as a Personal Agent's
		// browser does (spec 6): the page sets the join cookie, the agent
		// authorizes the page's code, the form brings the Session cookie.
		// acme names it acme_poppy, for every host of acme.example, and
		// sends joined browsers to /welcome.
		const (
			host       = "acme.example"
			page       = "/poppy/browser-session"
			authorize  = page + "/authorize"
			form       = "application/x-www-form-urlencoded"
			introspect = "/company/v1/web-sessions/introspect"
			end        = "/company/v1/web-sessions/end"
		)
		in := func(sid, token string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: sid, AccessToken: token}, peers.SessionOptions{})
			}
		}
		// browser is a new browser of the Personal Agent: it keeps cookies
		// and does not follow redirects.
		browser := func() *http.Client {
			jar, err := cookiejar.New(nil)
			require.NoError(t, err)
			return &http.Client{Transport: env.Client.Transport, Jar: jar,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		}
		// open is step 1 in b; it returns the page's code.
		open := func(t *testing.T, b *http.Client) string {
			t.Helper()
			r := c.do(t, call{method: get, host: host, path: page, client: b, want: 200})
			code := formField(t, r.Body, "code")
			require.True(t, strings.HasPrefix(code, "bc_"), "%s", r.Body)
			return code
		}
		authorizeCode := func(t *testing.T, code, sid, token string, want int) *peers.Response {
			t.Helper()
			return c.do(t, call{method: post, host: host, path: authorize, session: in(sid, token),
				body: map[string]string{"code": code}, want: want})
		}
		submit := func(t *testing.T, b *http.Client, code string, want int) *peers.Response {
			t.Helper()
			return c.do(t, call{method: post, host: host, path: page, client: b, ctype: form,
				body: url.Values{"code": {code}}.Encode(), want: want})
		}
		// cookies parses the response's Set-Cookie headers by name.
		cookies := func(t *testing.T, r *peers.Response) map[string]*http.Cookie {
			t.Helper()
			out := map[string]*http.Cookie{}
			for _, line := range r.Header.Values("Set-Cookie") {
				ck, err := http.ParseSetCookie(line)
				require.NoError(t, err, line)
				out[ck.Name] = ck
			}
			return out
		}
		// join runs the three steps in b for Session sid, signed in with
		// token unless it is "", and returns the Session cookie's value.
		join := func(t *testing.T, b *http.Client, sid, token string) string {
			t.Helper()
			code := open(t, b)
			authorizeCode(t, code, sid, token, 204)
			r := submit(t, b, code, 303)
			ck := cookies(t, r)["acme_poppy"]
			require.NotNil(t, ck, "%v", r.Header)
			return ck.Value
		}
		lookup := func(t *testing.T, value string) map[string]any {
			t.Helper()
			return c.do(t, call{method: post, path: introspect, token: acmeKey, body: map[string]string{"cookie": value}, want: 200}).JSON(t)
		}
		inactive := map[string]any{"active": false}

		// A signed-in join. The page is never stored, framed or kept by
		// its opener, and its cookie is __Host- and SameSite=Strict.
		token := signIn(t, "alice", "correct horse")
		b := browser()
		r := c.do(t, call{method: get, host: host, path: page, client: b, want: 200})
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		assert.Equal(t, "DENY", r.Header.Get("X-Frame-Options"))
		assert.Equal(t, "same-origin", r.Header.Get("Cross-Origin-Opener-Policy"))
		assert.Contains(t, string(r.Body), "Acme Outfitters")
		joinCookie := cookies(t, r)["__Host-poppy_join"]
		require.NotNil(t, joinCookie)
		assert.Equal(t, http.SameSiteStrictMode, joinCookie.SameSite)
		code := formField(t, r.Body, "code")
		authorizeCode(t, code, "join-1", token, 204)
		r = authorizeCode(t, code, "join-1", token, 400)
		assert.Equal(t, "invalid_request", r.JSON(t)["error"], "a code is authorized once")
		r = submit(t, b, code, 303)
		assert.Equal(t, "/welcome", r.Header.Get("Location"))
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		set := cookies(t, r)
		session := set["acme_poppy"]
		require.NotNil(t, session)
		assert.Equal(t, []any{"/", "acme.example", 86400, true, true, http.SameSiteLaxMode},
			[]any{session.Path, session.Domain, session.MaxAge, session.Secure, session.HttpOnly, session.SameSite},
			"the Session cookie lives as long as an idle Session, on every host of cookie_domain")
		require.NotNil(t, set["__Host-poppy_join"])
		assert.Equal(t, -1, set["__Host-poppy_join"].MaxAge, "the join cookie is cleared")
		r = submit(t, b, code, 400)
		assert.Contains(t, string(r.Body), "was already used")
		assert.Empty(t, r.Header.Values("Set-Cookie"))
		first := session.Value
		ws := lookup(t, first)
		assert.Equal(t, true, ws["active"])
		assert.Equal(t, []any{agent.ClientID, "join-1", []any{"orders:read"}},
			[]any{ws["client_id"], ws["sid"], ws["scopes"]})
		assert.Regexp(t, `^[1-9][0-9]*$`, ws["account"])
		assert.NotEmpty(t, ws["expires_at"])

		// Step 4 through the website proxy: the origin gets the web
		// session's facts, never the cookie, and the scope rules hold.
		site := env.StartOrigin(t, "web.test", issuer, issuer)
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: map[string]any{"web": map[string]any{"origin": site.BaseURL()}}})
		resp, _ := c.send(t, call{method: get, host: host, path: "/welcome", client: b,
			header: map[string]string{"Cookie": "theme=dark"}})
		require.Equal(t, 200, resp.Status, "%s", resp.Body)
		got := site.Last()
		require.NoError(t, got.VerifyErr)
		assert.Equal(t, []any{site.BaseURL(), issuer, "join-1", ws["account"], []string{"orders:read"}},
			[]any{got.Claims.Audience, got.Claims.Issuer, got.Claims.SID, got.Claims.Account, got.Claims.Scopes})
		assert.NotContains(t, got.Header.Get("Cookie"), "acme_poppy")
		assert.Contains(t, got.Header.Get("Cookie"), "theme=dark", "the website's own cookies pass")
		resp, _ = c.send(t, call{method: post, host: host, path: "/orders", client: b, body: "{}"})
		assert.Equal(t, 403, resp.Status, "POST /orders needs orders:write")
		assert.Contains(t, string(resp.Body), "orders:write")

		// A later join replaces the cookie; a signed-out join acts for the
		// Session alone.
		second := join(t, b, "join-2", "")
		assert.Equal(t, inactive, lookup(t, first))
		ws = lookup(t, second)
		assert.Equal(t, []any{true, "join-2", "", []any{}}, []any{ws["active"], ws["sid"], ws["account"], ws["scopes"]})

		// The website signs the browser out with Poppy-Web-Session: end.
		site.Handle(get, "/signout", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Poppy-Web-Session", "end")
			w.WriteHeader(http.StatusNoContent)
		})
		resp, _ = c.send(t, call{method: get, host: host, path: "/signout", client: b})
		assert.Equal(t, 204, resp.Status)
		assert.Empty(t, resp.Header.Get("Poppy-Web-Session"))
		assert.Equal(t, inactive, lookup(t, second))
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: `{"web":{"origin":"https://www.acme.example"}}`})

		// A website of its own signs the browser out through the Company
		// API, at once; ending it again is fine.
		third := join(t, browser(), "join-3", "")
		assert.Equal(t, true, lookup(t, third)["active"])
		c.do(t, call{method: post, path: end, token: acmeKey, body: map[string]string{"cookie": third}, want: 204})
		c.do(t, call{method: post, path: end, token: acmeKey, body: map[string]string{"cookie": third}, want: 204})
		assert.Equal(t, inactive, lookup(t, third))
		assert.Equal(t, inactive, lookup(t, "no-such-cookie"))

		// A web session ends with its Session, and an ended Session
		// authorizes no code.
		fourth := join(t, browser(), "join-4", "")
		c.do(t, call{method: post, path: "/company/v1/sessions/end", token: acmeKey,
			body: map[string]string{"client_id": agent.ClientID, "sid": "join-4"}, want: 204})
		assert.Equal(t, inactive, lookup(t, fourth))
		r = authorizeCode(t, open(t, browser()), "join-4", "", 400)
		assert.Equal(t, "session_ended", r.JSON(t)["error"])

		// Step 3 fails for a code nobody authorized, a code submitted from
		// another browser than the page's, and a code used once already;
		// the first submission uses a code up, whatever the result.
		b2 := browser()
		code = open(t, b2)
		r = submit(t, b2, code, 400)
		assert.Contains(t, string(r.Body), "was not connected")
		assert.Empty(t, r.Header.Values("Set-Cookie"))
		authorizeCode(t, code, "join-5", "", 400)
		code = open(t, b2)
		authorizeCode(t, code, "join-5", "", 204)
		submit(t, browser(), code, 400)
		submit(t, b2, code, 400)
		r = submit(t, b2, "not-a-code", 400)
		assert.Contains(t, string(r.Body), "not valid")
		r = c.do(t, call{method: post, host: host, path: page, client: b2, ctype: form,
			body: "code=" + code + "&pad=" + strings.Repeat("x", 4<<10), want: 400})
		assert.Contains(t, string(r.Body), "could not be read", "the form may be at most 4 KiB")
		c.do(t, call{method: post, host: host, path: page, client: b2, body: map[string]string{"code": code}, want: 400, docRejects: true})

		// Step 2's errors.
		code = open(t, b2)
		for _, bad := range []call{
			{body: map[string]string{"code": "bc_NOSUCHCODE"}, session: in("join-6", ""), want: 400},
			{body: `{"code":7}`, session: in("join-6", ""), want: 400, docRejects: true},
			{body: `{"code":`, session: in("join-6", ""), want: 400, docRejects: true},
			{body: map[string]string{"code": code}, want: 400, docRejects: true},
			{body: map[string]string{"code": code}, session: in("join-6", bogus), want: 401},
			{body: padded(t, map[string]string{"code": code}, 4<<10), session: in("join-6", ""), want: 413},
			{body: map[string]string{"code": code}, ctype: "text/plain", session: in("join-6", ""), want: 415, docRejects: true},
		} {
			bad.method, bad.host, bad.path = post, host, authorize
			r = c.do(t, bad)
			if bad.want == 401 {
				assert.Equal(t, "invalid_token", r.JSON(t)["error"])
				assert.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
			}
		}
		authorizeCode(t, code, "join-6", "", 204)

		// The Company API's errors.
		for _, path := range []string{introspect, end} {
			for _, bad := range []call{
				{body: `{}`, want: 400, docRejects: true},
				{body: `{"cookie":""}`, want: 400, docRejects: true},
				{body: `{"cookie":"x","session":"y"}`, want: 400, docRejects: true},
				{body: `{"cookie":`, want: 400, docRejects: true},
				{body: padded(t, map[string]string{"cookie": "x"}, 4<<10), want: 413},
				{body: `{"cookie":"x"}`, ctype: "text/plain", want: 415, docRejects: true},
				{body: `{"cookie":"x"}`, token: "-", want: 401},
				{body: `{"cookie":"x"}`, token: admin, want: 401},
			} {
				bad.method, bad.path = post, path
				if bad.token == "" {
					bad.token = acmeKey
				}
				c.do(t, bad)
			}
			c.do(t, call{method: post, path: path, body: `{"cookie":"x"}`, want: 401, docRejects: true})
		}
	})
}
