package peers

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/poppyhost/poppyhost/internal/devca"
)

// Start starts h over HTTPS (HTTP/2 enabled) on 127.0.0.1 with
// certificates from ca, closed when the test ends.
func Start(t testing.TB, ca *devca.CA, h http.Handler) *httptest.Server {
	t.Helper()
	return StartOn(t, ca, Listen(t), h)
}

// Listen listens on a free port of 127.0.0.1, for a server started later
// with StartOn: a handler that names its own URL can then be built knowing
// the port.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// StartOn is Start on the listener ln.
func StartOn(t testing.TB, ca *devca.CA, ln net.Listener, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = ca.ServerTLSConfig()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// Client returns an HTTPS client that sends every request to addr
// whatever host its URL names, trusts ca and does not follow redirects.
// Its idle connections are closed when the test ends.
func Client(t testing.TB, ca *devca.CA, addr string) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}
