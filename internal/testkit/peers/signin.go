package peers

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

// SignIn has user (with password) sign agent in at issuer, an issuer the
// site serves, through Direct Sign-In, approving scopes on the consent
// page, and returns the tokens.
// resource, when set, asks for a token for that service (RFC 8707).
func (s *Site) SignIn(t testing.TB, agent *Agent, issuer, user, password string, scopes []string, resource string) *oauth2.Token {
	t.Helper()
	conf := &oauth2.Config{
		ClientID: agent.ClientID,
		Endpoint: oauth2.Endpoint{AuthURL: issuer + "/oauth/authorize", TokenURL: issuer + "/oauth/token",
			AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: agent.URL("/callback"),
		Scopes:      scopes,
	}
	verifier := oauth2.GenerateVerifier()
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", resource))
	}
	b := s.Browser(t)
	page := b.Get(conf.AuthCodeURL("st4te", opts...))
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {user}, "password": {password}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "approve", map[string][]string{"scope": scopes})
	require.Equal(t, http.StatusSeeOther, page.Status, page.Body)
	back, err := url.Parse(page.Location())
	require.NoError(t, err)
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient,
		&http.Client{Transport: agent.AssertionTransport(t, s.Client.Transport, issuer)})
	tok, err := conf.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	return tok
}

// Revoke has agent revoke refreshToken at issuer (RFC 7009): signing out
// when it is the agent's last one for the account (spec 4.6, 5.5).
func (s *Site) Revoke(t testing.TB, agent *Agent, issuer, refreshToken string) {
	t.Helper()
	form := url.Values{"token": {refreshToken}, "token_type_hint": {"refresh_token"},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {agent.ClientAssertion(t, issuer)}}
	resp := s.Do(t, http.MethodPost, issuer+"/oauth/revoke", form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}
