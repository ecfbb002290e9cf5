package safehttp

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPost(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, body, contentType, agent, cookie string
	}
	got := make(chan seen, 1)
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, string(raw), r.Header.Get("Content-Type"), r.Header.Get("User-Agent"), r.Header.Get("Cookie")}
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, strings.Repeat("x", 100))
	}))
	c := b.client(t, Options{AllowPrivate: true, UserAgent: "poppyhost-test"})
	resp, err := c.Post(t.Context(), PostRequest{URL: b.url("agent.test", "/hook"), Body: []byte(`{"a":1}`),
		Header: http.Header{"Content-Type": {"application/json"}, "User-Agent": {"spoofed"}}, MaxBytes: 10})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.Status)
	require.Equal(t, strings.Repeat("x", 10), string(resp.Body), "the body is cut at MaxBytes")
	require.Equal(t, seen{http.MethodPost, `{"a":1}`, "application/json", "poppyhost-test", ""}, <-got)
}

func TestPostRefusesBlockedAddresses(t *testing.T) {
	t.Parallel()
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	c := b.client(t, Options{})
	for _, host := range []string{"agent.test", "internal.test", "metadata.test"} {
		_, err := c.Post(t.Context(), PostRequest{URL: b.url(host, "/hook"), Body: []byte("{}")})
		require.ErrorIs(t, err, ErrBlockedAddress, host)
	}
	for _, u := range []string{"http://agent.test/hook", "https://u:p@agent.test/hook", "/hook", "https://%zz"} {
		_, err := c.Post(t.Context(), PostRequest{URL: u, Body: []byte("{}")})
		require.ErrorIs(t, err, ErrNotHTTPS, u)
	}
}

func TestPostStatus(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 204, 301, 307, 400, 401, 500, 503} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if code >= 300 && code < 400 {
					w.Header().Set("Location", "https://other.test/")
				}
				w.WriteHeader(code)
			}))
			c := b.client(t, Options{AllowPrivate: true})
			resp, err := c.Post(t.Context(), PostRequest{URL: b.url("agent.test", "/hook?secret=1"), Body: []byte("{}")})
			switch {
			case code < 300:
				require.NoError(t, err)
				require.Equal(t, code, resp.Status)
			case code < 400:
				require.ErrorIs(t, err, ErrRedirect)
			default:
				require.ErrorIs(t, err, ErrStatus)
				require.ErrorContains(t, err, strconv.Itoa(code))
			}
			if err != nil {
				require.NotContains(t, err.Error(), "secret", "the query stays out of errors")
			}
		})
	}
}

func TestPostTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	c := b.client(t, Options{AllowPrivate: true, Timeout: 300 * time.Millisecond})
	_, err := c.Post(t.Context(), PostRequest{URL: b.url("agent.test", "/"), Body: []byte("{}")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// With AnyStatus a 4xx or 5xx comes back with its body; a redirect is
// still refused.
func TestPostAnyStatus(t *testing.T) {
	t.Parallel()
	for _, code := range []int{400, 404, 503, 302} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if code < 400 {
					w.Header().Set("Location", "https://other.test/")
				}
				w.WriteHeader(code)
				_, _ = w.Write([]byte(`{"error":"invalid_session"}`))
			}))
			c := b.client(t, Options{AllowPrivate: true})
			resp, err := c.Post(t.Context(), PostRequest{URL: b.url("agent.test", "/x"), Body: []byte("{}"), AnyStatus: true})
			if code < 400 {
				require.ErrorIs(t, err, ErrRedirect)
				return
			}
			require.NoError(t, err)
			require.Equal(t, code, resp.Status)
			require.JSONEq(t, `{"error":"invalid_session"}`, string(resp.Body))
		})
	}
}
