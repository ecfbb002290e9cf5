package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

const deviceGrant = "urn:ietf:params:oauth:grant-type:device_code"

// deviceFake is a Company offering Device Sign-In whose token endpoint
// answers the first poll with poll.
func deviceFake(t *testing.T, link string, poll func(w http.ResponseWriter)) (*fake, *atomic.Int32) {
	t.Helper()
	f := newFake(t, func(_, _, as map[string]any) {
		issuer := as["issuer"].(string)
		as["device_authorization_endpoint"] = issuer + "/oauth/device"
		as["grant_types_supported"] = []any{"authorization_code", "refresh_token", deviceGrant}
	})
	f.mux.HandleFunc("POST /t/shop/oauth/device", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		require.Equal(t, "orders:read", r.PostForm.Get("scope"))
		require.NotEmpty(t, r.PostForm.Get("client_assertion"))
		verify := link
		if verify == "" {
			verify = f.url("/t/shop/device")
		}
		writeJSON(w, map[string]any{"device_code": "dc-secret", "user_code": "WDJB-MJHT", "verification_uri": verify,
			"expires_in": 600, "interval": 5})
	})
	var polls atomic.Int32
	f.mux.HandleFunc("POST /t/shop/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		require.Equal(t, deviceGrant, r.PostForm.Get("grant_type"))
		require.Equal(t, "dc-secret", r.PostForm.Get("device_code"))
		polls.Add(1)
		poll(w)
	})
	return f, &polls
}

// Device Sign-In shows the code with the Company's name, never the
// device_code, then polls the token endpoint (spec 4.3, RFC 8628).
func TestSignInDevice(t *testing.T) {
	t.Parallel()
	f, polls := deviceFake(t, "", func(w http.ResponseWriter) {
		writeJSON(w, map[string]any{"access_token": "at", "refresh_token": "rt", "token_type": "Bearer", "expires_in": 60, "scope": "orders:read"})
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	var shown DeviceCode
	require.NoError(t, f.agent.SignInDevice(f.ctx, c, []string{"orders:read"}, func(_ context.Context, dc DeviceCode) error {
		shown = dc
		return nil
	}))
	require.Equal(t, DeviceCode{Company: "Stormline Outfitters", Domain: "example.com", UserCode: "WDJB-MJHT",
		VerificationURI: f.url("/t/shop/device"), ExpiresIn: 600}, shown)
	require.True(t, c.SignedIn())
	require.Equal(t, []string{"orders:read"}, c.Grant().Scopes)
	require.Equal(t, int32(1), polls.Load())
	var buf bytes.Buffer
	require.NoError(t, f.agent.Recorder.WriteText(&buf))
	require.NotContains(t, buf.String(), "dc-secret")
}

// The User's refusal ends the sign-in; a link on another host is never
// shown (spec 4.3).
func TestSignInDeviceRefusals(t *testing.T) {
	t.Parallel()
	f, _ := deviceFake(t, "", func(w http.ResponseWriter) { oauthError(w, http.StatusBadRequest, "access_denied") })
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	err = f.agent.SignInDevice(f.ctx, c, []string{"orders:read"}, func(context.Context, DeviceCode) error { return nil })
	require.ErrorIs(t, err, ErrSignInDeclined)
	require.False(t, c.SignedIn())

	f, polls := deviceFake(t, "https://evil.test/device", func(w http.ResponseWriter) { t.Error("polled") })
	c, err = f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	shown := false
	err = f.agent.SignInDevice(f.ctx, c, []string{"orders:read"}, func(context.Context, DeviceCode) error {
		shown = true
		return nil
	})
	require.ErrorContains(t, err, "not on the issuer's hosts")
	require.False(t, shown)
	require.Zero(t, polls.Load())
}

// DeviceInBrowser opens the link in the agent's browser, types the code
// and submits it, then does the User's step.
func TestDeviceInBrowser(t *testing.T) {
	t.Parallel()
	if _, err := chromiumPath(""); err != nil {
		if testing.Short() {
			t.Skip(err)
		}
		t.Fatal(err) // .ci/run installs Chromium
	}
	f, _ := deviceFake(t, "", func(w http.ResponseWriter) {
		writeJSON(w, map[string]any{"access_token": "at", "refresh_token": "rt", "token_type": "Bearer", "expires_in": 60})
	})
	var mu sync.Mutex
	var entered string
	f.mux.HandleFunc("GET /t/shop/device", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><form method="post"><input name="user_code"><button type="submit">Continue</button></form>`)
	})
	f.mux.HandleFunc("POST /t/shop/device", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		entered = r.FormValue("user_code")
		mu.Unlock()
		fmt.Fprint(w, `<!doctype html><p>Approve?</p>`)
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	stepped := false
	user := func(context.Context, *Browser) error {
		stepped = true
		return nil
	}
	require.NoError(t, f.agent.SignInDevice(f.ctx, c, []string{"orders:read"}, f.agent.DeviceInBrowser(user)))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "WDJB-MJHT", entered)
	require.True(t, stepped)
	require.True(t, c.SignedIn())
}
