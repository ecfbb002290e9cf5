package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/pglocal"
)

// TestDevMode runs the README's first command as a test: a private
// PostgreSQL, the dev CA and the demo Company, twice on the same folder
// (the second run reuses everything), and the cluster stops with the
// server.
func TestDevMode(t *testing.T) {
	if _, err := pglocal.FindBinaries(); err != nil {
		t.Fatalf("dev mode needs PostgreSQL's server binaries: %v", err)
	}
	t.Parallel()
	// The private cluster runs as the postgres user when we are root, so
	// the folder must be reachable by it.
	dir, err := os.MkdirTemp("", "poppyhost-dev-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })

	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		listening := make(chan net.Addr, 1)
		done := make(chan error, 1)
		var out strings.Builder
		go func() {
			done <- run(ctx, runEnv{
				args:   []string{"--dev", "--listen-addr", "127.0.0.1:0", "--data-dir", dir, "--public-url", "https://poppyhost.localhost"},
				getenv: func(string) string { return "" }, stdout: &out, stderr: io.Discard,
				onListen: func(a net.Addr) { listening <- a },
			})
		}()
		var addr string
		select {
		case a := <-listening:
			addr = a.String()
		case err := <-done:
			cancel()
			t.Fatalf("round %d: dev server did not start: %v", round, err)
		case <-time.After(2 * time.Minute):
			cancel()
			t.Fatalf("round %d: dev server did not start in time", round)
		}
		require.Contains(t, out.String(), "curl --cacert")
		require.Contains(t, out.String(), "https://stormline.localhost/.well-known/poppy.json")

		pem, err := os.ReadFile(filepath.Join(dir, "dev-ca.pem"))
		require.NoError(t, err)
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(pem))
		client := &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
		}}
		resp, err := client.Get("https://stormline.localhost/.well-known/poppy.json")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		require.Contains(t, string(body), `"name":"Stormline Outfitters"`)
		require.Contains(t, string(body), `"orders:write"`)

		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("dev server did not stop")
		}
		_, err = os.Stat(filepath.Join(dir, "postgres", "poppyhost-port"))
		require.True(t, os.IsNotExist(err), "the private PostgreSQL stops with the server")
	}
}
