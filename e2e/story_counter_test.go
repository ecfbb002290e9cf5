package e2e

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// callCounter is a reverse proxy in front of the demo origin, at the URL
// the platform calls it by: it counts the approved calls (those with an
// Idempotency-Key) that reach the origin, so a test sees how often the
// platform sent an approval, whatever the origin does with repeats.
type callCounter struct {
	mu   sync.Mutex
	keys []string // Idempotency-Key of each approved call, in order
}

// startCounter serves the counter on a loopback TLS port in front of
// origin (host:port, serving a certificate for localhost) and returns its
// base URL, https://localhost:{port}.
func (e *storyEnv) startCounter(t *testing.T, origin string) string {
	t.Helper()
	e.calls = &callCounter{}
	target := &url.URL{Scheme: "https", Host: origin}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			if key := r.In.Header.Get("Idempotency-Key"); key != "" {
				e.calls.add(key)
			}
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost",
			MinVersion: tls.VersionTLS12}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(tls.NewListener(ln, e.ca.ServerTLSConfig())) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return "https://localhost:" + port
}

func (c *callCounter) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, key)
}

// of returns the Idempotency-Key of each approved call of the operation
// that reached the origin.
func (c *callCounter) of(operationID string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range c.keys {
		if strings.HasPrefix(k, operationID+".") {
			out = append(out, k)
		}
	}
	return out
}
