package issuer_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
)

// TestChromiumDirectSignIn drives Direct Sign-In in a real browser: sign
// in, read the consent page, leave a scope out, allow, and exchange the
// code the browser brings back to the agent.
func TestChromiumDirectSignIn(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b := chrome.Start(t, s.env.CA, publicHost, s.agent.Host)

	const (
		login   = `button[name="action"][value="login"]`
		approve = `button[name="action"][value="approve"]`
		write   = `input[name="scope"][value="orders:write"]`
		read    = `input[name="scope"][value="orders:read"]`
	)
	verifier := oauth2.GenerateVerifier()
	resp := b.Load(chromedp.Navigate(s.conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(verifier))))
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)
	resp = b.Load(
		chromedp.SendKeys(`input[name="username"]`, testUser),
		chromedp.SendKeys(`input[name="password"]`, testPassword),
		chromedp.Click(login),
	)
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)

	// The consent page names the agent, the Company and what each scope
	// allows, and only the scopes asked for.
	b.Do(chromedp.WaitVisible(approve))
	text := chrome.Run(b, chromedp.Text("body"))
	for _, want := range []string{"Test Agent", "Stormline Outfitters", "See your orders", "Change your orders"} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "See and change your addresses")
	// It runs no script (and its CSP forbids framing, tested elsewhere).
	require.True(t, chrome.Run(b, chromedp.Evaluate[bool](`document.querySelector('script') === null`)))

	// Leave orders:write out.
	require.True(t, chrome.Run(b, chromedp.JavascriptAttribute[bool](write, "checked")))
	b.Do(chromedp.Click(write))
	require.False(t, chrome.Run(b, chromedp.JavascriptAttribute[bool](write, "checked")))
	require.True(t, chrome.Run(b, chromedp.JavascriptAttribute[bool](read, "checked")))

	// Allow: the browser lands on the agent's callback, which answers 404.
	callback := s.agent.URL("/callback")
	resp = b.Load(chromedp.Click(approve))
	require.Equal(t, int64(http.StatusNotFound), resp.Status, resp.URL)
	loc := chrome.Run(b, chromedp.Location())
	require.True(t, strings.HasPrefix(loc, callback+"?"), "location %s", loc)
	back, err := url.Parse(loc)
	require.NoError(t, err)
	q := back.Query()
	require.Equal(t, "st4te", q.Get("state"))
	require.Equal(t, s.issuer, q.Get("iss"), "RFC 9207 iss on the redirect")
	require.NotEmpty(t, q.Get("code"))

	tok, err := s.conf.Exchange(s.ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.NotEmpty(t, tok.AccessToken)
	require.Equal(t, "orders:read", tok.Extra("scope"), "the User left orders:write out")
}
