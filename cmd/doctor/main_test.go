package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/stretchr/testify/require"
)

// doctor against a Company at shop.localhost: it passes while poppy.json
// names the domain and fails, naming the check, once it names another; the
// JSON report says the same.
func TestDoctorCommand(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.New()
	require.NoError(t, err)
	cert, err := ca.Issue("shop.localhost")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM(), 0o600))
	domain := "shop.localhost"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/poppy.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"protocol_version": "0.3",
			"organization": map[string]any{"name": "Test Shop", "domain": domain}})
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	base := "https://shop.localhost:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"--company", base, "--ca", filepath.Join(dir, "ca.pem"), "--timeout", "5s"}

	var out bytes.Buffer
	require.NoError(t, run(ctx, args, &out), out.String())
	require.Contains(t, out.String(), "PASS  poppy.json")
	require.Contains(t, out.String(), "no check failed (6 skipped)")

	domain = "elsewhere.example"
	out.Reset()
	err = run(ctx, args, &out)
	require.ErrorContains(t, err, "failed checks: poppy.json")
	require.Contains(t, out.String(), "FAIL  poppy.json")

	out.Reset()
	require.Error(t, run(ctx, append(args, "--json"), &out))
	var rep struct {
		OK      bool `json:"ok"`
		Results []struct {
			Check, Status string
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.False(t, rep.OK)
	require.Equal(t, "poppy.json", rep.Results[1].Check)
	require.Equal(t, "fail", rep.Results[1].Status)

	// Without the CA the certificate is not trusted: the TLS check fails.
	out.Reset()
	require.ErrorContains(t, run(ctx, args[:2], &out), "failed checks: tls")
}
