package httpx

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestDatabaseConnectionBrokenIsUnavailable: a pooled connection that
// PostgreSQL (or the network) drops without a word, as an immediate
// shutdown or a crash does, fails the query it carries with a network
// error or an unexpected EOF; that is a 503 to retry like a refused
// connection, never a 500.
func TestDatabaseConnectionBrokenIsUnavailable(t *testing.T) {
	t.Parallel()
	server, err := url.Parse(testdb.ServerURL(t))
	require.NoError(t, err)
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			t.Parallel()
			p := startCutProxy(t, server.Host)
			u := *server
			u.Host = p.addr
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgconn.Connect(ctx, u.String())
			require.NoError(t, err)
			defer conn.Close(context.Background())
			require.NoError(t, conn.Exec(ctx, "SELECT 1").Close())

			p.cut(reset)
			// The query that meets the cut, then the next one on the
			// connection pgconn closed (as the next statement of a
			// transaction).
			for range 2 {
				err = conn.Exec(ctx, "SELECT 1").Close()
				require.Error(t, err)
				t.Logf("the query failed with %T: %v", err, err)
				rec := httptest.NewRecorder()
				WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), fmt.Errorf("loading company: %w", err))
				require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%s", rec.Body)
				require.NotEmpty(t, rec.Header().Get("Retry-After"))
				require.Equal(t, CodeUnavailable, decodeBody(t, rec)["error"])
			}
		})
	}
}

// cutProxy forwards TCP connections to a server until cut.
type cutProxy struct {
	addr  string
	mu    sync.Mutex
	conns []*net.TCPConn // the client side of each connection
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &cutProxy{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c.(*net.TCPConn))
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

// cut closes every client connection: with a reset (RST) or an orderly
// close (FIN).
func (p *cutProxy) cut(reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if reset {
			_ = c.SetLinger(0)
		}
		_ = c.Close()
	}
}

// TestDatabaseRefusedIsUnavailable: a connection PostgreSQL refuses with
// an error of its own (here: the database does not accept connections, as
// during maintenance; too many clients is another) is as unavailable as
// one it never answered.
func TestDatabaseRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewEmptyDatabase(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgconn.Connect(ctx, testdb.ServerURL(t))
	require.NoError(t, err)
	defer admin.Close(context.Background())
	name := strings.TrimPrefix(u.Path, "/")
	require.NoError(t, admin.Exec(ctx, `ALTER DATABASE "`+name+`" ALLOW_CONNECTIONS false`).Close())

	_, err = pgconn.Connect(ctx, dbURL)
	require.Error(t, err)
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), fmt.Errorf("loading company: %w", err))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%v: %s", err, rec.Body)
	require.Equal(t, "5", rec.Header().Get("Retry-After"))
}
