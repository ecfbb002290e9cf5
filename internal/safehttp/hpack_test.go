package safehttp

import (
	"crypto/rand"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
)

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// TestPerRequestCredentialsLeaveStaticFieldsIndexed: a request header that
// is new on every request and larger than headerTableLimit (as
// Poppy-Verified is) is sent without entering the HPACK dynamic table, so
// the fields that repeat stay indexed and every request's header block is
// the new value plus a few bytes. With Go's default 4 KiB table, each new
// value would be indexed and, a few requests later, push the repeated
// 200-byte field out of the table, which would then be sent again in
// full.
func TestPerRequestCredentialsLeaveStaticFieldsIndexed(t *testing.T) {
	t.Parallel()
	ca, err := devca.New()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var read atomic.Int64
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		TLSConfig:         ca.ServerTLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.ServeTLS(countingListener{ln, &read}, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	c := New(Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: testResolver})
	t.Cleanup(c.transport.CloseIdleConnections)

	static := strings.Repeat("s", 200)
	// 700 characters of base64url, like a signed JWT; each request's is
	// a rotation, new but of the same Huffman-coded length.
	credential := strings.Repeat(rand.Text(), 27)[:700]
	// One TLS record per request, and what the server reads of it is the
	// HEADERS frame: the request has no body, and the 2-byte answers are
	// far below what would make the client send WINDOW_UPDATE.
	sizes := make([]int64, 12)
	for i := range sizes {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
			"https://"+net.JoinHostPort("agent.test", port)+"/call", nil)
		require.NoError(t, err)
		req.Header.Set("X-Static", static)
		req.Header.Set("X-Credential", credential[i:]+credential[:i])
		before := read.Load()
		resp, err := c.RoundTripper().RoundTrip(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		sizes[i] = read.Load() - before
	}
	// The first two requests set the connection up (with the second, the
	// client acknowledges the server's settings) and index the repeated
	// fields; from the third on, each reads alike.
	for i := 3; i < len(sizes); i++ {
		require.InDelta(t, sizes[2], sizes[i], 8,
			"request %d read %d bytes against %d: a repeated field was sent again in full (all: %v)", i+1, sizes[i], sizes[2], sizes)
	}
}
