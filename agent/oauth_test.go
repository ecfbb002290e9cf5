package agent

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tokenFake answers the token endpoint: a sign-in with rt-0, and each
// refresh as refreshed says (nil: a new access token and refresh token).
type tokenFake struct {
	mu        sync.Mutex
	refreshes []url.Values
	refreshed func(n int, w http.ResponseWriter) bool // true when it answered
	expiresIn atomic.Int64
}

func (tf *tokenFake) install(t *testing.T, f *fake) *Company {
	t.Helper()
	tf.expiresIn.Store(60)
	f.mux.HandleFunc("POST /t/shop/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		require.NotEmpty(t, r.PostForm.Get("client_assertion"))
		if r.PostForm.Get("grant_type") != "refresh_token" {
			writeJSON(w, map[string]any{"access_token": "at-0", "refresh_token": "rt-0", "token_type": "Bearer", "expires_in": tf.expiresIn.Load()})
			return
		}
		tf.mu.Lock()
		tf.refreshes = append(tf.refreshes, r.PostForm)
		n := len(tf.refreshes)
		tf.mu.Unlock()
		if tf.refreshed != nil && tf.refreshed(n, w) {
			return
		}
		writeJSON(w, map[string]any{"access_token": fmt.Sprintf("at-%d", n), "refresh_token": fmt.Sprintf("rt-%d", n), "token_type": "Bearer", "expires_in": tf.expiresIn.Load()})
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.NoError(t, c.token(f.ctx, url.Values{"grant_type": {"authorization_code"}, "code": {"c"}}, []string{"orders:read"}))
	return c
}

func oauthError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":%q}`, code)
}

// Refresh uses the refresh token and keeps the rotated one (spec 4.4);
// invalid_grant signs the User out (spec 5.5).
func TestRefreshRotatesAndInvalidGrantSignsOut(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	tf := &tokenFake{refreshed: func(n int, w http.ResponseWriter) bool {
		if n == 2 {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return true
		}
		return false
	}}
	c := tf.install(t, f)
	require.NoError(t, c.Refresh(f.ctx))
	require.Equal(t, "rt-0", tf.refreshes[0].Get("refresh_token"))
	require.Equal(t, "rt-1", c.Grant().RefreshToken)
	require.Equal(t, []string{"orders:read"}, c.Grant().Scopes, "a refresh keeps the granted scopes")

	err := c.Refresh(f.ctx)
	var oe *OAuthError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "invalid_grant", oe.Code)
	require.Equal(t, "rt-1", tf.refreshes[1].Get("refresh_token"))
	require.False(t, c.SignedIn())
}

// A refresh that fails otherwise (a 5xx, a network error) keeps the
// sign-in: the request fails, and the User is not signed out (spec 5.5).
func TestRefreshFailureKeepsTheSignIn(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var failing atomic.Bool
	failing.Store(true)
	tf := &tokenFake{refreshed: func(_ int, w http.ResponseWriter) bool {
		if failing.Load() {
			oauthError(w, http.StatusInternalServerError, "server_error")
			return true
		}
		return false
	}}
	c := tf.install(t, f)
	require.Error(t, c.Refresh(f.ctx))
	require.True(t, c.SignedIn())
	require.Equal(t, "rt-0", c.Grant().RefreshToken)

	// A resource that rejects the token: the refresh fails, the request
	// returns the error, the sign-in stays.
	var auths []string
	f.mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		auths = append(auths, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") == "Bearer at-0" {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	s := c.NewSession()
	_, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/orders")})
	require.ErrorContains(t, err, "server_error")
	require.True(t, c.SignedIn())

	failing.Store(false)
	resp, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/orders")})
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.Status)
	require.Equal(t, []string{"Bearer at-0", "Bearer at-0", "Bearer at-3"}, auths)
}

// One Session used from many goroutines, with access tokens that always
// need a refresh and Sessions that end: run with -race.
func TestSessionIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	tf := &tokenFake{}
	c := tf.install(t, f)
	// The sign-in's token has expired, and every refreshed one expires
	// at once: every request refreshes.
	later := time.Now().Add(time.Hour)
	f.agent.opts.Now = func() time.Time { return later }
	tf.expiresIn.Store(0)
	var ended atomic.Int32
	f.mux.HandleFunc("GET /storm", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // requests overlap
		if ended.Add(1)%3 == 0 {
			oauthError(w, http.StatusBadRequest, "session_ended")
			return
		}
		require.True(t, strings.HasPrefix(r.Header.Get("Authorization"), "Bearer at-"))
		w.WriteHeader(http.StatusNoContent)
	})
	s := c.NewSession()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/storm")})
			errs <- err
		}()
	}
	done := make(chan struct{})
	go func() { // a reader while the Session moves on
		for {
			select {
			case <-done:
				return
			default:
				_, _ = s.CurrentSID(), c.Grant()
			}
		}
	}()
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.True(t, c.SignedIn())
	tf.mu.Lock()
	defer tf.mu.Unlock()
	require.GreaterOrEqual(t, len(tf.refreshes), 50)
	for i, form := range tf.refreshes {
		require.Equal(t, fmt.Sprintf("rt-%d", i), form.Get("refresh_token"), "each refresh with the latest refresh token")
	}
}
