package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCA writes a CA's certificate and key to dir and returns a server
// certificate it issued for host.
func testCA(t *testing.T, dir, host string) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caKeyDER, err := x509.MarshalPKCS8PrivateKey(caKey)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: caKeyDER}), 0o600))

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// discover against a Company at shop.localhost: private addresses are
// allowed on their own for a .localhost Company, and only for it.
func TestDiscoverCommand(t *testing.T) {
	dir := t.TempDir()
	cert := testCA(t, dir, "shop.localhost")
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	base := "https://shop.localhost:" + port
	mux.HandleFunc("GET /.well-known/poppy.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"protocol_version": "0.3",
			"organization":     map[string]any{"name": "Test Shop", "domain": "shop.localhost"},
			"agent":            map[string]any{"protocols": []any{map[string]any{"type": "poppy", "endpoint": base + "/poppy/conversations"}}},
			"apis":             []any{map[string]any{"type": "mcp", "url": base + "/mcp"}},
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	flags := []string{"--ca", filepath.Join(dir, "ca.pem"), "--ca-key", filepath.Join(dir, "ca-key.pem"), "--transcript", filepath.Join(dir, "t.txt")}

	var out bytes.Buffer
	require.NoError(t, run(ctx, append([]string{"discover", "--company", base}, flags...), nil, &out))
	require.Contains(t, out.String(), "Company        Test Shop (shop.localhost)")
	require.Contains(t, out.String(), "identifier     https://shop.localhost\n")
	require.Contains(t, out.String(), "api            mcp "+base+"/mcp")
	transcript, err := os.ReadFile(filepath.Join(dir, "t.txt"))
	require.NoError(t, err)
	require.Contains(t, string(transcript), "GET "+base+"/.well-known/poppy.json")

	// Any other Company: loopback is refused unless --allow-private.
	out.Reset()
	err = run(ctx, append([]string{"discover", "--company", "127.0.0.1:" + port}, flags...), nil, &out)
	require.ErrorContains(t, err, "private")
	err = run(ctx, append([]string{"discover", "--company", "127.0.0.1:" + port, "--allow-private"}, flags...), nil, &out)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "private", "connected; the certificate is for shop.localhost")
}
