package issuer_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Tests of Direct Sign-In's authorization endpoint, one rule each (spec
// 4.2, 4.7; RFC 6749 §4.1, RFC 7636, RFC 8252 §7.3, RFC 8707, RFC 9207).
// Helpers are prefixed az so they cannot clash with other files of the
// package.

const azState = "st4te"

// azParams are a valid authorization request for s's agent; mutate breaks
// one rule.
func azParams(s *stormline, verifier string, mutate func(q url.Values)) url.Values {
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {s.agent.ClientID},
		"redirect_uri":          {s.agent.URL("/callback")},
		"scope":                 {"orders:read orders:write"},
		"state":                 {azState},
		"code_challenge":        {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"},
	}
	if mutate != nil {
		mutate(q)
	}
	return q
}

func azURL(s *stormline, q url.Values) string {
	return s.issuer + "/oauth/authorize?" + q.Encode()
}

// azRows counts the Company's oauth_tokens rows of the given kinds.
func azRows(t *testing.T, env *issuerEnv, slug string, kinds ...string) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM oauth_tokens o JOIN companies c ON c.id = o.company_id
		WHERE c.slug = $1 AND o.kind = ANY($2)`, slug, kinds).Scan(&n))
	return n
}

// azNothingStored asserts that no code or PKCE request was stored.
func azNothingStored(t *testing.T, env *issuerEnv, slug string) {
	t.Helper()
	require.Zero(t, azRows(t, env, slug, "code", "pkce"), "nothing may be stored for a refused request")
}

func azLogins(t *testing.T, env *issuerEnv) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM issuer_logins`).Scan(&n))
	return n
}

func azPatch(t *testing.T, env *issuerEnv, slug string, patch map[string]any) {
	t.Helper()
	resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+slug, patch)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// azErrorRedirect asserts that page sends the browser back to the agent's
// redirect_uri with error, the request's state and the issuer's iss
// (RFC 6749 §4.1.2.1, RFC 9207), and no code.
func azErrorRedirect(t *testing.T, s *stormline, p *peers.Page, redirect, wantErr, wantState string) url.Values {
	t.Helper()
	require.Equal(t, http.StatusSeeOther, p.Status, "want a redirect, got:\n%s", p.Body)
	loc, err := url.Parse(p.Location())
	require.NoError(t, err)
	back := *loc
	back.RawQuery = ""
	require.Equal(t, redirect, back.String(), "the error goes to the redirect_uri")
	q := loc.Query()
	require.Equal(t, wantErr, q.Get("error"), "%s", loc)
	require.Equal(t, s.issuer, q.Get("iss"), "iss is the issuer exactly (RFC 9207)")
	require.Equal(t, wantState, q.Get("state"))
	require.Empty(t, q.Get("code"))
	return q
}

// azErrorPage asserts an error page: no redirect at all.
func azErrorPage(t *testing.T, p *peers.Page, status int) {
	t.Helper()
	require.Equal(t, status, p.Status, "%s", p.Body)
	require.Empty(t, p.Location(), "an error about the client or redirect_uri is never redirected")
	require.Contains(t, p.Header.Get("Content-Type"), "text/html")
	require.Contains(t, p.Body, "<h1>")
}

// azLogin signs the browser in from the login page and returns the
// consent page.
func azLogin(t *testing.T, b *peers.Browser, page *peers.Page) *peers.Page {
	t.Helper()
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, `value="approve"`, "the consent page")
	return page
}

// azApprove approves scopes on a consent page and returns the code on the
// redirect, after checking state and iss.
func azApprove(t *testing.T, s *stormline, b *peers.Browser, consent *peers.Page, redirect string, scopes []string) string {
	t.Helper()
	p := b.Submit(consent, "approve", map[string][]string{"scope": scopes})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	loc, err := url.Parse(p.Location())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(loc.String(), redirect+"?"), "%s", loc)
	require.Empty(t, loc.Query().Get("error"), "%s", loc)
	require.Equal(t, azState, loc.Query().Get("state"))
	require.Equal(t, s.issuer, loc.Query().Get("iss"), "iss is the issuer exactly (RFC 9207)")
	require.NotEmpty(t, loc.Query().Get("code"))
	return loc.Query().Get("code")
}

// azClaims decodes a JWT's payload without verifying it.
func azClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

func azPageHeaders(t *testing.T, h http.Header) {
	t.Helper()
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
}

// TestAuthorizeErrorsRedirectBeforeLogin: once client_id and redirect_uri
// are the agent's, every other broken rule sends the browser back at the
// first GET, with iss and state, before any login page and storing
// nothing.
func TestAuthorizeErrorsRedirectBeforeLogin(t *testing.T) {
	t.Parallel()
	s := setup(t)
	verifier := oauth2.GenerateVerifier()
	for _, tc := range []struct {
		name    string
		mutate  func(q url.Values)
		wantErr string
		state   string // the state sent back; azState when empty
		noState bool
	}{
		// PKCE with S256 (spec 4.2, RFC 7636 §4.4.1).
		{name: "code_challenge missing", mutate: func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, wantErr: "invalid_request"},
		{name: "code_challenge_method plain", mutate: func(q url.Values) { q.Set("code_challenge_method", "plain"); q.Set("code_challenge", verifier) }, wantErr: "invalid_request"},
		{name: "code_challenge_method missing", mutate: func(q url.Values) { q.Del("code_challenge_method") }, wantErr: "invalid_request"},
		{name: "code_challenge_method unknown", mutate: func(q url.Values) { q.Set("code_challenge_method", "S512") }, wantErr: "invalid_request"},
		{name: "code_challenge not a SHA-256", mutate: func(q url.Values) { q.Set("code_challenge", "abc") }, wantErr: "invalid_request"},
		// scope (spec 4.7).
		{name: "scope missing", mutate: func(q url.Values) { q.Del("scope") }, wantErr: "invalid_scope"},
		{name: "scope blank", mutate: func(q url.Values) { q.Set("scope", " ") }, wantErr: "invalid_scope"},
		{name: "scope unknown", mutate: func(q url.Values) { q.Set("scope", "orders:read payments") }, wantErr: "invalid_scope"},
		// resource (spec 4.5, RFC 8707).
		{name: "resource of another site", mutate: func(q url.Values) { q.Set("resource", "https://evil.example") }, wantErr: "invalid_target"},
		{name: "resource of the issuer", mutate: func(q url.Values) { q.Set("resource", s.issuer) }, wantErr: "invalid_target"},
		// Only query responses; parameters at most once (RFC 6749 §3.1).
		{name: "response_mode fragment", mutate: func(q url.Values) { q.Set("response_mode", "fragment") }, wantErr: "invalid_request"},
		{name: "response_mode form_post", mutate: func(q url.Values) { q.Set("response_mode", "form_post") }, wantErr: "invalid_request"},
		{name: "scope twice", mutate: func(q url.Values) { q["scope"] = []string{"orders:read", "orders:write"} }, wantErr: "invalid_request"},
		{name: "code_challenge twice", mutate: func(q url.Values) { q.Add("code_challenge", q.Get("code_challenge")) }, wantErr: "invalid_request"},
		{name: "resource twice", mutate: func(q url.Values) {
			q["resource"] = []string{"https://stormline.test", s.issuer + "/mcp"}
		}, wantErr: "invalid_request"},
		{name: "state twice", mutate: func(q url.Values) { q["state"] = []string{"one", "two"} }, wantErr: "invalid_request", state: "one"},
		// response_type (RFC 6749 §4.1.2.1).
		{name: "response_type token", mutate: func(q url.Values) { q.Set("response_type", "token") }, wantErr: "unsupported_response_type"},
		{name: "response_type missing", mutate: func(q url.Values) { q.Del("response_type") }, wantErr: "unsupported_response_type"},
		// Without state, PKCE is still required (RFC 9700 §2.1).
		{name: "state and code_challenge missing", mutate: func(q url.Values) {
			q.Del("state")
			q.Del("code_challenge")
			q.Del("code_challenge_method")
		}, wantErr: "invalid_request", noState: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := s.env.Browser(t)
			p := b.Get(azURL(s, azParams(s, verifier, tc.mutate)))
			state := azState
			if tc.state != "" {
				state = tc.state
			}
			if tc.noState {
				state = ""
			}
			q := azErrorRedirect(t, s, p, s.agent.URL("/callback"), tc.wantErr, state)
			require.NotEmpty(t, q.Get("error_description"))
			require.Empty(t, p.Header.Values("Set-Cookie"), "no login page was shown")
			require.Equal(t, "no-store", p.Header.Get("Cache-Control"))
			azNothingStored(t, s.env, "stormline")
		})
	}
	require.Zero(t, azLogins(t, s.env))
}

// TestAuthorizeWithoutState: state is optional, and PKCE takes its place
// against CSRF. RFC 6749 §4.1.1: "state RECOMMENDED. An opaque value used
// by the client to maintain state between the request and callback."
// RFC 9700 §2.1: "Clients that have ensured that the authorization server
// supports Proof Key for Code Exchange (PKCE, [RFC7636]) MAY rely on the
// CSRF protection provided by PKCE." Spec 4.2 requires PKCE, so a Direct
// Sign-In without state completes, and its redirect carries no state; a
// short state is passed back as it was sent.
func TestAuthorizeWithoutState(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, state := range []string{"", "x"} {
		t.Run("state "+strconv.Quote(state), func(t *testing.T) {
			verifier := oauth2.GenerateVerifier()
			back := s.signIn(t, s.env.Browser(t), verifier, state, []string{"orders:read"})
			q := back.Query()
			require.Empty(t, q.Get("error"), "%s", back)
			require.Equal(t, s.issuer, q.Get("iss"))
			require.Equal(t, state != "", q.Has("state"), "state comes back only when sent: %s", back)
			require.Equal(t, state, q.Get("state"))
			tok, err := s.conf.Exchange(s.ctx, q.Get("code"), oauth2.VerifierOption(verifier))
			require.NoError(t, err)
			require.NotEmpty(t, tok.AccessToken)
		})
	}
}

// TestAuthorizeAcceptedVariants: requests that look unusual but follow the
// rules reach the login page.
func TestAuthorizeAcceptedVariants(t *testing.T) {
	t.Parallel()
	s := setup(t)
	verifier := oauth2.GenerateVerifier()
	for _, tc := range []struct {
		name   string
		mutate func(q url.Values)
	}{
		{name: "response_mode query", mutate: func(q url.Values) { q.Set("response_mode", "query") }},
		{name: "resource of the Company's domain", mutate: func(q url.Values) { q.Set("resource", "https://stormline.test") }},
		{name: "resource of the MCP server", mutate: func(q url.Values) { q.Set("resource", s.issuer+"/mcp") }},
		{name: "one scope", mutate: func(q url.Values) { q.Set("scope", "addresses") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := s.env.Browser(t).Get(azURL(s, azParams(s, verifier, tc.mutate)))
			require.Equal(t, http.StatusOK, p.Status, p.Body)
			require.Contains(t, p.Body, `value="login"`)
		})
	}
}

// TestAuthorizeBadClientOrRedirectShowsPage: a problem with client_id or
// redirect_uri is shown to the User, never redirected (RFC 6749
// §4.1.2.1), and nothing is stored.
func TestAuthorizeBadClientOrRedirectShowsPage(t *testing.T) {
	t.Parallel()
	s := setup(t)
	verifier := oauth2.GenerateVerifier()
	// An agent whose metadata is invalid: a redirect_uri on another domain.
	bad := s.env.StartAgent(t, "bad-agent.test")
	md := bad.Metadata()
	md["redirect_uris"] = []string{"https://elsewhere.example/callback"}
	bad.SetMetadata(md)

	callback := s.agent.URL("/callback")
	for _, tc := range []struct {
		name    string
		mutate  func(q url.Values)
		status  int
		errCode string // the OAuth error the page names, if any
	}{
		{name: "redirect_uri missing", mutate: func(q url.Values) { q.Del("redirect_uri") }, status: http.StatusBadRequest},
		{name: "redirect_uri twice", mutate: func(q url.Values) { q.Add("redirect_uri", callback) }, status: http.StatusBadRequest},
		{name: "redirect_uri not registered", mutate: func(q url.Values) { q.Set("redirect_uri", s.agent.URL("/other")) }, status: http.StatusBadRequest},
		{name: "redirect_uri registered with extra query", mutate: func(q url.Values) { q.Set("redirect_uri", callback+"?x=1") }, status: http.StatusBadRequest},
		{name: "redirect_uri registered with fragment", mutate: func(q url.Values) { q.Set("redirect_uri", callback+"#x") }, status: http.StatusBadRequest},
		{name: "redirect_uri registered with trailing slash", mutate: func(q url.Values) { q.Set("redirect_uri", callback+"/") }, status: http.StatusBadRequest},
		{name: "redirect_uri http, not loopback", mutate: func(q url.Values) {
			q.Set("redirect_uri", strings.Replace(callback, "https://", "http://", 1))
		}, status: http.StatusBadRequest},
		{name: "redirect_uri on another site", mutate: func(q url.Values) { q.Set("redirect_uri", "https://evil.example/callback") }, status: http.StatusBadRequest},
		{name: "redirect_uri loopback, none registered", mutate: func(q url.Values) { q.Set("redirect_uri", "http://127.0.0.1:53123/callback") }, status: http.StatusBadRequest},
		{name: "client_id missing", mutate: func(q url.Values) { q.Del("client_id") }, status: http.StatusBadRequest},
		{name: "client_id twice", mutate: func(q url.Values) { q.Add("client_id", s.agent.ClientID) }, status: http.StatusBadRequest},
		{name: "client_id not https", mutate: func(q url.Values) {
			q.Set("client_id", strings.Replace(s.agent.ClientID, "https://", "http://", 1))
		}, status: http.StatusBadRequest, errCode: "invalid_client"},
		{name: "client_id on an unknown host", mutate: func(q url.Values) { q.Set("client_id", "https://unknown-agent.test/agent.json") },
			status: http.StatusBadRequest, errCode: "invalid_client"},
		{name: "client metadata invalid", mutate: func(q url.Values) {
			q.Set("client_id", bad.ClientID)
			q.Set("redirect_uri", bad.URL("/callback"))
		}, status: http.StatusBadRequest, errCode: "invalid_client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := s.env.Browser(t).Get(azURL(s, azParams(s, verifier, tc.mutate)))
			azErrorPage(t, p, tc.status)
			azPageHeaders(t, p.Header)
			if tc.errCode != "" {
				require.Contains(t, p.Body, "Error: "+tc.errCode)
			}
			require.NotContains(t, p.Body, `value="login"`)
			azNothingStored(t, s.env, "stormline")
		})
	}
}

// TestAuthorizeUnfetchableClient: client metadata that cannot be fetched
// is the agent's problem, not the platform's: an invalid_client page with
// 400, not a 503, never redirected since no redirect_uri can be trusted,
// logged at info rather than as an error.
func TestAuthorizeUnfetchableClient(t *testing.T) {
	t.Parallel()
	s := setup(t)
	logs := &peers.SyncBuffer{}
	h := s.env.Handler(t, options{Logs: logs, LogLevel: slog.LevelDebug})
	broken := s.env.StartAgent(t, "broken-agent.test")
	broken.Serve("/agent.json", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	verifier := oauth2.GenerateVerifier()
	for name, clientID := range map[string]string{
		"metadata answers 500":  broken.ClientID,
		"host does not resolve": "https://unknown-agent.test/agent.json",
	} {
		q := azParams(s, verifier, func(q url.Values) {
			q.Set("client_id", clientID)
			q.Set("redirect_uri", broken.URL("/callback"))
		})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, azURL(s, q), nil))
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", name, rec.Body)
		require.Empty(t, rec.Header().Get("Location"), name)
		require.Contains(t, rec.Header().Get("Content-Type"), "text/html", name)
		require.Contains(t, rec.Body.String(), "Error: invalid_client", name)
		require.Contains(t, rec.Body.String(), "could not be fetched", name)
	}
	azNothingStored(t, s.env, "stormline")
	out := logs.String()
	require.Contains(t, out, `"level":"INFO","msg":"client metadata unavailable"`)
	require.NotContains(t, out, `"level":"ERROR"`)
}

// TestAuthorizeLoopbackRedirect: a loopback redirect_uri matches on any
// port (RFC 8252 §7.3), and only on that.
func TestAuthorizeLoopbackRedirect(t *testing.T) {
	t.Parallel()
	s := setup(t)
	md := s.agent.Metadata()
	md["redirect_uris"] = []string{s.agent.URL("/callback"), "http://127.0.0.1/callback"}
	s.agent.SetMetadata(md)
	verifier := oauth2.GenerateVerifier()

	for _, bad := range []string{
		"http://localhost:53123/callback",
		"http://[::1]:53123/callback",
		"https://127.0.0.1:53123/callback",
		"http://127.0.0.1:53123/other",
		"http://127.0.0.1:53123/callback?x=1",
		"http://user@127.0.0.1:53123/callback",
	} {
		t.Run(bad, func(t *testing.T) {
			p := s.env.Browser(t).Get(azURL(s, azParams(s, verifier, func(q url.Values) { q.Set("redirect_uri", bad) })))
			azErrorPage(t, p, http.StatusBadRequest)
		})
	}
	azNothingStored(t, s.env, "stormline")

	// Errors go to the port the request named.
	const redirect = "http://127.0.0.1:53123/callback"
	b := s.env.Browser(t)
	p := b.Get(azURL(s, azParams(s, verifier, func(q url.Values) { q.Set("redirect_uri", redirect); q.Del("scope") })))
	azErrorRedirect(t, s, p, redirect, "invalid_scope", azState)

	p = b.Get(azURL(s, azParams(s, verifier, func(q url.Values) { q.Set("redirect_uri", redirect) })))
	code := azApprove(t, s, b, azLogin(t, b, p), redirect, []string{"orders:read", "orders:write"})
	conf := *s.conf
	conf.RedirectURL = redirect
	tok, err := conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.NotEmpty(t, tok.RefreshToken)
}

// TestAuthorizeAgentPolicy: a Company that refuses the agent shows
// invalid_client; one that refuses it Direct Sign-In sends it back with
// unauthorized_client; refusing only Device Sign-In leaves Direct Sign-In
// (spec 4.1).
func TestAuthorizeAgentPolicy(t *testing.T) {
	t.Parallel()
	s := setup(t)
	verifier := oauth2.GenerateVerifier()
	authURL := azURL(s, azParams(s, verifier, nil))

	azPatch(t, s.env, "stormline", map[string]any{"agents": map[string]any{
		"accept": "listed", "client_ids": []string{"https://other-agent.test/agent.json"}}})
	p := s.env.Browser(t).Get(authURL)
	azErrorPage(t, p, http.StatusBadRequest)
	require.Contains(t, p.Body, "Error: invalid_client")
	azNothingStored(t, s.env, "stormline")

	azPatch(t, s.env, "stormline", map[string]any{"agents": map[string]any{"accept": "all", "client_ids": nil}})
	for _, refused := range [][]string{{"authorization_code"}, {}} {
		azPatch(t, s.env, "stormline", map[string]any{"agents": map[string]any{
			"sign_in_refused": map[string]any{s.agent.ClientID: refused}}})
		p = s.env.Browser(t).Get(authURL)
		azErrorRedirect(t, s, p, s.agent.URL("/callback"), "unauthorized_client", azState)
		azNothingStored(t, s.env, "stormline")
	}

	azPatch(t, s.env, "stormline", map[string]any{"agents": map[string]any{
		"sign_in_refused": map[string]any{s.agent.ClientID: []string{"urn:ietf:params:oauth:grant-type:device_code"}}}})
	back := s.signIn(t, s.env.Browser(t), verifier, azState, []string{"orders:read"})
	require.Empty(t, back.Query().Get("error"), "%s", back)
	tok, err := s.conf.Exchange(s.ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.Equal(t, "orders:read", tok.Extra("scope"))
}

// TestAuthorizeConsentDecisions: the User declines, approves none, some,
// or tries to add a scope (spec 4.7).
func TestAuthorizeConsentDecisions(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b := s.env.Browser(t)
	callback := s.agent.URL("/callback")

	verifier := oauth2.GenerateVerifier()
	consent := azLogin(t, b, b.Get(azURL(s, azParams(s, verifier, nil))))
	azPageHeaders(t, consent.Header)

	t.Run("deny", func(t *testing.T) {
		p := b.Submit(consent, "deny", nil)
		azErrorRedirect(t, s, p, callback, "access_denied", azState)
		azNothingStored(t, s.env, "stormline")
	})
	t.Run("approve none", func(t *testing.T) {
		p := b.Submit(consent, "approve", map[string][]string{"scope": nil})
		azErrorRedirect(t, s, p, callback, "access_denied", azState)
		azNothingStored(t, s.env, "stormline")
	})
	t.Run("approve only unrequested", func(t *testing.T) {
		p := b.Submit(consent, "approve", map[string][]string{"scope": {"addresses"}})
		azErrorRedirect(t, s, p, callback, "access_denied", azState)
		azNothingStored(t, s.env, "stormline")
	})
	t.Run("approve a subset", func(t *testing.T) {
		verifier := oauth2.GenerateVerifier()
		consent := b.Get(azURL(s, azParams(s, verifier, nil)))
		require.Contains(t, consent.Body, `value="approve"`, "still signed in: straight to consent")
		code := azApprove(t, s, b, consent, callback, []string{"orders:read"})
		tok, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
		require.NoError(t, err)
		require.Equal(t, "orders:read", tok.Extra("scope"), "scope is sent when fewer were granted (spec 4.7)")
		require.Equal(t, "orders:read", azClaims(t, tok.AccessToken)["scope"])
	})
	t.Run("approve with an unrequested scope", func(t *testing.T) {
		verifier := oauth2.GenerateVerifier()
		consent := b.Get(azURL(s, azParams(s, verifier, func(q url.Values) { q.Set("scope", "orders:read") })))
		code := azApprove(t, s, b, consent, callback, []string{"orders:read", "addresses", "orders:write"})
		tok, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
		require.NoError(t, err)
		require.Nil(t, tok.Extra("scope"), "granted equals requested")
		require.Equal(t, "orders:read", azClaims(t, tok.AccessToken)["scope"], "never beyond those requested (spec 4.7)")
		var granted []string
		require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT granted_scopes FROM oauth_tokens
			WHERE kind = 'refresh' ORDER BY requested_at DESC LIMIT 1`).Scan(&granted))
		require.Equal(t, []string{"orders:read"}, granted)
	})
}

// TestAuthorizeResourceAudience: a sign-in for the MCP server gets tokens
// for it only (spec 4.5).
func TestAuthorizeResourceAudience(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b := s.env.Browser(t)
	mcp := s.issuer + "/mcp"
	for resource, aud := range map[string][]any{
		mcp:                      {mcp},
		"https://stormline.test": {"https://stormline.test"},
	} {
		verifier := oauth2.GenerateVerifier()
		p := b.Get(azURL(s, azParams(s, verifier, func(q url.Values) { q.Set("resource", resource) })))
		if strings.Contains(p.Body, `value="login"`) {
			p = azLogin(t, b, p)
		}
		code := azApprove(t, s, b, p, s.agent.URL("/callback"), []string{"orders:read", "orders:write"})
		tok, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
		require.NoError(t, err)
		require.Equal(t, aud, azClaims(t, tok.AccessToken)["aud"], resource)
	}
}

// azPost posts a page's login form from outside the Browser helper, with
// extra headers.
func azPost(t *testing.T, b *peers.Browser, page *peers.Page, form url.Values, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, page.URL.String(), strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestAuthorizeLoginCSRF: the login form is accepted only with this
// browser's token and from the page's own origin.
func TestAuthorizeLoginCSRF(t *testing.T) {
	t.Parallel()
	s := setup(t)
	authURL := azURL(s, azParams(s, oauth2.GenerateVerifier(), nil))
	creds := map[string][]string{"username": {testUser}, "password": {testPassword}}

	b := s.env.Browser(t)
	login := b.Get(authURL)
	require.Equal(t, http.StatusOK, login.Status, login.Body)
	azPageHeaders(t, login.Header)
	require.NotEmpty(t, login.Field("csrf"))

	t.Run("without the csrf field", func(t *testing.T) {
		p := b.Submit(login, "login", map[string][]string{"username": {testUser}, "password": {testPassword}, "csrf": nil})
		azErrorPage(t, p, http.StatusForbidden)
		azPageHeaders(t, p.Header)
	})
	t.Run("with another browser's cookie", func(t *testing.T) {
		other := s.env.Browser(t)
		require.Equal(t, http.StatusOK, other.Get(authURL).Status)
		p := other.Submit(login, "login", creds)
		azErrorPage(t, p, http.StatusForbidden)
	})
	t.Run("from a browser without the cookie", func(t *testing.T) {
		p := s.env.Browser(t).Submit(login, "login", creds)
		azErrorPage(t, p, http.StatusForbidden)
	})
	form := azLoginForm(login, creds)
	t.Run("from another origin", func(t *testing.T) {
		status, body := azPost(t, b, login, form, "Origin", "https://evil.example")
		require.Equal(t, http.StatusForbidden, status, body)
	})
	t.Run("cross-site by Sec-Fetch-Site", func(t *testing.T) {
		status, body := azPost(t, b, login, form, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		require.Equal(t, http.StatusForbidden, status, body)
	})
	t.Run("same-site but another origin", func(t *testing.T) {
		status, body := azPost(t, b, login, form, "Sec-Fetch-Site", "same-site")
		require.Equal(t, http.StatusForbidden, status, body)
	})
	require.Zero(t, azLogins(t, s.env), "no login row for a refused form")

	// The page's own origin passes.
	status, body := azPost(t, b, login, form, "Origin", s.env.PublicURL(""), "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `value="approve"`)
	require.Equal(t, 1, azLogins(t, s.env))
	azNothingStored(t, s.env, "stormline")
}

// azLoginForm is the login form a Browser would submit from p.
func azLoginForm(p *peers.Page, set map[string][]string) url.Values {
	form := url.Values{"csrf": {p.Field("csrf")}, "action": {"login"}}
	for k, v := range set {
		form[k] = v
	}
	return form
}

// TestAuthorizeLoginFailures: a failed login never says which field was
// wrong, and repeated failures are throttled (internal/accounts).
func TestAuthorizeLoginFailures(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b := s.env.Browser(t)
	login := b.Get(azURL(s, azParams(s, oauth2.GenerateVerifier(), nil)))
	require.Equal(t, http.StatusOK, login.Status)

	errorText := func(p *peers.Page) string {
		t.Helper()
		i := strings.Index(p.Body, `class="error" role="alert">`)
		require.GreaterOrEqual(t, i, 0, "an error message:\n%s", p.Body)
		rest := p.Body[i+len(`class="error" role="alert">`):]
		return rest[:strings.Index(rest, "<")]
	}

	unknown := b.Submit(login, "login", map[string][]string{"username": {"nobody"}, "password": {testPassword}})
	require.Equal(t, http.StatusBadRequest, unknown.Status)
	azPageHeaders(t, unknown.Header)
	msg := errorText(unknown)
	for _, word := range []string{"unknown", "no such", "not found", "does not exist", "incorrect password", "wrong password"} {
		require.NotContains(t, strings.ToLower(msg), word)
	}

	var p *peers.Page
	for i := 1; i <= 5; i++ {
		p = b.Submit(login, "login", map[string][]string{"username": {testUser}, "password": {"not the password"}})
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Equal(t, msg, errorText(p), "a wrong password reads like an unknown username (attempt %d)", i)
	}
	// The fifth failure locks the username for a second, each later one
	// for twice as long, so a few more failures meet a lock however slow
	// the machine.
	throttled := false
	for range 6 {
		p = b.Submit(login, "login", map[string][]string{"username": {testUser}, "password": {"still not the password"}})
		if strings.Contains(errorText(p), "Try again in") {
			throttled = true
			break
		}
	}
	require.True(t, throttled, "%s", p.Body)
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Contains(t, errorText(p), "Too many failed attempts")
	require.NotEmpty(t, p.Header.Get("Retry-After"))
	require.Zero(t, azLogins(t, s.env))
}

// TestAuthorizeConsentPage: the User sees who asks, for which Company,
// and what each scope allows (spec 4.2, 4.7).
func TestAuthorizeConsentPage(t *testing.T) {
	t.Parallel()
	s := setup(t)
	azPatch(t, s.env, "stormline", map[string]any{"auth": map[string]any{"scope_hints": map[string]any{
		"orders:write": map[string]any{"changes": "irreversible", "personal_data": false},
		"addresses":    map[string]any{"changes": "reversible", "personal_data": true},
	}}})
	b := s.env.Browser(t)
	p := azLogin(t, b, b.Get(azURL(s, azParams(s, oauth2.GenerateVerifier(), func(q url.Values) {
		q.Set("scope", "orders:read orders:write addresses")
	}))))
	agentURL, err := url.Parse(s.agent.ClientID)
	require.NoError(t, err)
	for _, want := range []string{
		"Test Agent", agentURL.Host, "Stormline Outfitters", "stormline.test",
		"See your orders", "Change your orders", "See and change your addresses",
		"Can make changes that cannot be undone", "Can make changes that can be undone",
		"Shows or changes your personal data",
		`value="orders:read"`, `value="orders:write"`, `value="addresses"`,
	} {
		require.Contains(t, p.Body, want)
	}
	require.Equal(t, 1, strings.Count(p.Body, "Shows or changes your personal data"), "only addresses says so")
}

// TestAuthorizeCodeAtAnotherCompany: a code is valid only at the issuer
// that made it, even for the same agent and username (spec 4.2).
func TestAuthorizeCodeAtAnotherCompany(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.env.CreateCompany(t, map[string]any{
		"slug":         "bakery",
		"organization": map[string]any{"name": "Bakery", "domain": "bakery.test"},
		"auth": map[string]any{"scopes": map[string]any{
			"orders:read": "See your orders", "orders:write": "Change your orders",
		}},
	})
	resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/bakery/accounts",
		map[string]any{"username": testUser, "password": testPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

	verifier := oauth2.GenerateVerifier()
	back := s.signIn(t, s.env.Browser(t), verifier, azState, []string{"orders:read", "orders:write"})
	code := back.Query().Get("code")
	require.NotEmpty(t, code)

	bakery := s.env.PublicURL("/t/bakery")
	conf := *s.conf
	conf.Endpoint.TokenURL = bakery + "/oauth/token"
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient,
		&http.Client{Transport: s.agent.AssertionTransport(t, s.env.Client.Transport, bakery)})
	_, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_grant", re.ErrorCode, "%s", re.Body)
	require.Zero(t, azRows(t, s.env, "bakery", "code", "pkce", "access", "refresh"))

	// The failed attempt did not use the code up at its own issuer.
	tok, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.NotEmpty(t, tok.AccessToken)
}

// TestAuthorizeCodeReuse: a code works once; reusing it fails and ends
// the tokens issued for it (RFC 6749 §4.1.2).
func TestAuthorizeCodeReuse(t *testing.T) {
	t.Parallel()
	s := setup(t)
	verifier := oauth2.GenerateVerifier()
	back := s.signIn(t, s.env.Browser(t), verifier, azState, []string{"orders:read", "orders:write"})
	require.Equal(t, s.issuer, back.Query().Get("iss"))
	code := back.Query().Get("code")

	tok, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	_, err = s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_grant", re.ErrorCode, "%s", re.Body)

	var active int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM oauth_tokens
		WHERE kind IN ('access', 'refresh') AND active`).Scan(&active))
	require.Zero(t, active, "the tokens issued for a reused code are revoked")
	tok.Expiry = tok.Expiry.Add(-24 * 60 * 60 * 1e9)
	_, err = s.conf.TokenSource(s.ctx, tok).Token()
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_grant", re.ErrorCode)
}
