package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/pglocal"
)

// TestDevMode runs the README's first command as a test: a private
// PostgreSQL, the dev CA and the demo Company, twice on the same folder
// (the second run reuses everything but the demo password, removed in
// between, which it makes anew for the demo account), and the cluster
// stops with the server.
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
				args:   []string{"--dev", "--listen-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0", "--data-dir", dir, "--public-url", "https://poppyhost.localhost"},
				getenv: func(string) string { return "" }, stdout: &out, stderr: io.Discard,
				onListen: func(a, _ net.Addr) { listening <- a },
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
		// Its own KEK, kept with its database.
		info, err := os.Stat(filepath.Join(dir, "kek"))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
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
		demoAgentRefusesUnsigned(t, pool, out.String())
		demoShopWired(t, client, string(body))
		signInDemo(t, client, out.String(), filepath.Join(dir, "demo-password"))
		signInConsole(t, client, out.String(), filepath.Join(dir, "demo-password"))
		if round == 0 {
			// The password file is lost: the next start makes a new one
			// and the demo account's password is the new one.
			require.NoError(t, os.Remove(filepath.Join(dir, "demo-password")))
		}

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

// demoAgentRefusesUnsigned finds the demo Company Agent's webhook in the
// dev output and checks it serves HTTPS with a dev CA certificate for its
// name and refuses an unsigned delivery.
func demoAgentRefusesUnsigned(t *testing.T, roots *x509.CertPool, printed string) {
	t.Helper()
	m := regexp.MustCompile(`Company Agent  (https://agent\.stormline\.localhost:(\d+)/poppy/webhook)  \(its webhook\)`).FindStringSubmatch(printed)
	require.NotNil(t, m, "the dev server prints the demo Company Agent: %s", printed)
	require.Equal(t, 1, strings.Count(printed, "/poppy/webhook"), "the webhook is printed once: %s", printed)
	require.Contains(t, printed, "Personal Agents start conversations at https://poppyhost.localhost/t/stormline/poppy/conversations")
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:"+m[2])
		},
	}}
	resp, err := client.Post(m[1], "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// demoShopWired checks that dev mode registered the demo shop: poppy.json
// lists its orders API, the MCP server and the operations endpoint; the
// published description is the shop's; and the website is the shop's,
// proxied by the platform, where a visitor is asked to sign in.
func demoShopWired(t *testing.T, client *http.Client, poppyJSON string) {
	t.Helper()
	require.Contains(t, poppyJSON, "/t/stormline/openapi/orders.json")
	require.Contains(t, poppyJSON, "/t/stormline/mcp")
	require.Contains(t, poppyJSON, `"operations"`)
	require.Contains(t, poppyJSON, "/poppy/browser-session")

	resp, err := client.Get("https://poppyhost.localhost/t/stormline/openapi/orders.json")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "/orders/{id}/exchanges")

	resp, err = client.Get("https://stormline.localhost/orders")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `<ul id="missing-scopes"><li>orders:read</li></ul>`, "the shop's own page")
}

// signInDemo signs in as the demo account on the issuer's account page,
// whose URL the dev server printed.
func signInDemo(t *testing.T, client *http.Client, printed, passwordFile string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  (https://\S+/account)$`).FindStringSubmatch(printed)
	require.NotNil(t, m, "the dev server prints the account page: %s", printed)
	password, err := os.ReadFile(passwordFile)
	require.NoError(t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Transport: client.Transport, Jar: jar}
	resp, err := browser.PostForm(m[1], url.Values{"csrf": {pageCSRF(t, browser, m[1])}, "action": {"login"},
		"username": {"ada"}, "password": {strings.TrimSpace(string(password))}})
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", page)
	require.Contains(t, string(page), "ada", "the account page names the signed-in account")
	require.Contains(t, string(page), `value="signout"`)
}

// signInConsole signs in as the demo owner at the console whose sign-in
// page and owner the dev server printed.
func signInConsole(t *testing.T, client *http.Client, printed, passwordFile string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  console       (https://\S+/signin)\n\s+owner (\S+), the same password$`).FindStringSubmatch(printed)
	require.NotNil(t, m, "the dev server prints the console and its owner: %s", printed)
	password, err := os.ReadFile(passwordFile)
	require.NoError(t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Transport: client.Transport, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.PostForm(m[1], url.Values{"csrf": {pageCSRF(t, browser, m[1])},
		"email": {m[2]}, "password": {strings.TrimSpace(string(password))}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/stormline/", resp.Header.Get("Location"))
}

// pageCSRF fetches the page at u with browser and returns its form's csrf
// token.
func pageCSRF(t *testing.T, browser *http.Client, u string) string {
	t.Helper()
	resp, err := browser.Get(u)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", page)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	require.NotNil(t, csrf, "%s", page)
	return string(csrf[1])
}
