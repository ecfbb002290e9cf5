package platform_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// slowBodies are the body timeouts of these tests: short, so that they
// run fast; the server's defaults are 10 s and 1 KiB/s.
var slowBodies = httpx.BodyTimeouts{Grace: 300 * time.Millisecond, MinRate: 1000}

// slowBound is how long a client may wait for the server to give up on a
// stalled body: the grace and ample room for a loaded machine.
const slowBound = 10 * time.Second

// sendSlow sends req, whose body is a Trickle, and fails the test unless
// the server answers within slowBound.
func sendSlow(t *testing.T, env *testkit.Env, req *http.Request) *peers.Response {
	t.Helper()
	start := time.Now()
	resp := peers.SendWithin(t, env.Client, req, slowBound)
	t.Logf("%s %s: %d after %s", req.Method, req.URL.Path, resp.Status, time.Since(start).Round(time.Millisecond))
	return resp
}

// TestSlowBodiesTimeOut: a body that stops arriving is cut off after the
// grace with request_timeout (408), before any side effect: at feedback and
// conversations no Session row is made (the body is read before the
// Session header is verified), at the Company API, the admin API and the
// issuer nothing is stored or answered. A
// body that keeps the minimum rate is served however long it takes past
// the grace. (Issue 25, item 5.)
func TestSlowBodiesTimeOut(t *testing.T) {
	t.Parallel()
	env := testkit.SetupWith(t, testkit.Options{Bodies: slowBodies})
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"},
		"feedback": map[string]any{"enabled": true}})
	agent := env.StartAgent(t, "")
	key := env.Admin(t, http.MethodPost, "/admin/v1/companies/shop/api-keys", map[string]any{"name": "slow"})
	require.Equal(t, http.StatusCreated, key.Status, "%s", key.Body)
	apiKey := key.JSON(t)["key"].(string)
	count := func(table string) (n int) {
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}
	feedbackURL := env.PublicURL("/t/shop/poppy/feedback")
	stalled := func(method, url string, declared int64, headers ...string) *http.Request {
		req := peers.NewRequest(t, method, url, peers.Trickle{Data: []byte(`{"description":"`), Size: 16, Every: time.Millisecond, Stall: true}.Reader(t))
		req.ContentLength = declared
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		return req
	}

	t.Run("feedback", func(t *testing.T) {
		req := stalled(http.MethodPost, feedbackURL, 10000)
		agent.Sign(t, req, peers.SessionClaims{Aud: env.PublicURL("/t/shop")}, peers.SessionOptions{})
		resp := sendSlow(t, env, req)
		require.Equal(t, http.StatusRequestTimeout, resp.Status, "%s", resp.Body)
		require.Equal(t, "request_timeout", resp.JSON(t)["error"])
		require.Zero(t, count("sessions"), "no Session row for a report that never arrived")
		require.Zero(t, count("feedback"))

		// Declaring more than a report may hold is refused at once,
		// also before the Session is touched (spec 9.3: invalid_request).
		req = stalled(http.MethodPost, feedbackURL, 60000)
		agent.Sign(t, req, peers.SessionClaims{Aud: env.PublicURL("/t/shop")}, peers.SessionOptions{})
		resp = sendSlow(t, env, req)
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
		require.Equal(t, "invalid_request", resp.JSON(t)["error"])
		require.Zero(t, count("sessions"))
	})

	t.Run("conversations", func(t *testing.T) {
		// Every protocol route reads its body (up to 64 KiB) before it
		// verifies the Session header.
		req := stalled(http.MethodPost, env.PublicURL("/t/shop/poppy/conversations"), 10000)
		agent.Sign(t, req, peers.SessionClaims{Aud: env.PublicURL("/t/shop")}, peers.SessionOptions{})
		resp := sendSlow(t, env, req)
		require.Equal(t, http.StatusRequestTimeout, resp.Status, "%s", resp.Body)
		require.Zero(t, count("sessions"), "no Session row for a message that never arrived")
	})

	t.Run("company API", func(t *testing.T) {
		resp := sendSlow(t, env, stalled(http.MethodPut, env.PublicURL("/company/v1/apis/slow"), 60000,
			"Authorization", "Bearer "+apiKey))
		require.Equal(t, http.StatusRequestTimeout, resp.Status, "%s", resp.Body)
		require.Equal(t, "request_timeout", resp.JSON(t)["error"])
		require.Zero(t, count("gateway_apis"))
	})

	t.Run("admin API", func(t *testing.T) {
		resp := sendSlow(t, env, stalled(http.MethodPost, env.PublicURL("/admin/v1/companies"), 60000,
			"Authorization", "Bearer "+testkit.AdminToken))
		require.Equal(t, http.StatusRequestTimeout, resp.Status, "%s", resp.Body)
		require.Equal(t, 1, count("companies"))
	})

	t.Run("issuer", func(t *testing.T) {
		// The token endpoint's form: 408, not an OAuth error, since the
		// request never arrived whole.
		req := stalled(http.MethodPost, env.PublicURL("/t/shop/oauth/token"), 5000,
			"Content-Type", "application/x-www-form-urlencoded")
		resp := sendSlow(t, env, req)
		require.Equal(t, http.StatusRequestTimeout, resp.Status, "%s", resp.Body)
		require.Equal(t, "request_timeout", resp.JSON(t)["error"])
	})

	t.Run("at the minimum rate", func(t *testing.T) {
		// 1,200 bytes at 2,000 bytes a second: 0.6 s, twice the grace,
		// at twice the minimum rate.
		report := `{"task":"Pay with a gift card","description":"` + strings.Repeat("a", 1140) + `"}`
		req := peers.NewRequest(t, http.MethodPost, feedbackURL,
			peers.Trickle{Data: []byte(report), Size: 100, Every: 50 * time.Millisecond}.Reader(t))
		req.ContentLength = int64(len(report))
		agent.Sign(t, req, peers.SessionClaims{Aud: env.PublicURL("/t/shop")}, peers.SessionOptions{})
		resp := sendSlow(t, env, req)
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		require.Equal(t, 1, count("feedback"))
	})

	metrics := env.Probe(t, "/metrics")
	require.Contains(t, string(metrics.Body), `route="/t/{slug}/poppy/feedback",status="408"} 1`)
}
