package issuer_test

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// stormline is the Company most tests use: Direct and Device Sign-In,
// three scopes, one account.
type stormline struct {
	env    *issuerEnv
	agent  *peers.Agent
	issuer string
	conf   *oauth2.Config
	ctx    context.Context
	// trips counts the database's round trips, when o.Tracer was one
	// (setupWith).
	trips *tripRecorder
}

const (
	testUser     = "ada"
	testPassword = "correct horse battery staple"
)

// setup serves the issuer with the stormline Company, its account ada
// and the test agent.
func setup(t *testing.T) *stormline {
	t.Helper()
	return setupWith(t, options{}, nil)
}

// setupWith is setup on an issuer built with o, and with more settings
// for the Company (such as rate_limits).
func setupWith(t testing.TB, o options, settings map[string]any) *stormline {
	t.Helper()
	env := newEnv(t, o)
	company := map[string]any{
		"slug":         "stormline",
		"organization": map[string]any{"name": "Stormline Outfitters", "domain": "stormline.test"},
		"auth": map[string]any{"scopes": map[string]any{
			"orders:read":  "See your orders",
			"orders:write": "Change your orders",
			"addresses":    "See and change your addresses",
		}},
	}
	maps.Copy(company, settings)
	env.CreateCompany(t, company)
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/accounts",
		map[string]any{"username": testUser, "password": testPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	agent := env.StartAgent(t, "agent.test")
	issuer := env.PublicURL("/t/stormline")
	s := &stormline{env: env, agent: agent, issuer: issuer}
	s.trips, _ = o.Tracer.(*tripRecorder)
	s.conf = &oauth2.Config{
		ClientID: agent.ClientID,
		Endpoint: oauth2.Endpoint{
			AuthURL:       issuer + "/oauth/authorize",
			TokenURL:      issuer + "/oauth/token",
			DeviceAuthURL: issuer + "/oauth/device_authorization",
			AuthStyle:     oauth2.AuthStyleInParams,
		},
		RedirectURL: agent.URL("/callback"),
		Scopes:      []string{"orders:read", "orders:write"},
	}
	s.ctx = context.WithValue(context.Background(), oauth2.HTTPClient,
		&http.Client{Transport: agent.AssertionTransport(t, env.Client.Transport, issuer)})
	return s
}

// signIn drives Direct Sign-In through the pages and returns the redirect
// back to the agent.
func (s *stormline) signIn(t *testing.T, b *peers.Browser, verifier, state string, scopes []string) *url.URL {
	t.Helper()
	page := b.Get(s.conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)))
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Test Agent")
	page = b.Submit(page, "approve", map[string][]string{"scope": scopes})
	require.Equal(t, http.StatusSeeOther, page.Status, page.Body)
	u, err := url.Parse(page.Location())
	require.NoError(t, err)
	return u
}

func TestDirectSignInWithOAuth2Library(t *testing.T) {
	s := setup(t)
	verifier := oauth2.GenerateVerifier()
	back := s.signIn(t, s.env.Browser(t), verifier, "st4te", []string{"orders:read", "orders:write"})
	require.True(t, strings.HasPrefix(back.String(), s.agent.URL("/callback")))
	require.Equal(t, "st4te", back.Query().Get("state"))
	require.Equal(t, s.issuer, back.Query().Get("iss"), "RFC 9207 iss on the redirect")

	tok, err := s.conf.Exchange(s.ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.NotEmpty(t, tok.AccessToken, "%s", back)
	require.NotEmpty(t, tok.RefreshToken)
	require.Equal(t, "Bearer", tok.TokenType)
	require.Nil(t, tok.Extra("scope"), "scope is left out when granted equals requested")

	// Refresh through the library: a new access token, a rotated refresh
	// token.
	tok.Expiry = tok.Expiry.Add(-24 * 60 * 60 * 1e9)
	fresh, err := s.conf.TokenSource(s.ctx, tok).Token()
	require.NoError(t, err)
	require.NotEqual(t, tok.AccessToken, fresh.AccessToken)
	require.NotEqual(t, tok.RefreshToken, fresh.RefreshToken)

	// Revoke the refresh token: refreshing fails with invalid_grant.
	form := url.Values{"token": {fresh.RefreshToken}, "token_type_hint": {"refresh_token"},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {s.agent.ClientAssertion(t, s.issuer)}}
	resp := s.env.Do(t, http.MethodPost, s.issuer+"/oauth/revoke", form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	fresh.Expiry = tok.Expiry
	_, err = s.conf.TokenSource(s.ctx, fresh).Token()
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_grant", re.ErrorCode)
}

func TestDeviceSignInWithOAuth2Library(t *testing.T) {
	s := setup(t)
	da, err := s.conf.DeviceAuth(s.ctx)
	require.NoError(t, err)
	require.Equal(t, s.issuer+"/device", da.VerificationURI)
	require.Contains(t, da.VerificationURIComplete, "user_code=")

	b := s.env.Browser(t)
	page := b.Get(da.VerificationURIComplete)
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "continue", nil)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Contains(t, page.Body, da.UserCode)
	page = b.Submit(page, "approve", map[string][]string{"scope": {"orders:read"}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)

	da.Interval = 0
	tok, err := s.conf.DeviceAccessToken(s.ctx, da)
	require.NoError(t, err)
	require.NotEmpty(t, tok.RefreshToken)
	require.Equal(t, "orders:read", tok.Extra("scope"), "the User left a scope out")
}
