package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestSlowUploads: an upload through the gateway streams to the origin as
// long as it keeps the minimum average rate, however long past the grace
// it takes; one that stalls is cut off with request_timeout (408) before
// the Session is recorded, and the origin never gets a whole request. Over HTTP/2 and HTTP/1.1. (Issue 25,
// item 5; the server's defaults are 10 s, then 1 KiB/s.)
func TestSlowUploads(t *testing.T) {
	t.Parallel()
	env := testkit.SetupWith(t, testkit.Options{Bodies: httpx.BodyTimeouts{Grace: 300 * time.Millisecond, MinRate: 1000}})
	r := addCompany(t, env, env.StartAgent(t, "agent-slow.test"), "shop", "origin-slow.test")
	doc, err := json.Marshal(map[string]any{
		"openapi": "3.0.3", "info": map[string]any{"title": "Uploads", "version": "1"},
		"paths": map[string]any{"/upload": map[string]any{"post": map[string]any{
			"responses": map[string]any{"200": map[string]any{"description": "OK"}}}}},
	})
	require.NoError(t, err)
	r.putAPI(t, registry.API{Name: "uploads", Origin: r.origin.BaseURL(), OpenAPI: doc})

	for _, proto := range []struct {
		name   string
		client *http.Client
	}{{"HTTP/2", r.client}, {"HTTP/1.1", r.env.HTTP1Client(t)}} {
		t.Run(proto.name, func(t *testing.T) {
			send := func(tr peers.Trickle, declared int64) *peers.Response {
				t.Helper()
				req := r.request(t, http.MethodPost, "/api/uploads/upload", tr.Reader(t), opts{})
				req.ContentLength = declared
				start := time.Now()
				resp := peers.SendWithin(t, proto.client, req, 20*time.Second)
				t.Logf("%d after %s", resp.Status, time.Since(start).Round(time.Millisecond))
				return resp
			}
			r.origin.Reset()
			// 3,000 bytes at 2,000 a second: 1.5 s, five times the grace.
			resp := send(peers.Trickle{Total: 3000, Size: 200, Every: 100 * time.Millisecond}, 3000)
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			require.Len(t, r.origin.Last().Body, 3000)

			// The same pace without a declared length (chunked, or an
			// HTTP/2 stream of unknown length).
			resp = send(peers.Trickle{Total: 3000, Size: 200, Every: 100 * time.Millisecond}, -1)
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			require.Len(t, r.origin.Last().Body, 3000)

			// 500 bytes, then nothing of the 60,000 declared.
			r.origin.Reset()
			var sessions, after int
			require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions`).Scan(&sessions))
			resp = send(peers.Trickle{Total: 500, Size: 500, Every: time.Millisecond, Stall: true}, 60000)
			requireError(t, resp, http.StatusRequestTimeout, "request_timeout")
			require.Empty(t, r.origin.Received(), "the origin got a whole request")
			require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions`).Scan(&after))
			require.Equal(t, sessions, after, "no Session row for a call whose body never arrived")
		})
	}
}
