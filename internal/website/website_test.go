package website_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
	"github.com/poppyhost/poppyhost/internal/website"
)

// The website proxy (spec 6, step 4; DESIGN.md "Hosts and routes")
// through the HTTPS test server: every path of a Company domain the
// platform does not serve goes to web.origin, a test origin that verifies
// Poppy-Verified (aud: its BaseURL, the registered web.origin) and records
// what it received. A browser joins over HTTP, with a cookie jar, as in
// spec 6's three steps. The test origin refuses a request without a valid
// Poppy-Verified (401 {"error":"unverified"}) after recording it, which is
// how an ordinary visitor's request shows up.

const webPassword = "correct horse battery staple"

// webScopes are the test Companies' scopes.
var webScopes = map[string]any{
	"orders:read":  "See your orders",
	"orders:write": "Change your orders",
	"returns:read": "See your returns",
}

// forgedVerified is a Poppy-Verified a browser made up.
const forgedVerified = "eyJhbGciOiJub25lIn0.eyJhY2NvdW50IjoiMSJ9."

// webRules are the scope rules of the test Companies: orders need
// orders:read, changing them orders:write too.
var webRules = []any{
	map[string]any{"path": "/account/orders", "scopes": []string{"orders:read"}},
	map[string]any{"path": "/account/orders", "methods": []string{"POST"}, "scopes": []string{"orders:read", "orders:write"}},
}

// webSite is a platform with a Company whose website is a test origin, and
// a Personal Agent.
type webSite struct {
	env    *testkit.Env
	agent  *peers.Agent
	origin *peers.Origin
	slug   string
	issuer string // also the Company's identifier
	domain string
	cookie string // the Session cookie's name
}

// newWebSite starts a platform for a test named name with Company shop on
// shop.example, its origin on origin-{name}.test; web is merged over its
// "web" settings.
func newWebSite(t *testing.T, name string, web map[string]any) *webSite {
	t.Helper()
	env := testkit.Setup(t)
	s := &webSite{env: env, agent: env.StartAgent(t, "agent-"+name+".test"), slug: "shop",
		issuer: env.PublicURL("/t/shop"), domain: "shop.example", cookie: tenant.DefaultWebCookie}
	s.origin = env.StartOrigin(t, "origin-"+name+".test", s.issuer, s.issuer)
	w := map[string]any{"browser_join": true, "origin": s.origin.BaseURL(), "scope_rules": webRules}
	maps.Copy(w, web)
	if n, ok := w["cookie_name"].(string); ok {
		s.cookie = n
	}
	env.CreateCompany(t, map[string]any{
		"slug":         s.slug,
		"organization": map[string]any{"name": "Shop", "domain": s.domain},
		"auth":         map[string]any{"scopes": webScopes},
		"web":          w,
	})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+s.slug+"/accounts",
		map[string]any{"username": "ada", "password": webPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return s
}

// url is path on the Company's domain.
func (s *webSite) url(path string) string { return s.env.URL(s.domain, path) }

// signIn signs ada in with scopes and returns the access token.
func (s *webSite) signIn(t *testing.T, scopes ...string) string {
	t.Helper()
	return s.env.SignIn(t, s.agent, s.issuer, "ada", webPassword, scopes, "").AccessToken
}

// webBrowser is the Personal Agent's browser: a client with a cookie jar.
type webBrowser struct {
	jar    *cookiejar.Jar
	client *http.Client
}

func (s *webSite) browser(t *testing.T) *webBrowser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &webBrowser{jar: jar, client: &http.Client{Transport: s.env.Client.Transport, Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// join joins a new browser to Session sid: signed in with token, or
// signed out without.
func (s *webSite) join(t *testing.T, sid, token string) *webBrowser {
	t.Helper()
	b := s.browser(t)
	// Step 1: the page, its code and the join cookie.
	page := peers.Send(t, b.client, s.request(t, http.MethodGet, browserjoin.Path, nil))
	require.Equal(t, http.StatusOK, page.Status, "%s", page.Body)
	m := regexpCode.FindSubmatch(page.Body)
	require.NotNil(t, m, "no code in %s", page.Body)
	code := string(m[1])

	// Step 2: the Personal Agent authorizes it.
	req := s.request(t, http.MethodPost, browserjoin.AuthorizePath, `{"code":"`+code+`"}`)
	req.Header.Set("Content-Type", "application/json")
	s.agent.Sign(t, req, peers.SessionClaims{Aud: s.issuer, SID: sid, Sub: "usr_ada", AccessToken: token},
		peers.SessionOptions{})
	resp := peers.Send(t, s.env.Client, req)
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)

	// Step 3: the browser submits it and gets the Session cookie.
	req = s.request(t, http.MethodPost, browserjoin.Path, url.Values{"code": {code}}.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp = peers.Send(t, b.client, req)
	require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
	require.NotEmpty(t, b.token(s), "no Session cookie after the join")
	return b
}

// token is the browser's Session cookie value, or "".
func (b *webBrowser) token(s *webSite) string {
	u, _ := url.Parse(s.url("/"))
	for _, ck := range b.jar.Cookies(u) {
		if ck.Name == s.cookie {
			return ck.Value
		}
	}
	return ""
}

// regexpCode finds the code in the join page's form.
var regexpCode = regexp.MustCompile(`name="code" value="([A-Za-z0-9_]+)"`)

// request builds a request for path on the Company's domain; body is nil
// or a string.
func (s *webSite) request(t *testing.T, method, path string, body any, header ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	if b, ok := body.(string); ok {
		rd = strings.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url(path), rd)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return req
}

// do sends a request for path with client (the platform's plain client,
// without cookies, when nil).
func (s *webSite) do(t *testing.T, client *http.Client, method, path string, body any, header ...string) *peers.Response {
	t.Helper()
	if client == nil {
		client = s.env.Client
	}
	return peers.Send(t, client, s.request(t, method, path, body, header...))
}

// webHostile are headers a browser might send that must not reach the
// website as sent.
var webHostile = []string{
	verified.Header, forgedVerified,
	"Poppy-Session", "eyJ0eXAiOiJwb3BweS1zZXNzaW9uK2p3dCJ9.e30.sig",
	"X-Forwarded-For", "203.0.113.7",
	"X-Forwarded-Host", "evil.example",
	"X-Forwarded-Proto", "http",
	"X-Forwarded-Prefix", "/admin",
	"X-Real-Ip", "203.0.113.7",
	"Forwarded", "for=203.0.113.7;host=evil.example;proto=http",
	"X-Client-Note", "end-to-end",
	"Authorization", "Basic c3RhZmY6c3RhZ2luZw==",
	// Only the platform sets these, for an approved revision.
	"Idempotency-Key", "4f1c2e8a-9b7d-4c3e-a5f6-0d8b1e2c3a4f",
	"Poppy-Approval", `operation_id="op_1", revision="r1", approver="user"`,
}

// requireForwarded checks what the website got of webHostile and the
// browser's cookies.
func requireForwarded(t *testing.T, s *webSite, got peers.Received, cookie string) {
	t.Helper()
	for _, h := range []string{"Poppy-Session", "X-Forwarded-Prefix", "X-Real-Ip", "Forwarded", "Idempotency-Key",
		"Poppy-Approval"} {
		require.Empty(t, got.Header.Values(h), "%s reached the website", h)
	}
	require.NotEqual(t, forgedVerified, got.Header.Get(verified.Header))
	require.Equal(t, []string{s.domain + ":" + s.env.Port}, got.Header.Values("X-Forwarded-Host"))
	require.Equal(t, []string{"https"}, got.Header.Values("X-Forwarded-Proto"))
	require.Equal(t, []string{"127.0.0.1"}, got.Header.Values("X-Forwarded-For"))
	require.Equal(t, "end-to-end", got.Header.Get("X-Client-Note"))
	require.Equal(t, "Basic c3RhZmY6c3RhZ2luZw==", got.Header.Get("Authorization"), "the website's own credentials pass")
	require.Equal(t, strings.TrimPrefix(s.origin.BaseURL(), "https://"), got.Host, "Host names the origin")
	if cookie == "" {
		require.Empty(t, got.Header.Values("Cookie"))
	} else {
		require.Equal(t, []string{cookie}, got.Header.Values("Cookie"))
	}
}

// requirePage checks a website error page: HTML, never stored, with each
// of texts.
func requirePage(t *testing.T, resp *peers.Response, status int, texts ...string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	for _, s := range texts {
		require.Contains(t, string(resp.Body), s)
	}
}

// TestWebsiteJoinedBrowser: a joined browser's requests reach the website
// with Poppy-Verified stating its Session (and account and scopes when
// signed in), and the browser's other cookies, not ours.
func TestWebsiteJoinedBrowser(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "joined", nil)

	t.Run("signed in", func(t *testing.T) {
		b := s.join(t, "sidWebJoined1", s.signIn(t, "orders:read"))
		resp := s.do(t, b.client, http.MethodGet, "/account/orders/o1?x=1&y=a%20b", nil,
			append([]string{"Cookie", "theme=dark; shop_login=abc"}, webHostile...)...)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		got := s.origin.Last()
		require.NoError(t, got.VerifyErr)
		require.Equal(t, "/account/orders/o1", got.Path)
		require.Equal(t, "x=1&y=a%20b", got.RawQuery)
		requireForwarded(t, s, got, "theme=dark; shop_login=abc")
		require.Len(t, got.Header.Values(verified.Header), 1)

		c := got.Claims
		require.Equal(t, s.issuer, c.Issuer)
		require.Equal(t, s.origin.BaseURL(), c.Audience, "aud is web.origin exactly")
		require.Equal(t, "sidWebJoined1", c.SID)
		require.Equal(t, s.agent.ClientID, c.ClientID)
		require.Equal(t, "usr_ada", c.UserID)
		require.NotEmpty(t, c.Account)
		require.Equal(t, []string{"orders:read"}, c.Scopes)
		require.Equal(t, http.MethodGet, c.Method)
		require.Equal(t, "/account/orders/o1", c.Path)
		require.Empty(t, c.API)
		require.JSONEq(t, `{"method":"GET","path":"/account/orders/o1","query":"x=1&y=a%20b","body":"",
			"account":"`+c.Account+`","scopes":["orders:read"]}`, string(resp.Body))

		// A body streams to the website, and its answer back.
		resp = s.do(t, b.client, http.MethodPut, "/profile", strings.Repeat("b", 100<<10))
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Len(t, s.origin.Last().Body, 100<<10)
	})

	t.Run("signed out", func(t *testing.T) {
		b := s.join(t, "sidWebJoined2", "")
		resp := s.do(t, b.client, http.MethodGet, "/products", nil, "Cookie", "theme=dark")
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		got := s.origin.Last()
		require.NoError(t, got.VerifyErr)
		require.Equal(t, []string{"theme=dark"}, got.Header.Values("Cookie"))
		require.Equal(t, "sidWebJoined2", got.Claims.SID)
		require.Empty(t, got.Claims.Account)
		require.Equal(t, []string{}, got.Claims.Scopes)
	})
}

// TestWebsiteVisitor: a browser without the Session cookie is an ordinary
// visitor: its requests pass as they came, without Poppy-Verified, and
// scope rules do not apply to them (the website handles its own logins).
// A Session cookie that is no longer active is stripped too, and the
// rules apply to its browser.
func TestWebsiteVisitor(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "visitor", nil)

	resp := s.do(t, nil, http.MethodGet, "/products?q=1", nil, append([]string{"Cookie", "theme=dark"}, webHostile...)...)
	require.Equal(t, http.StatusUnauthorized, resp.Status, "the origin's own answer: %s", resp.Body)
	require.JSONEq(t, `{"error":"unverified"}`, string(resp.Body))
	got := s.origin.Last()
	require.Error(t, got.VerifyErr)
	require.Equal(t, "/products", got.Path)
	require.Equal(t, "q=1", got.RawQuery)
	require.Empty(t, got.Header.Values(verified.Header), "a visitor's request has no Poppy-Verified")
	requireForwarded(t, s, got, "theme=dark")

	resp = s.do(t, nil, http.MethodPost, "/account/orders/o1", "x=1")
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Equal(t, 1, s.origin.Calls(http.MethodPost, "/account/orders/o1"), "rules apply to joined browsers only")

	// A cookie that acts for no web session.
	resp = s.do(t, nil, http.MethodGet, "/products", nil, "Cookie", s.cookie+"=Pz81kQunknown; theme=dark; "+tenant.JoinCookie+"=j")
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	got = s.origin.Last()
	require.Empty(t, got.Header.Values(verified.Header))
	require.Equal(t, []string{"theme=dark"}, got.Header.Values("Cookie"), "our cookies never reach the website")

	s.origin.Reset()
	resp = s.do(t, nil, http.MethodGet, "/account/orders", nil, "Cookie", s.cookie+"=Pz81kQunknown", "Accept", "text/html")
	requirePage(t, resp, http.StatusForbidden, "<code>orders:read</code>", "has ended")
	require.Empty(t, s.origin.Received())
}

// TestWebsiteScopeRules: the longest matching rule decides; a joined
// browser whose web session lacks its scopes gets a page naming them, and
// the website is not called.
func TestWebsiteScopeRules(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "rules", map[string]any{"scope_rules": append(slices.Clone(webRules),
		map[string]any{"path": "/account/", "methods": []string{"DELETE"}, "scopes": []string{"returns:read"}})})
	signedOut := s.join(t, "sidWebRules1", "")
	read := s.join(t, "sidWebRules2", s.signIn(t, "orders:read"))
	both := s.join(t, "sidWebRules3", s.signIn(t, "orders:read", "orders:write"))

	tests := []struct {
		name    string
		browser *webBrowser
		method  string
		path    string
		missing []string // nil: the website answers
	}{
		{"signed out", signedOut, http.MethodGet, "/account/orders", []string{"orders:read"}},
		{"signed out, below the rule's path", signedOut, http.MethodGet, "/account/orders/o1", []string{"orders:read"}},
		{"signed out, a prefix as a string", signedOut, http.MethodGet, "/account/ordersheet", []string{"orders:read"}},
		{"signed out, escaped", signedOut, http.MethodGet, "/account/%6Frders", []string{"orders:read"}},
		{"signed out, dot segments", signedOut, http.MethodGet, "/x/../account/orders", []string{"orders:read"}},
		{"signed out, repeated slashes", signedOut, http.MethodGet, "//account//orders", []string{"orders:read"}},
		{"signed out, encoded slash", signedOut, http.MethodGet, "/account%2Forders", []string{"orders:read"}},
		{"signed out, HEAD is GET", signedOut, http.MethodHead, "/account/orders", []string{"orders:read"}},
		{"signed out, other path", signedOut, http.MethodGet, "/account/profile", nil},
		{"signed out, other case", signedOut, http.MethodGet, "/Account/orders", nil},
		{"read", read, http.MethodGet, "/account/orders/o1", nil},
		{"read, method rule", read, http.MethodPost, "/account/orders/o1", []string{"orders:write"}},
		{"read and write, method rule", both, http.MethodPost, "/account/orders/o1", nil},
		{"a shorter path's method rule", both, http.MethodDelete, "/account/profile", []string{"returns:read"}},
		{"a longer path decides", both, http.MethodDelete, "/account/orders/o1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.origin.Reset()
			var body any
			if tt.method == http.MethodPost {
				body = "x=1"
			}
			resp := s.do(t, tt.browser.client, tt.method, tt.path, body)
			if tt.missing == nil {
				require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
				require.Len(t, s.origin.Received(), 1)
				return
			}
			require.Empty(t, s.origin.Received(), "the website was called")
			if tt.method == http.MethodHead {
				require.Equal(t, http.StatusForbidden, resp.Status)
				return
			}
			texts := []string{"More access needed"}
			for _, sc := range tt.missing {
				texts = append(texts, "<code>"+sc+"</code>")
			}
			requirePage(t, resp, http.StatusForbidden, texts...)
			for _, sc := range []string{"orders:read", "orders:write", "returns:read"} {
				if !slices.Contains(tt.missing, sc) {
					require.NotContains(t, string(resp.Body), "<code>"+sc+"</code>")
				}
			}
		})
	}

	t.Run("JSON when asked for", func(t *testing.T) {
		resp := s.do(t, read.client, http.MethodPost, "/account/orders/o1", "x=1", "Accept", "application/json")
		require.Equal(t, http.StatusForbidden, resp.Status)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		body := resp.JSON(t)
		require.Equal(t, "insufficient_scope", body["error"])
		require.Equal(t, "orders:write", body["scope"])
	})
}

// TestWebsiteSignOut: the website signs the browser out with
// Poppy-Web-Session: end. The web session ends and the cookie is
// deleted, with the Domain it was set with; later requests are
// unverified, even with the old cookie.
func TestWebsiteSignOut(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "signout", map[string]any{"cookie_name": "shop_session", "cookie_domain": "shop.example"})
	b := s.join(t, "sidWebOut1", s.signIn(t, "orders:read"))
	old := b.token(s)
	s.origin.Handle(http.MethodPost, "/logout", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(website.WebSessionHeader, "end")
		w.Header().Add("Set-Cookie", "shop_login=; Path=/; Max-Age=0")
		w.WriteHeader(http.StatusSeeOther)
	})

	resp := s.do(t, b.client, http.MethodPost, "/logout", "")
	require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
	require.Empty(t, resp.Header.Values(website.WebSessionHeader))
	require.ElementsMatch(t, []string{"shop_login=; Path=/; Max-Age=0",
		"shop_session=; Path=/; Domain=shop.example; Max-Age=0; HttpOnly; Secure; SameSite=Lax"},
		resp.Header.Values("Set-Cookie"))
	require.Empty(t, b.token(s), "the browser dropped the Session cookie")

	resp = s.do(t, b.client, http.MethodGet, "/products", nil)
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Empty(t, s.origin.Last().Header.Values(verified.Header))

	resp = s.do(t, nil, http.MethodGet, "/products", nil, "Cookie", "shop_session="+old)
	require.Equal(t, http.StatusUnauthorized, resp.Status, "the web session ended: %s", resp.Body)
	got := s.origin.Last()
	require.Empty(t, got.Header.Values(verified.Header))
	require.Empty(t, got.Header.Values("Cookie"))

	// Without a Session cookie there is nothing to end: the header is
	// dropped all the same.
	resp = s.do(t, nil, http.MethodPost, "/logout", "")
	require.Equal(t, http.StatusUnauthorized, resp.Status, "the origin refuses the unverified request: %s", resp.Body)
}

// TestWebsiteOriginCookies: the website sets its own cookies on the
// Company's domain, but not ours, in 1xx answers either.
func TestWebsiteOriginCookies(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "cookies", nil)
	b := s.join(t, "sidWebCookies1", "")
	forged := []string{
		tenant.DefaultWebCookie + "=forged; Path=/; Secure",
		"__host-POPPY_session=forged; Path=/; Secure",
		tenant.JoinCookie + "=forged; Path=/; Secure; SameSite=Strict",
		"=" + tenant.DefaultWebCookie + "=nameless",
		tenant.DefaultWebCookie,
	}
	s.origin.Handle(http.MethodGet, "/login", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Add("Set-Cookie", tenant.DefaultWebCookie+"=early; Path=/; Secure")
		w.Header().Add("Set-Cookie", "hint=1")
		w.Header().Set(website.WebSessionHeader, "end")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Set-Cookie")
		w.Header().Del(website.WebSessionHeader)
		for _, c := range forged {
			w.Header().Add("Set-Cookie", c)
		}
		w.Header().Add("Set-Cookie", "shop_login=abc; Path=/; Secure; HttpOnly")
		w.Header().Add("Set-Cookie", "theme=dark")
		_, _ = io.WriteString(w, "welcome")
	})
	var early []textproto.MIMEHeader
	req := s.request(t, http.MethodGet, "/login", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			early = append(early, h)
			return nil
		}}))
	resp := peers.Send(t, b.client, req)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "welcome", string(resp.Body))
	require.Equal(t, []string{"shop_login=abc; Path=/; Secure; HttpOnly", "theme=dark"}, resp.Header.Values("Set-Cookie"))
	require.Len(t, early, 1)
	require.Equal(t, "</style.css>; rel=preload", early[0].Get("Link"))
	require.Equal(t, []string{"hint=1"}, early[0].Values("Set-Cookie"))
	require.Empty(t, early[0].Values(website.WebSessionHeader))
	require.NotEmpty(t, b.token(s), "the 103's Poppy-Web-Session ended nothing")

	resp = s.do(t, b.client, http.MethodGet, "/products", nil)
	require.Equal(t, http.StatusOK, resp.Status, "the browser is still joined: %s", resp.Body)
}

// TestWebsiteOriginDown: an origin that cannot be reached gets a 502 page
// (JSON when asked for).
func TestWebsiteOriginDown(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "down", nil)
	s.origin.Close()
	requirePage(t, s.do(t, nil, http.MethodGet, "/products", nil, "Accept", "text/html,*/*"), http.StatusBadGateway,
		"could not be reached")
	resp := s.do(t, nil, http.MethodGet, "/products", nil, "Accept", "application/json")
	require.Equal(t, http.StatusBadGateway, resp.Status)
	require.Equal(t, origin.CodeUnreachable, resp.JSON(t)["error"])
}

// TestWebsitePlatformPaths: the platform's own paths on a Company domain
// stay ours, whatever the method; a Company without web.origin has no
// website.
func TestWebsitePlatformPaths(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "paths", nil)

	resp := s.do(t, nil, http.MethodGet, "/.well-known/poppy.json", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	// On the port poppy.json was fetched at (the test's, not 443).
	require.Equal(t, s.url(browserjoin.Path), resp.JSON(t)["web"].(map[string]any)["browser_session_endpoint"])
	resp = s.do(t, nil, http.MethodGet, "/.well-known/oauth-protected-resource", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	resp = s.do(t, nil, http.MethodGet, browserjoin.Path, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.True(t, regexpCode.Match(resp.Body), "%s", resp.Body)
	resp = s.do(t, nil, http.MethodPut, "/.well-known/poppy.json", "")
	require.Equal(t, http.StatusMethodNotAllowed, resp.Status, "%s", resp.Body)
	resp = s.do(t, nil, http.MethodGet, browserjoin.AuthorizePath, nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.Status, "%s", resp.Body)
	require.Empty(t, s.origin.Received(), "the website got one of our paths")

	resp = s.do(t, nil, http.MethodGet, "/about", nil)
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Equal(t, 1, s.origin.Calls(http.MethodGet, "/about"))

	// A Company without a website.
	s.env.CreateCompany(t, map[string]any{"slug": "plain", "organization": map[string]any{"name": "Plain", "domain": "plain.example"}})
	resp = peers.Send(t, s.env.Client, mustRequest(t, http.MethodGet, s.env.URL("plain.example", "/about")))
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
	require.Equal(t, "not_found", resp.JSON(t)["error"])
	resp = peers.Send(t, s.env.Client, mustRequest(t, http.MethodGet, s.env.URL("plain.example", "/.well-known/poppy.json")))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, 1, s.origin.Calls("", "/about"))
}

func mustRequest(t *testing.T, method, rawURL string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	require.NoError(t, err)
	return req
}

// TestWebsiteUpgrade: a WebSocket-style upgrade over HTTP/1.1 passes to
// the website, and the connection then carries both ways.
func TestWebsiteUpgrade(t *testing.T) {
	t.Parallel()
	s := newWebSite(t, "upgrade", nil)
	b := s.join(t, "sidWebUpgrade1", "")
	s.origin.Handle(http.MethodGet, "/socket", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "upgrade: "+r.Header.Get("Upgrade"), http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Set-Cookie: "+tenant.DefaultWebCookie+"=forged\r\n\r\n")
		_ = rw.Flush()
		line, _ := rw.ReadString('\n')
		_, _ = io.WriteString(rw, "echo: "+line)
		_ = rw.Flush()
	})

	// No client timeout, which would hide the connection behind the body.
	h1 := s.env.HTTP1Client(t)
	h1.Jar, h1.Timeout = b.jar, 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := s.request(t, http.MethodGet, "/socket", nil, "Connection", "Upgrade", "Upgrade", "websocket").WithContext(ctx)
	resp, err := h1.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.Empty(t, resp.Header.Values("Set-Cookie"))
	conn, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "body %T", resp.Body)
	_, err = io.WriteString(conn, "hello\n")
	require.NoError(t, err)
	got, err := io.ReadAll(io.LimitReader(conn, int64(len("echo: hello\n"))))
	require.NoError(t, err)
	require.Equal(t, "echo: hello\n", string(got))
	require.NoError(t, s.origin.Last().VerifyErr)
}
