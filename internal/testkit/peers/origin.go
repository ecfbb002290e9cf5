package peers

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Origin is a Company's origin in tests: an HTTPS server that checks
// Poppy-Verified on every request against the Company's key set, records
// what it received, and answers with a registered handler or an echo.
type Origin struct {
	Host string // e.g. "origin.test"; tests resolve it to Addr
	Addr string // 127.0.0.1:port it listens on

	issuer   string
	jwksURL  string
	audience string
	fetch    *http.Client // reaches jwksURL
	client   *http.Client // reaches the origin
	srv      *httptest.Server
	stop     sync.Once

	mu       sync.Mutex
	handlers map[string]http.HandlerFunc // by "METHOD path"
	received []Received
}

// Received is one request the origin received, verified or not.
type Received struct {
	Method   string
	Host     string // the Host the request named
	Path     string // escaped path
	RawQuery string
	Header   http.Header // a copy; do not modify
	Body     []byte
	// Claims are the verified Poppy-Verified claims, nil when VerifyErr
	// is set.
	Claims    *verified.Claims
	VerifyErr error
}

// OriginOptions configure StartOrigin. Zero values take the defaults in
// brackets.
type OriginOptions struct {
	Host string // ["origin.test"]
	// Issuer is the Company's identifier, checked as iss. Required.
	Issuer string
	// JWKSURL is the Company's {issuer}/oauth/jwks.json. Required.
	JWKSURL string
	// Client fetches JWKSURL, e.g. Env.Client [trusts the CA, dials
	// normally: fine for https://localhost:port].
	Client *http.Client
	// Audience is the aud to expect [the origin's BaseURL].
	Audience string
}

// StartOrigin starts a Company origin on 127.0.0.1 serving certificates
// from ca for its host name, closed when the test ends. It fetches the key
// set from JWKSURL on each request that carries Poppy-Verified.
func StartOrigin(t testing.TB, ca *devca.CA, opts OriginOptions) *Origin {
	t.Helper()
	require.NotEmpty(t, opts.Issuer, "origin: Issuer is required")
	require.NotEmpty(t, opts.JWKSURL, "origin: JWKSURL is required")
	if opts.Host == "" {
		opts.Host = "origin.test"
	}
	if opts.Client == nil {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}
		t.Cleanup(tr.CloseIdleConnections)
		opts.Client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	o := &Origin{
		Host:     opts.Host,
		issuer:   opts.Issuer,
		jwksURL:  opts.JWKSURL,
		audience: opts.Audience,
		fetch:    opts.Client,
		handlers: map[string]http.HandlerFunc{},
	}

	o.srv = Start(t, ca, http.HandlerFunc(o.serve))
	t.Cleanup(o.Close)
	o.Addr = o.srv.Listener.Addr().String()
	if o.audience == "" {
		o.audience = o.BaseURL()
	}

	o.client = Client(t, ca, o.Addr)
	return o
}

// BaseURL returns "https://{Host}:{port}", the default audience.
func (o *Origin) BaseURL() string {
	_, port, _ := net.SplitHostPort(o.Addr)
	return "https://" + net.JoinHostPort(o.Host, port)
}

// URL returns the https URL of path on the origin's host.
func (o *Origin) URL(path string) string { return o.BaseURL() + path }

// Audience returns the aud the origin expects.
func (o *Origin) Audience() string { return o.audience }

// Client returns an HTTPS client that sends every request to the origin,
// trusts the CA and does not follow redirects.
func (o *Origin) Client() *http.Client { return o.client }

// Close stops the server, dropping open connections: the origin is down.
// Requests in flight see their context cancelled.
func (o *Origin) Close() {
	o.stop.Do(func() {
		_ = o.srv.Listener.Close()
		o.srv.CloseClientConnections()
		o.srv.Close()
	})
}

// Handle answers method and path (no query) with h instead of the echo.
// A nil h restores the echo.
func (o *Origin) Handle(method, path string, h http.HandlerFunc) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := method + " " + path
	if h == nil {
		delete(o.handlers, key)
	} else {
		o.handlers[key] = h
	}
}

// Received returns a copy of the requests received so far, oldest first.
func (o *Origin) Received() []Received {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Received(nil), o.received...)
}

// Calls returns how many requests for method and path (escaped, no query)
// the origin received, verified or not. An empty method matches any.
func (o *Origin) Calls(method, path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.received {
		if (method == "" || r.Method == method) && r.Path == path {
			n++
		}
	}
	return n
}

// Last returns the latest request received, or the zero value if none.
func (o *Origin) Last() Received {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.received) == 0 {
		return Received{}
	}
	return o.received[len(o.received)-1]
}

// Reset forgets the requests received; handlers stay.
func (o *Origin) Reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.received = nil
}

type originClaimsKey struct{}

// OriginClaims returns the verified Poppy-Verified claims of a request an
// Origin handler is serving, or nil.
func OriginClaims(r *http.Request) *verified.Claims {
	c, _ := r.Context().Value(originClaimsKey{}).(*verified.Claims)
	return c
}

func (o *Origin) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := Received{
		Method:   r.Method,
		Host:     r.Host,
		Path:     r.URL.EscapedPath(),
		RawQuery: r.URL.RawQuery,
		Header:   r.Header.Clone(),
		Body:     body,
	}
	rec.Claims, rec.VerifyErr = o.verify(r)

	o.mu.Lock()
	o.received = append(o.received, rec)
	h := o.handlers[r.Method+" "+rec.Path]
	if h == nil {
		h = o.handlers[r.Method+" "+r.URL.Path]
	}
	o.mu.Unlock()

	if rec.VerifyErr != nil {
		writeOriginJSON(w, http.StatusUnauthorized, map[string]any{"error": "unverified"})
		return
	}
	if h != nil {
		h(w, r.WithContext(context.WithValue(r.Context(), originClaimsKey{}, rec.Claims)))
		return
	}
	scopes := rec.Claims.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	writeOriginJSON(w, http.StatusOK, map[string]any{
		"method":  rec.Method,
		"path":    rec.Path,
		"query":   rec.RawQuery,
		"body":    string(body),
		"account": rec.Claims.Account,
		"scopes":  scopes,
	})
}

// verify checks the request's Poppy-Verified against a freshly fetched
// key set.
func (o *Origin) verify(r *http.Request) (*verified.Claims, error) {
	token := r.Header.Get(verified.Header)
	if token == "" {
		return nil, fmt.Errorf("%w: no %s header", verified.ErrInvalid, verified.Header)
	}
	set, err := o.keySet(r.Context())
	if err != nil {
		return nil, err
	}
	return verified.Verify(token, set, o.issuer, o.audience, time.Now())
}

func (o *Origin) keySet(ctx context.Context) (jwk.Set, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.jwksURL, nil)
	if err != nil {
		return nil, fmt.Errorf("origin: fetch key set: %w", err)
	}
	resp, err := o.fetch.Do(req)
	if err != nil {
		return nil, fmt.Errorf("origin: fetch key set: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("origin: read key set: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("origin: fetch key set: %s: %s", resp.Status, raw)
	}
	set, err := jwk.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("origin: parse key set: %w", err)
	}
	return set, nil
}

func writeOriginJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Slow returns a handler that waits d, or until the request is cancelled,
// then answers 200 {}.
func (o *Origin) Slow(d time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
		}
		writeOriginJSON(w, http.StatusOK, map[string]any{})
	}
}

// Big returns a handler that answers 200 with n bytes of 'x' and a
// Content-Length of n.
func (o *Origin) Big(n int64) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", fmt.Sprint(n))
		w.WriteHeader(http.StatusOK)
		writeXs(w, n, false)
	}
}

// BigChunked returns a handler that answers 200 with n bytes of 'x' and no
// Content-Length, flushing as it goes.
func (o *Origin) BigChunked(n int64) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		// Flushing before any body keeps net/http from adding a
		// Content-Length to a short body.
		_ = http.NewResponseController(w).Flush()
		writeXs(w, n, true)
	}
}

// writeXs writes n bytes of 'x', stopping when the client goes away.
func writeXs(w http.ResponseWriter, n int64, flush bool) {
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	rc := http.NewResponseController(w)
	for n > 0 {
		b := chunk
		if n < int64(len(b)) {
			b = b[:n]
		}
		if _, err := w.Write(b); err != nil {
			return
		}
		if flush {
			if err := rc.Flush(); err != nil {
				return
			}
		}
		n -= int64(len(b))
	}
}
