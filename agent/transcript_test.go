package agent

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The transcript keeps requests and responses but no secret: headers,
// form fields, JSON members and JWTs in bodies are redacted.
func TestTranscriptRedactsSecrets(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.mux.HandleFunc("POST /t/shop/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "cookie-secret"})
		writeJSON(w, map[string]any{"access_token": "at-secret", "refresh_token": "rt-secret", "token_type": "Bearer", "expires_in": 60})
	})
	// A JSON body over the recorded size, and an event stream.
	f.mux.HandleFunc("GET /big", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"padding": strings.Repeat("x", 70<<10), "refresh_token": "pat_big-secret"})
	})
	f.mux.HandleFunc("GET /stream", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: e1\ndata: {\"note\":\"streamed\",\"refresh_token\":\"pat_sse-secret\"}\n\n"+
			"data: not json device_code=dc-secret\n\n")
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.NoError(t, c.token(f.ctx, url.Values{
		"grant_type": {"authorization_code"}, "code": {"code-secret"}, "code_verifier": {"verifier-secret"},
	}, []string{"orders:read"}))
	s := c.NewSession()
	resp, err := s.Do(f.ctx, Request{Method: http.MethodPost, URL: f.url("/echo"), JSON: map[string]any{"password": "pw-secret", "note": "hello"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.Status)
	resp, err = s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/big")})
	require.NoError(t, err)
	require.Contains(t, string(resp.Body), "pat_big-secret", "the agent reads the whole body")
	_, err = s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/stream")})
	require.NoError(t, err)

	var buf bytes.Buffer
	require.NoError(t, f.agent.Recorder.WriteText(&buf))
	text := buf.String()
	for _, secret := range []string{"at-secret", "rt-secret", "code-secret", "verifier-secret", "cookie-secret", "pw-secret", "eyJ", "pat_", "dc-secret"} {
		require.NotContains(t, text, secret)
	}
	for _, kept := range []string{"POST https://example.com", "/t/shop/oauth/token", "hello", "< 200", "< 404", "Poppy-Session: [redacted]", "Authorization: [redacted]",
		"[body not recorded: 71", "id: e1", `"note":"streamed"`, "data: [body not recorded: 31 bytes]"} {
		require.Contains(t, text, kept)
	}
	path := t.TempDir() + "/transcript.txt"
	require.NoError(t, f.agent.Recorder.WriteFile(path))
}

// A streamed body is recorded as the agent reads it.
func TestTranscriptRecordsStreams(t *testing.T) {
	t.Parallel()
	r := NewRecorder()
	rt := r.wrap(roundTripper(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader("id: e1\ndata: {\"x\":1}\n\n"))}, nil
	}))
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/events", nil)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	require.Contains(t, r.Exchanges()[0].ResponseBody, "id: e1")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
