package issuer_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

// TestRefreshKeepsEarlierAccessTokens: an agent holding a default token
// for one task keeps it while it refreshes for a single-service or
// narrower token for another (spec 4.4, 4.5).
func TestRefreshKeepsEarlierAccessTokens(t *testing.T) {
	s := setup(t)
	key := s.tokAPIKey(t)
	tok := s.tokSignIn(t)
	first := tok["access_token"].(string)

	resp := s.tokRefresh(t, tok["refresh_token"].(string), url.Values{"resource": {s.issuer + "/mcp"}, "scope": {"orders:read"}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, true, s.tokIntrospect(t, key, first)["active"], "the earlier default token still works")
	require.Equal(t, true, s.tokIntrospect(t, key, resp.JSON(t)["access_token"].(string))["active"])
}

// TestSignInForOneServiceStaysThere: a grant signed in for the MCP server
// cannot be widened to the Company's other services (RFC 8707 §2.2), at
// the code exchange or at refresh; one for the domain can be narrowed.
func TestSignInForOneServiceStaysThere(t *testing.T) {
	s := setup(t)
	mcp := s.issuer + "/mcp"
	code, verifier := s.tokCode(t, s.conf.Scopes, oauth2.SetAuthURLParam("resource", mcp))
	form := s.tokCodeForm(code, verifier)
	form.Set("resource", "https://stormline.test")
	before := s.tokRows(t)
	tokError(t, s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, form)), http.StatusBadRequest, "invalid_target")
	s.tokNothingNew(t, before)

	code, verifier = s.tokCode(t, s.conf.Scopes, oauth2.SetAuthURLParam("resource", mcp))
	resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier)))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	_, claims := tokClaims(t, resp.JSON(t)["access_token"].(string))
	require.Equal(t, []any{mcp}, claims["aud"])
	refresh := resp.JSON(t)["refresh_token"].(string)
	tokError(t, s.tokRefresh(t, refresh, url.Values{"resource": {"https://stormline.test"}}), http.StatusBadRequest, "invalid_target")

	// The domain's grant narrows to the MCP server.
	tok := s.tokSignIn(t)
	resp = s.tokRefresh(t, tok["refresh_token"].(string), url.Values{"resource": {mcp}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	_, claims = tokClaims(t, resp.JSON(t)["access_token"].(string))
	require.Equal(t, []any{mcp}, claims["aud"])
}

// TestDisconnectEndsSignInsUnderWay: a code issued before the User
// disconnects the agent no longer yields tokens (spec 5.5).
func TestDisconnectEndsSignInsUnderWay(t *testing.T) {
	s := setup(t)
	tok := s.tokSignIn(t)
	code, verifier := s.tokCode(t, s.conf.Scopes)

	b := s.env.Browser(t)
	page := b.Get(s.issuer + "/account")
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Contains(t, page.Body, "Test Agent")
	page = b.Submit(page, "disconnect", map[string][]string{"client_id": {s.agent.ClientID}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)

	tokError(t, s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier))), http.StatusBadRequest, "invalid_grant")
	tokError(t, s.tokRefresh(t, tok["refresh_token"].(string), nil), http.StatusBadRequest, "invalid_grant")
}

// TestConnectedSinceIsTheSignIn: the account page dates a connection from
// its sign-in, not from its latest refresh.
func TestConnectedSinceIsTheSignIn(t *testing.T) {
	s := setup(t)
	tok := s.tokSignIn(t)
	var signedIn time.Time
	require.NoError(t, s.env.Pool.QueryRow(t.Context(), `SELECT min(requested_at) FROM oauth_tokens WHERE kind = 'refresh'`).Scan(&signedIn))
	_, err := s.env.Pool.Exec(t.Context(), `UPDATE oauth_tokens SET requested_at = requested_at - interval '40 days',
		session = jsonb_set(session, '{refresh_deadline}', to_jsonb(now() + interval '1 day'))`)
	require.NoError(t, err)
	resp := s.tokRefresh(t, tok["refresh_token"].(string), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	var accountID, companyID int64
	require.NoError(t, s.env.Pool.QueryRow(t.Context(), `SELECT id, company_id FROM accounts WHERE username = $1`, testUser).Scan(&accountID, &companyID))
	conns, err := s.env.Issuer.Store().Connections(t.Context(), companyID, accountID, time.Now())
	require.NoError(t, err)
	require.Len(t, conns, 1)
	require.WithinDuration(t, signedIn.Add(-40*24*time.Hour), conns[0].Since, time.Second)
	require.Equal(t, []string{"orders:read", "orders:write"}, conns[0].Scopes)
}

// TestPagesAnswerHEAD: the pages answer HEAD like GET, and other methods
// with 405 and Allow.
func TestPagesAnswerHEAD(t *testing.T) {
	s := setup(t)
	authURL := s.conf.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	for _, u := range []string{authURL, s.issuer + "/device", s.issuer + "/account"} {
		resp := s.env.Do(t, http.MethodHead, u, nil)
		require.Equal(t, http.StatusOK, resp.Status, u)
		require.Empty(t, resp.Body)
		resp = s.env.Do(t, http.MethodPut, u, nil)
		require.Equal(t, http.StatusMethodNotAllowed, resp.Status, u)
		require.Equal(t, "GET, HEAD, POST", resp.Header.Get("Allow"), u)
	}
}
