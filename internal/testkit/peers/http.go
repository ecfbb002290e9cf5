package peers

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body: %s", r.Body)
	return m
}

// Refused reports whether the request was refused (4xx), and fails t on
// an answer no request may get, however hostile: a 5xx, or a 4xx without
// an error code.
func (r *Response) Refused(t testing.TB) bool {
	t.Helper()
	if r.Status >= 500 {
		t.Fatalf("answered %d: %s", r.Status, r.Body)
	}
	if r.Status < 400 {
		return false
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(r.Body, &e) != nil || e.Error == "" {
		t.Fatalf("answered %d without an error code: %s", r.Status, r.Body)
	}
	return true
}

// NewRequest builds a request with body: nil, a string or []byte (sent
// as is, with a Content-Length), another io.Reader (sent as is, without
// one unless net/http can tell its length), or any other value (sent as
// JSON). A request with a body has Content-Type application/json.
func NewRequest(t testing.TB, method, rawURL string, body any) *http.Request {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, rawURL, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// Send sends req with client and reads the whole response.
func Send(t testing.TB, client *http.Client, req *http.Request) *Response {
	t.Helper()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// SendAll sends every request of reqs at once with client (each waits on
// one gate, then all go) and returns the responses in the order of reqs.
// The goroutines only record what happened; the test fails, after all
// are back, if a request could not be sent or its body read.
func SendAll(t testing.TB, client *http.Client, reqs []*http.Request) []*Response {
	t.Helper()
	out := make([]*Response, len(reqs))
	errs := make([]error, len(reqs))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			<-gate
			resp, err := client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			errs[i] = err
			out[i] = &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
		})
	}
	close(gate)
	wg.Wait()
	for i, req := range reqs {
		require.NoError(t, errs[i], "%s %s", req.Method, req.URL)
	}
	return out
}
