package devca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startServer runs an HTTPS server using ca.ServerTLSConfig that echoes the
// server name the handshake was made for.
func startServer(t *testing.T, ca *CA) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.TLS.ServerName, r.Proto)
	}))
	srv.TLS = ca.ServerTLSConfig()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// clientFor returns a client that trusts only ca and connects to srv
// whatever host name the URL names, so SNI carries that host name.
func clientFor(t *testing.T, ca *CA, srv *httptest.Server) *http.Client {
	t.Helper()
	addr := srv.Listener.Addr().String()
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool()},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestHandshakeIssuesCertificatePerSNI(t *testing.T) {
	ca, err := New()
	require.NoError(t, err)
	srv := startServer(t, ca)
	client := clientFor(t, ca, srv)

	for _, host := range []string{"a.example.test", "b.other.test"} {
		resp, err := client.Get("https://" + host + "/")
		require.NoError(t, err, host)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())

		require.Equal(t, host+" HTTP/2.0", string(body))
		require.NotNil(t, resp.TLS)
		require.Equal(t, "h2", resp.TLS.NegotiatedProtocol)
		leaf := resp.TLS.PeerCertificates[0]
		require.Equal(t, []string{host}, leaf.DNSNames)
		require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, leaf.ExtKeyUsage)
		require.WithinDuration(t, time.Now().Add(-time.Hour), leaf.NotBefore, time.Minute)
		require.WithinDuration(t, time.Now().Add(365*24*time.Hour), leaf.NotAfter, time.Minute)
	}
}

func TestHandshakeWithoutSNIServesLocalhost(t *testing.T) {
	ca, err := New()
	require.NoError(t, err)
	// Not httptest: StartTLS adds its own certificate to Certificates, and
	// crypto/tls then serves that one to clients without SNI.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ca.ServerTLSConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()

	// Dialling an IP literal makes crypto/tls omit SNI entirely.
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool()})
	require.NoError(t, err)
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	require.Equal(t, []string{"localhost"}, leaf.DNSNames)
	require.Len(t, leaf.IPAddresses, 2)
	require.True(t, leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")))
	require.True(t, leaf.IPAddresses[1].Equal(net.IPv6loopback))
}

func TestInvalidSNIRefused(t *testing.T) {
	ca, err := New()
	require.NoError(t, err)
	cfg := ca.ServerTLSConfig()

	for _, name := range []string{
		"bad name.test",
		"-leading.test",
		"double..dot.test",
		"ünïcode.test",
		"x." + strings.Repeat("a", 64) + ".test",
		strings.Repeat("abcdefghi.", 26) + "test",
	} {
		_, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: name})
		require.Error(t, err, name)
	}
	require.Empty(t, ca.cache, "refused names must not be cached")

	// And through a real handshake: the client sees the handshake fail.
	srv := startServer(t, ca)
	_, err = tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{
		RootCAs:    ca.Pool(),
		ServerName: "under_score-ok.test",
	})
	require.NoError(t, err, "underscores are tolerated")
	_, err = tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // we test the server's refusal, not verification
		ServerName:         "a$b.test",
	})
	require.Error(t, err)
}

func TestGetCertificateCachesAndIsConcurrencySafe(t *testing.T) {
	ca, err := New()
	require.NoError(t, err)
	cfg := ca.ServerTLSConfig()

	first, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: "Cached.Example.Test"})
	require.NoError(t, err)
	require.Equal(t, []string{"cached.example.test"}, first.Leaf.DNSNames)

	// Goroutines only record results; assertions run on the test goroutine.
	certs := make([]*tls.Certificate, 32)
	errs := make([]error, 32)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			name := "cached.example.test"
			if i%2 == 1 {
				name = fmt.Sprintf("h%d.example.test", i)
			}
			certs[i], errs[i] = cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: name})
		})
	}
	wg.Wait()
	for i := range 32 {
		require.NoError(t, errs[i])
		if i%2 == 0 {
			require.Same(t, first, certs[i])
		}
	}
	require.Len(t, ca.cache, 17)
}

func TestIssue(t *testing.T) {
	ca, err := New()
	require.NoError(t, err)

	cert, err := ca.Issue("svc.example.test", "*.wild.example.test", "10.1.2.3", "::1")
	require.NoError(t, err)
	require.Equal(t, []string{"svc.example.test", "*.wild.example.test"}, cert.Leaf.DNSNames)
	require.Len(t, cert.Leaf.IPAddresses, 2)
	require.Equal(t, "svc.example.test", cert.Leaf.Subject.CommonName)

	_, err = cert.Leaf.Verify(x509.VerifyOptions{
		DNSName: "x.wild.example.test",
		Roots:   ca.Pool(),
	})
	require.NoError(t, err)

	_, err = ca.Issue()
	require.Error(t, err)
	_, err = ca.Issue("not a name")
	require.Error(t, err)
}

func TestLoadCreatesOnceAndReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "ca")

	first, err := Load(dir)
	require.NoError(t, err)
	second, err := Load(dir)
	require.NoError(t, err)
	require.Equal(t, first.CertPEM(), second.CertPEM())

	info, err := os.Stat(filepath.Join(dir, "dev-ca-key.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	info, err = os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	onDisk, err := os.ReadFile(filepath.Join(dir, "dev-ca.pem"))
	require.NoError(t, err)
	require.Equal(t, first.CertPEM(), onDisk)

	// A leaf from the reloaded CA verifies against the first CA's pool,
	// i.e. the key was persisted too.
	leaf, err := second.Issue("reload.example.test")
	require.NoError(t, err)
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "reload.example.test", Roots: first.Pool()})
	require.NoError(t, err)
}

func TestLoadConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	pems := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ca, err := Load(dir)
			errs[i] = err
			if err == nil {
				pems[i] = ca.CertPEM()
			}
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
	}
	for i := 1; i < n; i++ {
		require.Equal(t, pems[0], pems[i])
	}
}

func TestLoadRegeneratesIncompletePairAndRejectsCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	first, err := Load(dir)
	require.NoError(t, err)

	require.NoError(t, os.Remove(filepath.Join(dir, "dev-ca.pem")))
	second, err := Load(dir)
	require.NoError(t, err)
	require.NotEqual(t, first.CertPEM(), second.CertPEM())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "dev-ca.pem"), []byte("garbage"), 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, "no PEM CERTIFICATE block")

	// A key that belongs to a different CA is caught too.
	other, err := New()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dev-ca.pem"), other.CertPEM(), 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, "does not match")
}

func TestValidDNSName(t *testing.T) {
	for name, want := range map[string]bool{
		"localhost":          true,
		"a.example.test":     true,
		"xn--bcher-kva.test": true,
		"a-b.c_d.test":       true,
		"":                   false,
		".":                  false,
		"a..b":               false,
		"a-.test":            false,
		"a b":                false,
		"a/b":                false,
		"a:443":              false,
	} {
		require.Equal(t, want, validDNSName(name), name)
	}
}
