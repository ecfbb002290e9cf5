package platform_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

const (
	joinUser     = "ada"
	joinPassword = "correct horse battery staple"
	// sessionCookie is the Session cookie's default name.
	joinSessionCookie = tenant.DefaultWebCookie
	// idleTimeout is the Sessions' idle timeout in most tests.
	joinIdleTimeout = 2 * time.Hour
)

// joinCompany is a Company with browser join, two scopes, the account ada and
// a Company API key.
type joinCompany struct {
	Slug   string
	Domain string
	ID     int64
	// Aud is the Company's identifier (spec 3.2), the Session JWTs' aud.
	Aud string
	// Issuer is its OAuth issuer.
	Issuer string
	// APIKey authenticates its Company API.
	APIKey string
	// Ada is ada's account id.
	Ada int64
}

// joinRig is a platform with one Personal Agent.
type joinRig struct {
	env   *testkit.Env
	agent *peers.Agent
}

// joinSetup starts a platform whose sign-in limits no test here reaches: the
// tests sign in many times at once, and are not about those limits (the
// issuer's tests are). Left at their defaults (on two cores), the fourth
// sign-in at once at one Company, the seventh at the platform, or one
// queued for over two seconds on a busy machine would be answered 503.
func joinSetup(t *testing.T) *joinRig {
	t.Helper()
	env := testkit.SetupWith(t, testkit.Options{Platform: func(o *platform.Options) {
		o.PasswordHashes = accounts.Limits{Queue: 1000, PerCompany: 1000, MaxWait: time.Minute}
		o.LoginRates = issuer.LoginRates{PerAddress: 10000, PerCompany: 10000}
	}})
	return &joinRig{env: env, agent: env.StartAgent(t, "agent.test")}
}

// newCompany creates a Company on domain with browser join; extra is
// merged over the body at the top level, and web over its "web".
func (r *joinRig) newCompany(t *testing.T, slug, domain string, web map[string]any, extra map[string]any) *joinCompany {
	t.Helper()
	w := map[string]any{"browser_join": true}
	maps.Copy(w, web)
	body := map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Shop " + slug, "domain": domain},
		"auth": map[string]any{"scopes": map[string]any{
			"orders:read":  "See your orders",
			"orders:write": "Change your orders",
		}},
		"sessions": map[string]any{"idle_timeout_seconds": int(joinIdleTimeout / time.Second)},
		"web":      w,
	}
	maps.Copy(body, extra)
	view := r.env.CreateCompany(t, body)
	c := &joinCompany{Slug: slug, Domain: domain, Issuer: r.env.PublicURL("/t/" + slug)}
	c.Aud, _ = view["identifier"].(string)
	require.NotEmpty(t, c.Aud)
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&c.ID))

	resp := r.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
		map[string]any{"username": joinUser, "password": joinPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT id FROM accounts WHERE company_id = $1 AND username = $2`, c.ID, joinUser).Scan(&c.Ada))

	resp = r.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "website"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	c.APIKey, _ = resp.JSON(t)["key"].(string)
	require.NotEmpty(t, c.APIKey)
	return c
}

// patchSettings changes a Company's settings through the admin API.
func (r *joinRig) patchSettings(t *testing.T, c *joinCompany, body map[string]any) {
	t.Helper()
	resp := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+c.Slug, body)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// signIn has ada sign the agent in at c with scopes.
func (r *joinRig) signIn(t *testing.T, c *joinCompany, scopes ...string) *oauth2.Token {
	t.Helper()
	return r.env.SignIn(t, r.agent, c.Issuer, joinUser, joinPassword, scopes, "")
}

// revoke revokes a refresh token at c: the agent signs out (spec 4.6, 5.5).
func (r *joinRig) revoke(t *testing.T, c *joinCompany, refreshToken string) {
	t.Helper()
	r.env.Revoke(t, r.agent, c.Issuer, refreshToken)
}

func newJoinSID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// joinUserID is the User ID the agent uses in Session sid.
func joinUserID(sid string) string { return "usr_" + sid[:8] }

// authorizeAs is step 2 by agent a: POST {domain}/poppy/browser-session/authorize
// with body, signed for Session sid and, with token, signed in.
func (r *joinRig) authorizeAs(t *testing.T, a *peers.Agent, c *joinCompany, domain string, body any, sid, token string) *peers.Response {
	t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(http.MethodPost, r.env.URL(domain, browserjoin.AuthorizePath), bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if sid != "" {
		a.Sign(t, req, peers.SessionClaims{Aud: c.Aud, SID: sid, Sub: joinUserID(sid), AccessToken: token}, peers.SessionOptions{})
	} else if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return peers.Send(t, r.env.Client, req)
}

// authorize is step 2 on c's domain by the rig's agent.
func (r *joinRig) authorize(t *testing.T, c *joinCompany, code, sid, token string) *peers.Response {
	t.Helper()
	return r.authorizeAs(t, r.agent, c, c.Domain, map[string]any{"code": code}, sid, token)
}

// mustAuthorize is a step 2 that succeeds.
func (r *joinRig) mustAuthorize(t *testing.T, c *joinCompany, code, sid, token string) {
	t.Helper()
	resp := r.authorize(t, c, code, sid, token)
	require.Equal(t, http.StatusNoContent, resp.Status, "authorize: %s", resp.Body)
}

// requireJoinError checks a JSON error body.
func requireJoinError(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "body: %s", resp.Body)
	require.Equal(t, code, resp.JSON(t)["error"], "body: %s", resp.Body)
}

// joinBrowser is a cookie-keeping HTTP client standing for the Personal
// Agent's browser.
type joinBrowser struct {
	env    *testkit.Env
	jar    *cookiejar.Jar
	client *http.Client
}

func (r *joinRig) browser(t *testing.T) *joinBrowser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &joinBrowser{env: r.env, jar: jar, client: &http.Client{Transport: r.env.Client.Transport, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// joinPage is the page of step 1.
type joinPage struct {
	*peers.Response
	Code   string
	Action string // the form's action
	Method string // the form's method
}

// open is step 1: GET {domain}/poppy/browser-session.
func (b *joinBrowser) open(t *testing.T, domain string) *joinPage {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.env.URL(domain, browserjoin.Path), nil)
	require.NoError(t, err)
	p := &joinPage{Response: peers.Send(t, b.client, req)}
	if p.Status != http.StatusOK {
		return p
	}
	doc, err := html.Parse(bytes.NewReader(p.Body))
	require.NoError(t, err)
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "form":
				p.Action, p.Method = joinAttr(n, "action"), joinAttr(n, "method")
			case "input":
				if joinAttr(n, "name") == "code" {
					require.Equal(t, "hidden", joinAttr(n, "type"), "the code is a hidden field")
					p.Code = joinAttr(n, "value")
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return p
}

// mustOpen is a step 1 that succeeds.
func (b *joinBrowser) mustOpen(t *testing.T, domain string) string {
	t.Helper()
	p := b.open(t, domain)
	require.Equal(t, http.StatusOK, p.Status, "%s", p.Body)
	require.NotEmpty(t, p.Code, "%s", p.Body)
	return p.Code
}

// submit is step 3: the form's POST of code to {domain}/poppy/browser-session.
func (b *joinBrowser) submit(t *testing.T, domain, code string) *peers.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.env.URL(domain, browserjoin.Path),
		strings.NewReader(url.Values{"code": {code}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return peers.Send(t, b.client, req)
}

// cookie returns the value of the cookie name the browser would send to
// domain, or "".
func (b *joinBrowser) cookie(domain, name string) string {
	u, _ := url.Parse(b.env.URL(domain, "/"))
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// cookieNames returns the names of the cookies the browser would send to
// domain.
func (b *joinBrowser) cookieNames(domain string) []string {
	u, _ := url.Parse(b.env.URL(domain, "/"))
	var names []string
	for _, c := range b.jar.Cookies(u) {
		names = append(names, c.Name)
	}
	return names
}

// setCookie puts a cookie in the browser's jar for domain, as an earlier
// visit would have.
func (b *joinBrowser) setCookie(domain string, c *http.Cookie) {
	u, _ := url.Parse(b.env.URL(domain, "/"))
	b.jar.SetCookies(u, []*http.Cookie{c})
}

// join runs steps 1 to 3 in b for Session sid, signed in with token when
// not "", and returns the Session cookie's value.
func (r *joinRig) join(t *testing.T, b *joinBrowser, c *joinCompany, sid, token string) string {
	t.Helper()
	code := b.mustOpen(t, c.Domain)
	r.mustAuthorize(t, c, code, sid, token)
	resp := b.submit(t, c.Domain, code)
	require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
	v := b.cookie(c.Domain, joinSessionCookie)
	require.NotEmpty(t, v)
	return v
}

// joinSetCookies parses the response's Set-Cookie headers by name.
func joinSetCookies(t *testing.T, resp *peers.Response) map[string]*http.Cookie {
	t.Helper()
	out := map[string]*http.Cookie{}
	for _, line := range resp.Header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		require.NoError(t, err, line)
		require.NotContains(t, out, c.Name, "one Set-Cookie per name")
		out[c.Name] = c
	}
	return out
}

// joinIntrospection is the answer of /company/v1/web-sessions/introspect.
type joinIntrospection struct {
	Active    bool              `json:"active"`
	ClientID  string            `json:"client_id"`
	SID       string            `json:"sid"`
	UserID    string            `json:"user_id"`
	AgentID   string            `json:"agent_id"`
	Account   *string           `json:"account"`
	Scopes    []string          `json:"scopes"`
	Ext       map[string]string `json:"extensions"`
	ExpiresAt *time.Time        `json:"expires_at"`
}

// companyAPI sends POST {PUBLIC}/company/v1{path} with c's API key.
func (r *joinRig) companyAPI(t *testing.T, c *joinCompany, path string, body any) *peers.Response {
	t.Helper()
	return r.env.Do(t, http.MethodPost, r.env.PublicURL("/company/v1"+path), body, "Authorization", "Bearer "+c.APIKey)
}

// introspect asks c's Company API what a Session cookie acts for.
func (r *joinRig) introspect(t *testing.T, c *joinCompany, cookie string) joinIntrospection {
	t.Helper()
	resp := r.companyAPI(t, c, "/web-sessions/introspect", map[string]any{"cookie": cookie})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	var in joinIntrospection
	require.NoError(t, json.Unmarshal(resp.Body, &in), "%s", resp.Body)
	if !in.Active {
		require.JSONEq(t, `{"active": false}`, string(resp.Body))
	}
	return in
}

// requireSignedIn checks an active web session of Session sid, signed in
// to account with scopes.
func (r *joinRig) requireSignedIn(t *testing.T, c *joinCompany, cookie, sid string, account int64, scopes ...string) {
	t.Helper()
	in := r.introspect(t, c, cookie)
	require.True(t, in.Active, "the web session is active")
	require.Equal(t, r.agent.ClientID, in.ClientID)
	require.Equal(t, sid, in.SID)
	require.Equal(t, joinUserID(sid), in.UserID)
	require.NotNil(t, in.Account)
	require.Equal(t, strconv.FormatInt(account, 10), *in.Account)
	require.ElementsMatch(t, scopes, in.Scopes)
}

// requireSignedOut checks an active web session of Session sid that acts
// for no account.
func (r *joinRig) requireSignedOut(t *testing.T, c *joinCompany, cookie, sid string) {
	t.Helper()
	in := r.introspect(t, c, cookie)
	require.True(t, in.Active, "the web session is active")
	require.Equal(t, r.agent.ClientID, in.ClientID)
	require.Equal(t, sid, in.SID)
	require.Equal(t, joinUserID(sid), in.UserID)
	require.NotNil(t, in.Account, "account is always present")
	require.Equal(t, "", *in.Account)
	require.NotNil(t, in.Scopes, "scopes is [], not null")
	require.Empty(t, in.Scopes)
}

// requireInactive checks that a Session cookie acts for nothing.
func (r *joinRig) requireInactive(t *testing.T, c *joinCompany, cookie string) {
	t.Helper()
	require.False(t, r.introspect(t, c, cookie).Active)
}

// count runs a count(*) query.
func (r *joinRig) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func (r *joinRig) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := r.env.Pool.Exec(context.Background(), query, args...)
	require.NoError(t, err)
}

func joinAttr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

var joinNoOptions = peers.SessionOptions{}

// joinSessionClaims are the claims of Session sid at c, signed in with token
// when not "".
func joinSessionClaims(c *joinCompany, sid, token string) peers.SessionClaims {
	return peers.SessionClaims{Aud: c.Aud, SID: sid, Sub: joinUserID(sid), AccessToken: token}
}

// newJoinAuthorizeRequest is an unsigned step 2 request for code on domain.
func newJoinAuthorizeRequest(t *testing.T, r *joinRig, domain, code string) *http.Request {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"code": code})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, r.env.URL(domain, browserjoin.AuthorizePath), bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// fresh creates a Company of its own for one test, so that its account's
// sign-ins are the test's alone.
func (r *joinRig) fresh(t *testing.T) *joinCompany {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	slug := "c" + hex.EncodeToString(b)
	return r.newCompany(t, slug, slug+".example", nil, nil)
}

// disconnectOnAccountPage has ada disconnect the agent on c's account page
// (spec 5.5).
func disconnectOnAccountPage(t *testing.T, r *joinRig, c *joinCompany) {
	t.Helper()
	b := r.env.Browser(t)
	page := b.Get(c.Issuer + "/account")
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {joinUser}, "password": {joinPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Test Agent")
	page = b.Submit(page, "disconnect", map[string][]string{"client_id": {r.agent.ClientID}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "was disconnected")
}
