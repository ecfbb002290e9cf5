package api

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractIssuer drives acme's issuer.
func contractIssuer(t *testing.T, c *contract, f *fixture) {
	env, issuer, agent := f.env, f.issuer, f.agent

	t.Run("issuer", func(t *testing.T) {
		// acme's issuer through the document: its keys, a Direct Sign-In
		// through the pages and the tokens it gives, introspection and
		// revocation, Device Sign-In, the account page, and the errors
		// the authorization endpoint shows or sends back.
		const formType = "application/x-www-form-urlencoded"
		base := "/t/acme"
		tokenPath, revokePath, introspectPath := base+"/oauth/token", base+"/oauth/revoke", base+"/oauth/introspect"
		devicePath, accountPath := base+"/oauth/device_authorization", base+"/account"
		// signed adds a fresh client assertion of a to a form (spec 4.1).
		signed := func(a *peers.Agent, v url.Values) string {
			v.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
			v.Set("client_assertion", a.ClientAssertion(t, issuer))
			return v.Encode()
		}
		oauthError := func(r *peers.Response) any { return r.JSON(t)["error"] }
		type tokens struct {
			AccessToken  string `json:"access_token"`
			TokenType    string `json:"token_type"`
			ExpiresIn    int    `json:"expires_in"`
			RefreshToken string `json:"refresh_token"`
			Scope        string `json:"scope"`
		}
		// browser is the User's browser; it keeps the pages' cookies.
		browser := env.Browser(t).Client
		send := func(method, path string, form url.Values, want int, docRejects bool) *peers.Response {
			t.Helper()
			k := call{method: method, path: path, client: browser, want: want, docRejects: docRejects}
			if form != nil {
				k.body, k.ctype = form.Encode(), formType
			}
			return c.do(t, k)
		}
		page := func(method, path string, form url.Values, want int) *peers.Response {
			t.Helper()
			return send(method, path, form, want, false)
		}
		// badPage is a request that breaks the document: no csrf, or no
		// client_id.
		badPage := func(method, path string, form url.Values, want int) *peers.Response {
			t.Helper()
			return send(method, path, form, want, true)
		}

		// The key set; a rotation keeps the old key published.
		r := c.do(t, call{method: get, path: base + "/oauth/jwks.json", want: 200})
		type keySet struct {
			Keys []map[string]any `json:"keys"`
		}
		keys := decode[keySet](t, r)
		require.NotEmpty(t, keys.Keys)
		current, n := keys.Keys[0]["kid"], len(keys.Keys)
		c.do(t, call{method: post, path: "/admin/v1/companies/acme/keys/rotate", token: admin, want: 204})
		keys = decode[keySet](t, c.do(t, call{method: get, path: base + "/oauth/jwks.json", want: 200}))
		require.Len(t, keys.Keys, n+1)
		assert.NotEqual(t, current, keys.Keys[0]["kid"], "the new key comes first")
		assert.Equal(t, current, keys.Keys[1]["kid"], "the retired key stays published")
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/keys/rotate", token: admin, want: 404})
		r = c.do(t, call{method: post, path: "/admin/v1/companies/acme/keys/rotate", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: "/admin/v1/companies/acme/keys/rotate", token: bogus, want: 401})

		// The HMAC secret's rotation says until when the old one verifies.
		r = c.do(t, call{method: post, path: "/admin/v1/companies/acme/secret/rotations", token: admin, want: 201})
		rot := decode[map[string]string](t, r)
		assert.NotEmpty(t, rot["previous_verifies_until"])
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/secret/rotations", token: admin, want: 404})
		c.do(t, call{method: post, path: "/admin/v1/companies/acme/secret/rotations", want: 401, docRejects: true})

		// Direct Sign-In (spec 4.2): the sign-in page, then consent.
		verifier := rand.Text() + rand.Text()
		challenge := sha256.Sum256([]byte(verifier))
		request := url.Values{"response_type": {"code"}, "client_id": {agent.ClientID}, "redirect_uri": {agent.URL("/callback")},
			"scope": {"orders:read orders:write"}, "state": {"st4te"},
			"code_challenge": {base64.RawURLEncoding.EncodeToString(challenge[:])}, "code_challenge_method": {"S256"}}
		authorize := base + "/oauth/authorize?" + request.Encode()
		r = page(get, authorize, nil, 200)
		assert.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
		csrf := formField(t, r.Body, "csrf")
		require.NotEmpty(t, csrf)
		login := url.Values{"csrf": {csrf}, "action": {"login"}, "username": {"alice"}, "password": {"correct horse"}}
		wrong := url.Values{"csrf": {csrf}, "action": {"login"}, "username": {"alice"}, "password": {"wrong horse"}}
		// A form without this browser's token does nothing.
		badPage(post, authorize, url.Values{"action": {"login"}, "username": {"alice"}, "password": {"correct horse"}}, 403)
		r = c.do(t, call{method: post, path: authorize, client: env.Browser(t).Client, ctype: formType, body: login.Encode(), want: 403})
		assert.Contains(t, string(r.Body), "expired")
		r = page(post, authorize, wrong, 400)
		assert.Contains(t, string(r.Body), "not right")
		r = page(post, authorize, login, 200)
		assert.Contains(t, string(r.Body), "Test Agent")
		assert.Equal(t, "orders:read", formField(t, r.Body, "scope"))
		// The User approves one of the two scopes: back to the agent with
		// a code, the state and iss (RFC 9207).
		r = page(post, authorize, url.Values{"csrf": {csrf}, "action": {"approve"}, "scope": {"orders:read"}}, 303)
		back, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		assert.Equal(t, agent.URL("/callback"), back.Scheme+"://"+back.Host+back.Path)
		assert.Equal(t, "st4te", back.Query().Get("state"))
		assert.Equal(t, issuer, back.Query().Get("iss"))
		code := back.Query().Get("code")
		require.NotEmpty(t, code)

		// The tokens (spec 4.7): fewer scopes than requested, so scope
		// says which.
		exchange := url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {agent.URL("/callback")}, "code_verifier": {verifier}}
		direct := decode[tokens](t, c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, exchange), want: 200}))
		assert.Equal(t, tokens{TokenType: "Bearer", ExpiresIn: 600, Scope: "orders:read"},
			tokens{TokenType: direct.TokenType, ExpiresIn: direct.ExpiresIn, Scope: direct.Scope})
		require.NotEmpty(t, direct.AccessToken)
		require.NotEmpty(t, direct.RefreshToken)
		refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {direct.RefreshToken}}
		fresh := decode[tokens](t, c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, refresh), want: 200}))
		assert.NotEqual(t, direct.RefreshToken, fresh.RefreshToken, "refresh tokens rotate")
		assert.Empty(t, fresh.Scope, "the grant's scopes")
		refresh.Set("refresh_token", fresh.RefreshToken)

		// Token errors are OAuth error bodies.
		for _, k := range []struct {
			body, ctype string
			want        int
			code        string
			docRejects  bool
		}{
			{body: "", want: 400, code: "invalid_request", docRejects: true},
			{body: `{"grant_type":"refresh_token"}`, ctype: "application/json", want: 400, code: "invalid_request", docRejects: true},
			{body: "grant_type=refresh_token&refresh_token=" + url.QueryEscape(fresh.RefreshToken), want: 401, code: "invalid_client", docRejects: true},
			{body: signed(agent, url.Values{"grant_type": {"password"}, "username": {"alice"}}), want: 400, code: "invalid_request", docRejects: true},
			{body: signed(agent, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nope.nope"}}), want: 400, code: "invalid_grant"},
			{body: signed(agent, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}, "scope": {"orders:write"}}),
				want: 400, code: "invalid_scope"},
			{body: signed(agent, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}, "resource": {"https://elsewhere.example"}}),
				want: 400, code: "invalid_target"},
		} {
			if k.ctype == "" {
				k.ctype = formType
			}
			r := c.do(t, call{method: post, path: tokenPath, ctype: k.ctype, body: k.body, want: k.want, docRejects: k.docRejects})
			assert.Equal(t, k.code, oauthError(r), k.body)
			assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		}

		// Introspection, with a Company API key (RFC 7662).
		key := decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/acme/api-keys", token: admin, want: 201, body: `{"name":"introspection"}`})).Key
		introspect := func(tok string) map[string]any {
			t.Helper()
			return c.do(t, call{method: post, path: introspectPath, token: key, ctype: formType,
				body: url.Values{"token": {tok}}.Encode(), want: 200}).JSON(t)
		}
		m := introspect(fresh.AccessToken)
		assert.Equal(t, true, m["active"])
		assert.Equal(t, "Bearer", m["token_type"])
		assert.Equal(t, agent.ClientID, m["client_id"])
		assert.Equal(t, "orders:read", m["scope"])
		assert.Equal(t, issuer, m["iss"])
		assert.Equal(t, []any{"https://acme.example", "https://acme.example.co.uk"}, m["aud"])
		m = introspect(fresh.RefreshToken)
		assert.Equal(t, true, m["active"])
		assert.Equal(t, "refresh_token", m["token_type"])
		assert.Equal(t, map[string]any{"active": false}, introspect("not-a-token"))
		r = c.do(t, call{method: post, path: introspectPath, ctype: formType, body: "token=x", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: introspectPath, token: admin, ctype: formType, body: "token=x", want: 401})
		minimalKey := decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/minimal/api-keys", token: admin, want: 201})).Key
		c.do(t, call{method: post, path: introspectPath, token: minimalKey, ctype: formType, body: "token=x", want: 401})
		r = c.do(t, call{method: post, path: introspectPath, token: key, ctype: formType, body: "token=", want: 400, docRejects: true})
		assert.Equal(t, "invalid_request", oauthError(r))

		// Revocation (spec 4.6): only by the client the token was issued
		// to; an unknown token is fine; revoking ends the grant.
		other := env.StartAgent(t, "other-agent.test")
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, want: 400,
			body: signed(other, url.Values{"token": {fresh.RefreshToken}, "token_type_hint": {"refresh_token"}})})
		assert.Equal(t, "unauthorized_client", oauthError(r))
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, body: "token=" + url.QueryEscape(fresh.RefreshToken), want: 401, docRejects: true})
		assert.Equal(t, "invalid_client", oauthError(r))
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, body: signed(agent, url.Values{}), want: 400, docRejects: true})
		assert.Equal(t, "invalid_request", oauthError(r))
		r = c.do(t, call{method: post, path: revokePath, ctype: formType, body: signed(agent, url.Values{"token": {"unknown"}}), want: 200})
		assert.Empty(t, r.Body)
		c.do(t, call{method: post, path: revokePath, ctype: formType, want: 200,
			body: signed(agent, url.Values{"token": {fresh.RefreshToken}, "token_type_hint": {"refresh_token"}})})
		assert.Equal(t, map[string]any{"active": false}, introspect(fresh.RefreshToken))
		assert.Equal(t, map[string]any{"active": false}, introspect(fresh.AccessToken), "its grant's access tokens too")
		r = c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, refresh), want: 400})
		assert.Equal(t, "invalid_grant", oauthError(r))
		r = c.do(t, call{method: post, path: tokenPath, ctype: formType, body: signed(agent, exchange), want: 400})
		assert.Equal(t, "invalid_grant", oauthError(r), "a code works once")

		// Device Sign-In (spec 4.3), approved in the browser, which is
		// still signed in.
		start := func() map[string]any {
			t.Helper()
			return c.do(t, call{method: post, path: devicePath, ctype: formType, want: 200,
				body: signed(agent, url.Values{"scope": {"orders:read orders:write"}})}).JSON(t)
		}
		poll := func(da map[string]any, want int) *peers.Response {
			t.Helper()
			return c.do(t, call{method: post, path: tokenPath, ctype: formType, want: want,
				body: signed(agent, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da["device_code"].(string)}})})
		}
		da := start()
		userCode := da["user_code"].(string)
		assert.Equal(t, issuer+"/device", da["verification_uri"])
		assert.Equal(t, issuer+"/device?user_code="+userCode, da["verification_uri_complete"])
		assert.Equal(t, "authorization_pending", oauthError(poll(da, 400)))
		assert.Equal(t, "slow_down", oauthError(poll(da, 400)), "polled again at once")
		r = page(get, base+"/device?user_code="+userCode, nil, 200)
		assert.Equal(t, userCode, formField(t, r.Body, "user_code"), "the code is filled in, nothing approved")
		csrf = formField(t, r.Body, "csrf")
		r = page(post, base+"/device", url.Values{"csrf": {csrf}, "action": {"continue"}, "user_code": {"AAAA-AAAA"}}, 400)
		assert.Contains(t, string(r.Body), "not a code")
		r = page(post, base+"/device", url.Values{"csrf": {csrf}, "action": {"continue"}, "user_code": {strings.ToLower(userCode)}}, 200)
		assert.Contains(t, string(r.Body), userCode, "the consent page shows the code to compare")
		decide := base + "/device?" + url.Values{"user_code": {userCode}}.Encode()
		r = page(post, decide, url.Values{"csrf": {csrf}, "action": {"approve"}, "scope": {"orders:write"}}, 200)
		assert.Contains(t, string(r.Body), "All set")
		device := decode[tokens](t, poll(da, 200))
		assert.Equal(t, "orders:write", device.Scope)
		assert.Equal(t, "invalid_grant", oauthError(poll(da, 400)), "a device code gives tokens once")

		// Declined, in a browser that signs in first.
		da = start()
		userCode = da["user_code"].(string)
		browser = env.Browser(t).Client
		r = page(get, base+"/device?user_code="+userCode, nil, 200)
		csrf = formField(t, r.Body, "csrf")
		r = page(post, base+"/device", url.Values{"csrf": {csrf}, "action": {"continue"}, "user_code": {userCode}}, 200)
		assert.Contains(t, string(r.Body), `value="login"`, "not signed in: the sign-in page")
		decide = base + "/device?" + url.Values{"user_code": {userCode}}.Encode()
		wrong.Set("csrf", csrf)
		page(post, decide, wrong, 400)
		login.Set("csrf", csrf)
		page(post, decide, login, 200)
		badPage(post, base+"/device", url.Values{"action": {"continue"}, "user_code": {userCode}}, 403)
		r = page(post, decide, url.Values{"csrf": {csrf}, "action": {"deny"}}, 200)
		assert.Contains(t, string(r.Body), "declined")
		assert.Equal(t, "access_denied", oauthError(poll(da, 400)))
		// Device authorization errors.
		r = c.do(t, call{method: post, path: devicePath, ctype: formType, body: "scope=orders%3Aread", want: 401, docRejects: true})
		assert.Equal(t, "invalid_client", oauthError(r))
		r = c.do(t, call{method: post, path: devicePath, ctype: formType, body: signed(agent, url.Values{"scope": {"orders:delete"}}), want: 400})
		assert.Equal(t, "invalid_scope", oauthError(r))

		// The account page lists the connected agent; disconnecting it
		// ends its grant at once (spec 5.5).
		assert.Equal(t, true, introspect(device.RefreshToken)["active"])
		r = page(get, accountPath, nil, 200)
		assert.Contains(t, string(r.Body), "Test Agent")
		csrf = formField(t, r.Body, "csrf")
		badPage(post, accountPath, url.Values{"action": {"disconnect"}, "client_id": {agent.ClientID}}, 403)
		r = page(post, accountPath, url.Values{"csrf": {csrf}, "action": {"disconnect"}, "client_id": {agent.ClientID}}, 200)
		assert.Contains(t, string(r.Body), "disconnected")
		assert.Equal(t, map[string]any{"active": false}, introspect(device.RefreshToken))
		assert.Equal(t, map[string]any{"active": false}, introspect(device.AccessToken))
		r = page(post, accountPath, url.Values{"csrf": {csrf}, "action": {"signout"}}, 200)
		assert.Contains(t, string(r.Body), "signed out")
		r = page(get, accountPath, nil, 200)
		assert.NotContains(t, string(r.Body), "Test Agent", "the sign-in page")
		wrong.Set("csrf", csrf)
		page(post, accountPath, wrong, 400)
		login.Set("csrf", csrf)
		r = page(post, accountPath, login, 200)
		assert.Contains(t, string(r.Body), "No agents are connected")
		page(post, accountPath, url.Values{"csrf": {csrf}, "action": {"signout"}, "pad": {strings.Repeat("x", 16<<10)}}, 400)

		// Problems with client_id or redirect_uri are shown to the User;
		// other problems go back to the agent, with iss (spec 4.2).
		with := func(name, value string) string {
			q := url.Values{}
			for k, v := range request {
				q[k] = v
			}
			if value == "" {
				q.Del(name)
			} else {
				q.Set(name, value)
			}
			return base + "/oauth/authorize?" + q.Encode()
		}
		badPage(get, base+"/oauth/authorize", nil, 400)
		page(get, with("redirect_uri", "https://elsewhere.example/callback"), nil, 400)
		r = page(get, with("client_id", "http://agent.example/agent.json"), nil, 400)
		assert.Contains(t, string(r.Body), "invalid_client")
		r = page(get, with("client_id", "https://unreachable.test/agent.json"), nil, 400)
		assert.Contains(t, string(r.Body), "invalid_client")
		page(post, with("client_id", "https://unreachable.test/agent.json"), login, 400)
		badPage(post, base+"/oauth/authorize", login, 400)
		// state is optional (RFC 9700 §2.1): signed in, the consent page.
		page(get, with("state", ""), nil, 200)
		for name, value := range map[string]string{"code_challenge": "", "scope": "orders:delete", "resource": "https://elsewhere.example"} {
			k := call{method: get, path: with(name, value), client: browser, want: 303, docRejects: value == ""}
			back, err := url.Parse(c.do(t, k).Header.Get("Location"))
			require.NoError(t, err)
			assert.NotEmpty(t, back.Query().Get("error"), name)
			assert.Empty(t, back.Query().Get("code"), name)
			assert.Equal(t, issuer, back.Query().Get("iss"), name)
		}
		// The User declines.
		r = page(get, authorize, nil, 200)
		assert.Contains(t, string(r.Body), `value="approve"`, "signed in: the consent page")
		r = page(post, authorize, url.Values{"csrf": {csrf}, "action": {"deny"}}, 303)
		back, err = url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		assert.Equal(t, "access_denied", back.Query().Get("error"))
		assert.Equal(t, "st4te", back.Query().Get("state"))
		assert.Equal(t, issuer, back.Query().Get("iss"))
	})
}

// formField is the value of the first input named name in an HTML page,
// or "".
func formField(t testing.TB, page []byte, name string) string {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			require.ErrorIs(t, z.Err(), io.EOF)
			return ""
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			if tok.Data != "input" {
				continue
			}
			var n, v string
			for _, a := range tok.Attr {
				switch a.Key {
				case "name":
					n = a.Val
				case "value":
					v = a.Val
				}
			}
			if n == name {
				return v
			}
		}
	}
}
