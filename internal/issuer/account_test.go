package issuer_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// accountPage signs browser b in to the account page and returns the page
// that lists the connected agents.
func (s *tokenRig) accountPage(t *testing.T, b *peers.Browser) *peers.Page {
	t.Helper()
	page := b.Get(s.issuer + "/account")
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, `name="password"`, "a browser that is not signed in gets the login form")
	require.Equal(t, "no-store", page.Header.Get("Cache-Control"))
	require.Equal(t, "DENY", page.Header.Get("X-Frame-Options"))
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Agents connected to your")
	require.Contains(t, page.Body, "Signed in as <strong>"+testUser+"</strong>")
	return page
}

// agentHost is how the page shows a client_id: its host and port.
func agentHost(t *testing.T, clientID string) string {
	t.Helper()
	u, err := url.Parse(clientID)
	require.NoError(t, err)
	return u.Host
}

func TestAccountPageDisconnect(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read", "orders:write")
	// A refresh leaves a rotated refresh token and its access token
	// behind; disconnecting must end the live ones.
	fresh, err := s.refresh(tok.RefreshToken)
	require.NoError(t, err)
	second := s.signedIn(t, "orders:read")
	other := s.as(t, "other-agent.test")
	otherTok := other.signedIn(t, "orders:read")

	b := s.env.Browser(t)
	page := s.accountPage(t, b)
	require.Contains(t, page.Body, "<h2>Test Agent</h2>")
	require.Contains(t, page.Body, "from <strong>"+agentHost(t, s.agent.ClientID)+"</strong>")
	require.Contains(t, page.Body, "from <strong>"+agentHost(t, other.agent.ClientID)+"</strong>")
	require.Contains(t, page.Body, "Can use: <strong>orders:read</strong>, <strong>orders:write</strong>")
	require.Contains(t, page.Body, "Can use: <strong>orders:read</strong></p>")

	page = b.Submit(page, "disconnect", map[string][]string{"client_id": {s.agent.ClientID}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Test Agent was disconnected")
	require.NotContains(t, page.Body, "from <strong>"+agentHost(t, s.agent.ClientID)+"</strong>")
	require.Contains(t, page.Body, "from <strong>"+agentHost(t, other.agent.ClientID)+"</strong>")

	// Spec 5.5: its refresh tokens are revoked, and with them the access
	// tokens, so the agent learns of it from invalid_token too.
	s.requireRefreshFails(t, fresh.RefreshToken)
	s.requireRefreshFails(t, second.RefreshToken)
	for _, tk := range []string{fresh.AccessToken, second.AccessToken, fresh.RefreshToken} {
		require.Equal(t, map[string]any{"active": false}, s.introspect(t, key, tk))
	}
	// The other agent keeps its access.
	require.Equal(t, true, s.introspect(t, key, otherTok.AccessToken)["active"])
	_, err = other.refresh(otherTok.RefreshToken)
	require.NoError(t, err)

	// Disconnecting an agent that is not connected changes nothing and
	// fetches nothing.
	stranger := s.env.StartAgent(t, "stranger.test")
	page = b.Submit(page, "disconnect", map[string][]string{"client_id": {stranger.ClientID}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "That agent is not connected to your account.")
	require.Contains(t, page.Body, "from <strong>"+agentHost(t, other.agent.ClientID)+"</strong>")
	require.Zero(t, stranger.Hits("/agent.json"))
}

func TestAccountPageSignOut(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read")

	b := s.env.Browser(t)
	page := s.accountPage(t, b)
	page = b.Submit(page, "signout", nil)
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Signed out")

	// The page asks for a login again; the agent's tokens still work.
	page = b.Get(s.issuer + "/account")
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, `name="password"`)
	require.NotContains(t, page.Body, "Test Agent")
	require.Equal(t, true, s.introspect(t, key, tok.AccessToken)["active"])
	_, err := s.refresh(tok.RefreshToken)
	require.NoError(t, err)
}

func TestAccountPageNeedsCSRF(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read")
	b := s.env.Browser(t)
	page := s.accountPage(t, b)

	for name, csrf := range map[string][]string{
		"no token":    nil,
		"wrong token": {"x" + page.Field("csrf")},
		"empty token": {""},
	} {
		t.Run(name, func(t *testing.T) {
			for _, action := range []string{"disconnect", "signout"} {
				got := b.Submit(page, action, map[string][]string{"csrf": csrf})
				require.Equal(t, http.StatusForbidden, got.Status, got.Body)
			}
		})
	}
	// A login needs it too.
	login := s.env.Browser(t).Get(s.issuer + "/account")
	got := b.Submit(login, "login", map[string][]string{"username": {testUser}, "password": {testPassword}, "csrf": nil})
	require.Equal(t, http.StatusForbidden, got.Status, got.Body)

	// Another browser's token is not this one's.
	otherPage := s.accountPage(t, s.env.Browser(t))
	got = b.Submit(page, "disconnect", map[string][]string{"csrf": {otherPage.Field("csrf")}})
	require.Equal(t, http.StatusForbidden, got.Status, got.Body)

	// Nothing was disconnected, and the browser is still signed in.
	require.Equal(t, true, s.introspect(t, key, tok.AccessToken)["active"])
	page = b.Get(s.issuer + "/account")
	require.Contains(t, page.Body, "<h2>Test Agent</h2>")
	_, err := s.refresh(tok.RefreshToken)
	require.NoError(t, err)
}

func TestAccountPageMethods(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	resp := s.env.Do(t, http.MethodHead, s.issuer+"/account", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	resp = s.env.Do(t, http.MethodPut, s.issuer+"/account", nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.Status)
	require.Equal(t, "GET, HEAD, POST", resp.Header.Get("Allow"))
}

func TestAccountPageSignedOutPostChangesNothing(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read")

	// A browser that is not signed in posts a disconnect with its own valid
	// CSRF token: it gets the login form, and nothing happens.
	b := s.env.Browser(t)
	login := b.Get(s.issuer + "/account")
	got := b.Submit(login, "login", map[string][]string{"action": {"disconnect"}, "client_id": {s.agent.ClientID},
		"username": nil, "password": nil})
	require.Equal(t, http.StatusOK, got.Status, got.Body)
	require.Contains(t, got.Body, `name="password"`)
	require.Equal(t, true, s.introspect(t, key, tok.AccessToken)["active"])

	// A wrong password is refused without signing in.
	got = b.Submit(login, "login", map[string][]string{"username": {testUser}, "password": {"wrong"}})
	require.Equal(t, http.StatusBadRequest, got.Status, got.Body)
	require.NotContains(t, got.Body, "Test Agent")
}
