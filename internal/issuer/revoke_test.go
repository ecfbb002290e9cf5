package issuer_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// tokenRig is stormline with the helpers of the revocation,
// introspection and account page tests.
type tokenRig struct{ *stormline }

func setupTokens(t *testing.T) *tokenRig {
	t.Helper()
	return &tokenRig{setup(t)}
}

// signedIn signs ada in through Direct Sign-In with scopes and returns the
// tokens.
func (s *tokenRig) signedIn(t *testing.T, scopes ...string) *oauth2.Token {
	t.Helper()
	verifier := oauth2.GenerateVerifier()
	back := s.signIn(t, s.env.Browser(t), verifier, "st4te", scopes)
	tok, err := s.conf.Exchange(s.ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.NotEmpty(t, tok.AccessToken)
	require.NotEmpty(t, tok.RefreshToken)
	return tok
}

// as returns the same Company seen by another test Personal Agent, on
// host: its own client_id, keys and client assertions.
func (s *tokenRig) as(t *testing.T, host string) *tokenRig {
	t.Helper()
	a := s.env.StartAgent(t, host)
	o := *s.stormline
	conf := *s.conf
	conf.ClientID = a.ClientID
	conf.RedirectURL = a.URL("/callback")
	o.agent, o.conf = a, &conf
	o.ctx = context.WithValue(context.Background(), oauth2.HTTPClient,
		&http.Client{Transport: a.AssertionTransport(t, s.env.Client.Transport, s.issuer)})
	return &tokenRig{&o}
}

// refresh uses a refresh token once.
func (s *tokenRig) refresh(refreshToken string) (*oauth2.Token, error) {
	return s.conf.TokenSource(s.ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
}

// requireRefreshFails checks that refreshing fails with invalid_grant.
func (s *tokenRig) requireRefreshFails(t *testing.T, refreshToken string) {
	t.Helper()
	_, err := s.refresh(refreshToken)
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_grant", re.ErrorCode, "%s", re.Body)
}

// assertion returns the client authentication fields of a request by
// s's agent to the issuer iss (spec 4.1).
func (s *tokenRig) assertion(t *testing.T, iss string) url.Values {
	t.Helper()
	return url.Values{
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {s.agent.ClientAssertion(t, iss)},
	}
}

// postForm posts form to rawURL.
func (s *tokenRig) postForm(t *testing.T, rawURL string, form url.Values, headers ...string) *peers.Response {
	t.Helper()
	headers = append([]string{"Content-Type", "application/x-www-form-urlencoded"}, headers...)
	return s.env.Do(t, http.MethodPost, rawURL, form.Encode(), headers...)
}

// revoke revokes token at s's issuer as s's agent (spec 4.6).
func (s *tokenRig) revoke(t *testing.T, token string) *peers.Response {
	t.Helper()
	form := s.assertion(t, s.issuer)
	form.Set("token", token)
	form.Set("token_type_hint", "refresh_token")
	return s.postForm(t, s.issuer+"/oauth/revoke", form)
}

// addCompanyLike creates another Company like stormline, with the account
// ada, and returns its issuer.
func addCompanyLike(t *testing.T, env *issuerEnv, slug string) string {
	t.Helper()
	env.CreateCompany(t, map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Company " + slug, "domain": slug + ".test"},
		"auth":         map[string]any{"scopes": map[string]any{"orders:read": "See your orders", "orders:write": "Change your orders"}},
	})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
		map[string]any{"username": testUser, "password": testPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return env.PublicURL("/t/" + slug)
}

// requireOAuthError checks an RFC 6749 §5.2 error response.
func requireOAuthErrorBody(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	var body struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &body), "%s", resp.Body)
	require.Equal(t, code, body.Error, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
}

func TestRevokeRefreshToken(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read")
	// A refresh under the same grant: its access token must end too.
	fresh, err := s.refresh(tok.RefreshToken)
	require.NoError(t, err)
	require.True(t, s.introspect(t, key, fresh.AccessToken)["active"].(bool))

	resp := s.revoke(t, fresh.RefreshToken)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	s.requireRefreshFails(t, fresh.RefreshToken)
	for _, tk := range []string{tok.AccessToken, fresh.AccessToken, fresh.RefreshToken} {
		require.Equal(t, map[string]any{"active": false}, s.introspect(t, key, tk), "RFC 7009 §2.1: the grant's tokens end")
	}

	// Revoking it again, or a token nobody issued, is fine (RFC 7009 §2.2).
	require.Equal(t, http.StatusOK, s.revoke(t, fresh.RefreshToken).Status)
	require.Equal(t, http.StatusOK, s.revoke(t, "no.such-token").Status)
	require.Equal(t, http.StatusOK, s.revoke(t, "garbage").Status)
}

func TestRevokeAccessTokenEndsTheGrant(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	key := s.apiKey(t, "stormline")
	tok := s.signedIn(t, "orders:read")
	form := s.assertion(t, s.issuer)
	form.Set("token", tok.AccessToken)
	form.Set("token_type_hint", "access_token")
	resp := s.postForm(t, s.issuer+"/oauth/revoke", form)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"active": false}, s.introspect(t, key, tok.AccessToken))
	s.requireRefreshFails(t, tok.RefreshToken)
}

func TestRevokeRefused(t *testing.T) {
	t.Parallel()
	s := setupTokens(t)
	tok := s.signedIn(t, "orders:read")
	other := s.as(t, "other-agent.test")
	otherTok := other.signedIn(t, "orders:read")
	harbor := addCompanyLike(t, s.env, "harbor")

	tests := []struct {
		name   string
		form   func(t *testing.T) url.Values
		url    string
		status int
		code   string
	}{
		{
			name: "no token",
			form: func(t *testing.T) url.Values {
				return s.assertion(t, s.issuer)
			},
			status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "empty token",
			form: func(t *testing.T) url.Values {
				f := s.assertion(t, s.issuer)
				f.Set("token", "")
				return f
			},
			status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "token repeated",
			form: func(t *testing.T) url.Values {
				f := s.assertion(t, s.issuer)
				f["token"] = []string{"unknown.token", tok.RefreshToken}
				return f
			},
			status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "no client assertion",
			form: func(*testing.T) url.Values {
				return url.Values{"token": {tok.RefreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {s.agent.ClientID}}
			},
			status: http.StatusUnauthorized, code: "invalid_client",
		},
		{
			name: "assertion for another issuer",
			form: func(t *testing.T) url.Values {
				f := s.assertion(t, harbor)
				f.Set("token", tok.RefreshToken)
				return f
			},
			status: http.StatusUnauthorized, code: "invalid_client",
		},
		{
			name: "another client's refresh token",
			form: func(t *testing.T) url.Values {
				f := s.assertion(t, s.issuer)
				f.Set("token", otherTok.RefreshToken)
				f.Set("token_type_hint", "refresh_token")
				return f
			},
			status: http.StatusBadRequest, code: "unauthorized_client",
		},
		{
			name: "another client's access token",
			form: func(t *testing.T) url.Values {
				f := s.assertion(t, s.issuer)
				f.Set("token", otherTok.AccessToken)
				f.Set("token_type_hint", "access_token")
				return f
			},
			status: http.StatusBadRequest, code: "unauthorized_client",
		},
		{
			name: "body over 64 KiB",
			form: func(t *testing.T) url.Values {
				f := s.assertion(t, s.issuer)
				f.Set("token", tok.RefreshToken)
				f.Set("token_type_hint", "refresh_token")
				f.Set("padding", strings.Repeat("x", 64<<10))
				return f
			},
			status: http.StatusBadRequest, code: "invalid_request",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireOAuthErrorBody(t, s.postForm(t, s.issuer+"/oauth/revoke", tt.form(t)), tt.status, tt.code)
		})
	}

	// Revoking stormline's token at harbor, as the same agent, answers as
	// for an unknown token and changes nothing.
	form := s.assertion(t, harbor)
	form.Set("token", tok.RefreshToken)
	form.Set("token_type_hint", "refresh_token")
	resp := s.postForm(t, harbor+"/oauth/revoke", form)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	// Nothing above revoked anything.
	_, err := s.refresh(tok.RefreshToken)
	require.NoError(t, err)
	_, err = other.refresh(otherTok.RefreshToken)
	require.NoError(t, err)
}

// at returns s's agent signing in at another Company's issuer iss.
func (s *tokenRig) at(t *testing.T, iss string) *tokenRig {
	t.Helper()
	o := *s.stormline
	conf := *s.conf
	conf.Endpoint.AuthURL = iss + "/oauth/authorize"
	conf.Endpoint.TokenURL = iss + "/oauth/token"
	conf.Endpoint.DeviceAuthURL = iss + "/oauth/device_authorization"
	o.conf, o.issuer = &conf, iss
	o.ctx = context.WithValue(context.Background(), oauth2.HTTPClient,
		&http.Client{Transport: s.agent.AssertionTransport(t, s.env.Client.Transport, iss)})
	return &tokenRig{&o}
}
