package agent

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// session_ended: the request is sent once more in a new Session, and not
// a third time (spec 5.5); 429 waits Retry-After (spec 5.6).
func TestSessionEndedAndRateLimits(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var sids []string
	var limited atomic.Bool
	f.mux.HandleFunc("GET /ended", func(w http.ResponseWriter, r *http.Request) {
		sids = append(sids, r.Header.Get("Poppy-Session"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"session_ended"}`))
	})
	f.mux.HandleFunc("GET /limited", func(w http.ResponseWriter, r *http.Request) {
		if !limited.Swap(true) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	first := s.SID
	resp, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/ended")})
	require.NoError(t, err)
	require.Equal(t, "session_ended", resp.Error())
	require.Len(t, sids, 2, "once more in a new Session, then stop")
	require.NotEqual(t, first, s.SID)

	resp, err = s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/limited")})
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.Status)
}

// A protocol request is never sent over plain HTTP, and never follows a
// redirect with its secrets (spec 3).
func TestNoHTTPAndNoRedirectsWithSecrets(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var followed atomic.Bool
	f.mux.HandleFunc("GET /moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	f.mux.HandleFunc("GET /elsewhere", func(http.ResponseWriter, *http.Request) { followed.Store(true) })
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	_, err = s.Do(f.ctx, Request{Method: http.MethodGet, URL: "http://example.com/x"})
	require.ErrorContains(t, err, "not an HTTPS URL")
	resp, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/moved")})
	require.NoError(t, err)
	require.Equal(t, http.StatusFound, resp.Status)
	require.False(t, followed.Load())
}

// The device sign-in link must be on the issuer's host, a protected
// resource's, or a subdomain of either (spec 4.3).
func TestDeviceLinkHostCheck(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.True(t, c.linkAllowed(f.url("/t/shop/device?user_code=X")))
	require.True(t, c.linkAllowed("https://login.example.com/device"))
	require.False(t, c.linkAllowed("https://example.com.evil.test/device"))
	require.False(t, c.linkAllowed("https://evil.test/device"))
	require.False(t, c.linkAllowed("http://example.com/device"))
}

// Poppy-Operation counts only when its sid is the Session the agent's
// browser joined, and its ref has the allowed characters (extension 4).
func TestOperationRefOnlyForTheJoinedSession(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	page := func(h string) *Page { return &Page{Headers: map[string]string{"poppy-operation": h}} }
	ok := page(`sid="` + s.SID + `", ref="exc_5Rt2.1791487200.k3Jd"`)
	require.Empty(t, s.OperationRef(ok), "not joined")
	s.joined = true
	require.Equal(t, "exc_5Rt2.1791487200.k3Jd", s.OperationRef(ok))
	require.Empty(t, s.OperationRef(page(`sid="other", ref="exc_5Rt2"`)))
	require.Empty(t, s.OperationRef(page(`sid="`+s.SID+`", ref="a/b"`)))
	require.Empty(t, s.OperationRef(page(`sid="`+s.SID+`", ref="`+strings.Repeat("a", 2049)+`"`)))
	require.Empty(t, s.OperationRef(page(`garbage`)))
}

// Direct Sign-In refuses a redirect whose iss is not the issuer (spec
// 4.2, RFC 9207), before exchanging the code.
func TestDirectSignInChecksIss(t *testing.T) {
	t.Parallel()
	if _, err := chromiumPath(""); err != nil {
		if testing.Short() {
			t.Skip(err)
		}
		t.Fatal(err) // .ci/run installs Chromium
	}
	f := newFake(t, nil)
	var exchanged atomic.Bool
	f.mux.HandleFunc("GET /t/shop/oauth/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		require.Equal(t, "S256", q.Get("code_challenge_method"))
		require.Len(t, q.Get("code_challenge"), 43)
		back := q.Get("redirect_uri") + "?code=c0de&state=" + q.Get("state") + "&iss=https%3A%2F%2Fevil.example"
		http.Redirect(w, r, back, http.StatusSeeOther)
	})
	f.mux.HandleFunc("POST /t/shop/oauth/token", func(http.ResponseWriter, *http.Request) { exchanged.Store(true) })
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	err = f.agent.SignInDirect(f.ctx, c, []string{"orders:read"}, func(context.Context, *Browser) error { return nil })
	require.ErrorContains(t, err, "is not the issuer")
	require.False(t, exchanged.Load())
	require.False(t, c.SignedIn())
}
