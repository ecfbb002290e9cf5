package platform_test

import (
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestBrowserJoinChromiumSignedIn joins a real browser to a signed-in Session:
// it loads the page, the Personal Agent authorizes the code it read from
// the DOM with its access token, the browser clicks Continue and lands on
// the website, which the platform proxies to the Company's origin with
// Poppy-Verified for the Session and account.
func TestBrowserJoinChromiumSignedIn(t *testing.T) {
	t.Parallel()
	chromiumJoin(t, true)
}

// TestBrowserJoinChromiumSignedOut is the same join without an access token.
func TestBrowserJoinChromiumSignedOut(t *testing.T) {
	t.Parallel()
	chromiumJoin(t, false)
}

// joinWebsite is a Company whose web.origin is a test origin that answers its
// landing page with what Poppy-Verified said.
type joinWebsite struct {
	*joinCompany
	origin *peers.Origin
}

func (r *joinRig) newWebsite(t *testing.T) *joinWebsite {
	t.Helper()
	shop := r.newCompany(t, "shop", "shop.example", nil, nil)
	origin := r.env.StartOrigin(t, "origin.test", shop.Issuer, shop.Aud)
	r.patchSettings(t, shop, map[string]any{"web": map[string]any{"origin": origin.BaseURL()}})
	origin.Handle(http.MethodGet, "/", func(w http.ResponseWriter, req *http.Request) {
		cl := peers.OriginClaims(req)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		account := cl.Account
		if account == "" {
			account = "signed out"
		}
		_ = joinLandingPage.Execute(w, map[string]string{"SID": cl.SID, "Account": account,
			"Scopes": strings.Join(cl.Scopes, " ")})
	})
	return &joinWebsite{joinCompany: shop, origin: origin}
}

var joinLandingPage = template.Must(template.New("landing").Parse(`<!doctype html>
<title>Shop</title>
<h1>Welcome to the shop</h1>
<p>Session <span id="sid">{{.SID}}</span>, account <span id="account">{{.Account}}</span>,
scopes <span id="scopes">{{.Scopes}}</span>.</p>
`))

func chromiumJoin(t *testing.T, signedIn bool) {
	r := joinSetup(t)
	shop := r.newWebsite(t)
	b := chrome.Start(t, r.env.CA, shop.Domain)

	// Step 1: a top-level navigation to the page.
	resp := b.Load(chromedp.Navigate(r.env.URL(shop.Domain, browserjoin.Path)))
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)
	require.Equal(t, "no-store", joinHeader(resp, "Cache-Control"))
	require.Contains(t, joinHeader(resp, "Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "same-origin", joinHeader(resp, "Cross-Origin-Opener-Policy"))
	require.Contains(t, chrome.Run(b, chromedp.Text("body")), "Connecting to Shop shop")
	require.Equal(t, "Continue", strings.TrimSpace(chrome.Run(b, chromedp.Text(`form button`))))
	code := chrome.Run(b, chromedp.Evaluate[string](`document.querySelector('form input[name="code"]').value`))
	require.True(t, strings.HasPrefix(code, "bc_"), code)
	cookies := joinBrowserCookies(t, b, r.env.URL(shop.Domain, "/"))
	require.Len(t, cookies, 1)
	join := cookies[tenant.JoinCookie]
	require.NotNil(t, join, "the browser keeps the join cookie")
	require.True(t, join.HTTPOnly)
	require.True(t, join.Secure)
	require.Equal(t, network.CookieSameSiteStrict, join.SameSite)
	require.Equal(t, shop.Domain, join.Domain, "host-only")
	// Script can't read it.
	require.Empty(t, chrome.Run(b, chromedp.Evaluate[string](`document.cookie`)))

	// Step 2: the Personal Agent authorizes the code from its browser.
	sid := newJoinSID()
	token := ""
	if signedIn {
		token = r.signIn(t, shop.joinCompany, "orders:read").AccessToken
	}
	r.mustAuthorize(t, shop.joinCompany, code, sid, token)

	// Step 3: the browser submits the form and lands on the website.
	resp = b.Load(chromedp.Click(`form button`))
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)
	require.Equal(t, r.env.URL(shop.Domain, "/"), resp.URL)
	require.Equal(t, r.env.URL(shop.Domain, "/"), chrome.Run(b, chromedp.Location()))

	cookies = joinBrowserCookies(t, b, r.env.URL(shop.Domain, "/"))
	require.Nil(t, cookies[tenant.JoinCookie], "the join cookie is gone")
	sc := cookies[joinSessionCookie]
	require.NotNil(t, sc, "the browser holds the Session cookie: %v", cookies)
	require.True(t, sc.HTTPOnly)
	require.True(t, sc.Secure)
	require.Equal(t, "/", sc.Path)
	require.Equal(t, shop.Domain, sc.Domain)
	require.False(t, sc.Session, "it has a lifetime")
	require.LessOrEqual(t, sc.Expires, float64(time.Now().Add(joinIdleTimeout+time.Minute).Unix()))

	// The origin answered the landing page for the Session.
	require.Equal(t, sid, chrome.Run(b, chromedp.Text("#sid")))
	seen := joinLastAt(t, shop.origin, "/")
	require.NoError(t, seen.VerifyErr)
	require.NotNil(t, seen.Claims)
	require.Equal(t, sid, seen.Claims.SID)
	require.Equal(t, r.agent.ClientID, seen.Claims.ClientID)
	require.Equal(t, joinUserID(sid), seen.Claims.UserID)
	require.NotContains(t, seen.Header.Get("Cookie"), joinSessionCookie, "the origin never sees the Session cookie")
	if signedIn {
		require.Equal(t, strconv.FormatInt(shop.Ada, 10), seen.Claims.Account)
		require.Equal(t, []string{"orders:read"}, seen.Claims.Scopes)
		require.Equal(t, strconv.FormatInt(shop.Ada, 10), chrome.Run(b, chromedp.Text("#account")))
		r.requireSignedIn(t, shop.joinCompany, sc.Value, sid, shop.Ada, "orders:read")
	} else {
		require.Empty(t, seen.Claims.Account)
		require.Empty(t, seen.Claims.Scopes)
		require.Equal(t, "signed out", chrome.Run(b, chromedp.Text("#account")))
		r.requireSignedOut(t, shop.joinCompany, sc.Value, sid)
	}

	// Step 4: the browser browses as the Session.
	resp = b.Load(chromedp.Navigate(r.env.URL(shop.Domain, "/orders?page=2")))
	require.Equal(t, int64(http.StatusOK), resp.Status)
	seen = joinLastAt(t, shop.origin, "/orders")
	require.Equal(t, "page=2", seen.RawQuery)
	require.NoError(t, seen.VerifyErr)
	require.Equal(t, sid, seen.Claims.SID)

	// Going back to the join page and submitting the used code again
	// fails and leaves the Session cookie in place.
	resp = b.Load(chromedp.Navigate(r.env.URL(shop.Domain, browserjoin.Path)))
	require.Equal(t, int64(http.StatusOK), resp.Status)
	b.Do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector('form input[name="code"]').value = %q`, code)))
	resp = b.Load(chromedp.Click(`form button`))
	require.Equal(t, int64(http.StatusBadRequest), resp.Status)
	require.Contains(t, chrome.Run(b, chromedp.Text("body")), "This browser was not connected")
	require.Equal(t, sc.Value, joinBrowserCookies(t, b, r.env.URL(shop.Domain, "/"))[joinSessionCookie].Value)
}

// TestBrowserJoinChromiumCrossSiteForm: a page on another site posts a form with a
// valid, authorized code to the Company's browser-session endpoint, in
// the very browser that loaded the code's page. The browser does not send
// the SameSite=Strict join cookie with it, so the join fails and no
// Session cookie is set (spec 10.6).
func TestBrowserJoinChromiumCrossSiteForm(t *testing.T) {
	t.Parallel()
	r := joinSetup(t)
	shop := r.newWebsite(t)
	tok := r.signIn(t, shop.joinCompany, "orders:read", "orders:write")

	const evilHost = "evil.example"
	var (
		mu       sync.Mutex
		evilCode string
	)
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		code := evilCode
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = joinEvilPage.Execute(w, map[string]string{"Action": r.env.URL(shop.Domain, browserjoin.Path), "Code": code})
	}))
	evil.TLS = r.env.CA.ServerTLSConfig()
	evil.StartTLS()
	t.Cleanup(evil.Close)
	_, evilPort, err := net.SplitHostPort(evil.Listener.Addr().String())
	require.NoError(t, err)
	evilURL := "https://" + net.JoinHostPort(evilHost, evilPort) + "/"

	b := chrome.Start(t, r.env.CA, shop.Domain, evilHost)
	// The browser loads the page itself: it holds the join cookie that
	// goes with this code.
	resp := b.Load(chromedp.Navigate(r.env.URL(shop.Domain, browserjoin.Path)))
	require.Equal(t, int64(http.StatusOK), resp.Status)
	code := chrome.Run(b, chromedp.Evaluate[string](`document.querySelector('form input[name="code"]').value`))
	join := joinBrowserCookies(t, b, r.env.URL(shop.Domain, "/"))[tenant.JoinCookie]
	require.NotNil(t, join)
	// An attacker authorizes it for its own signed-in Session (here: the
	// code is valid and authorized; only the cookie can stop it).
	r.mustAuthorize(t, shop.joinCompany, code, newJoinSID(), tok.AccessToken)
	mu.Lock()
	evilCode = code
	mu.Unlock()

	// The browser visits the other site, whose page posts the form as
	// soon as it has loaded.
	b.Do(chromedp.Navigate(evilURL))
	landed := r.env.URL(shop.Domain, browserjoin.Path)
	deadline := time.Now().Add(chrome.Timeout)
	for {
		loc := chrome.Run(b, joinTry(chromedp.Location()))
		state := chrome.Run(b, joinTry(chromedp.Evaluate[string](`document.readyState`)))
		if strings.HasPrefix(loc, r.env.URL(shop.Domain, "/")) && state == "complete" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the form was not posted: at %q (%s)", loc, state)
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, landed, chrome.Run(b, chromedp.Location()), "the browser stays on the refused join")
	require.Contains(t, chrome.Run(b, chromedp.Text("body")), "This browser was not connected")
	require.True(t, r.usedUp(t, code), "the post reached the Company and used the code up")

	cookies := joinBrowserCookies(t, b, r.env.URL(shop.Domain, "/"))
	require.Nil(t, cookies[joinSessionCookie], "no Session cookie: %v", cookies)
	require.NotNil(t, cookies[tenant.JoinCookie], "the join cookie was not sent, so not cleared either")
	require.Equal(t, join.Value, cookies[tenant.JoinCookie].Value)
	require.Zero(t, r.count(t, `SELECT count(*) FROM web_sessions WHERE company_id = $1`, shop.ID))

	// The website sees an ordinary visitor.
	resp = b.Load(chromedp.Navigate(r.env.URL(shop.Domain, "/")))
	require.Equal(t, int64(http.StatusUnauthorized), resp.Status, "the test origin refuses requests without Poppy-Verified")
	require.ErrorContains(t, joinLastAt(t, shop.origin, "/").VerifyErr, "no Poppy-Verified")
}

var joinEvilPage = template.Must(template.New("evil").Parse(`<!doctype html>
<title>Win a prize</title>
<form method="post" action="{{.Action}}">
<input type="hidden" name="code" value="{{.Code}}">
<button>Claim</button>
</form>
<script>window.addEventListener('load', () => setTimeout(() => document.forms[0].submit(), 0));</script>
`))

// joinLastAt returns the latest request for path the origin received (the
// browser also asks for /favicon.ico).
func joinLastAt(t *testing.T, o *peers.Origin, path string) peers.Received {
	t.Helper()
	all := o.Received()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Path == path {
			return all[i]
		}
	}
	require.Failf(t, "no request", "the origin got no request for %s", path)
	return peers.Received{}
}

// joinBrowserCookies returns the cookies the browser holds for u, by name.
func joinBrowserCookies(t *testing.T, b *chrome.Browser, u string) map[string]*network.Cookie {
	t.Helper()
	list := chrome.Run(b, func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
		return res.Cookies, err
	})
	out := map[string]*network.Cookie{}
	for _, c := range list {
		out[c.Name] = c
	}
	return out
}

// joinTry runs a, turning an error (such as a navigation under way) into the
// zero value.
func joinTry[T any](a chromedp.Action[T]) chromedp.Action[T] {
	return func(ctx context.Context, tg *chromedp.Target) (T, error) {
		v, err := a(ctx, tg)
		if err != nil {
			var zero T
			return zero, nil
		}
		return v, nil
	}
}

// joinHeader returns a response header from the browser's view of it.
func joinHeader(resp *network.Response, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return fmt.Sprint(v)
		}
	}
	return ""
}
