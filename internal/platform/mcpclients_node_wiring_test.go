package platform_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
)

// mcpNodeDir holds the TypeScript SDK client and its pinned package-lock;
// its node_modules stays out of git.
const mcpNodeDir = "testdata/mcpnode"

// nodeDeps installs the pinned packages when they are missing, as .ci/run
// does, so the test runs on a fresh clone too.
func nodeDeps(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("node")
	require.NoError(t, err, "this test needs Node.js (v20) and npm")
	if _, err := os.Stat(filepath.Join(mcpNodeDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err == nil {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = mcpNodeDir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci in %s:\n%s", mcpNodeDir, out)
}

// nodeStep is one line the client prints.
type nodeStep struct {
	Step     string   `json:"step"`
	URL      string   `json:"url"`
	State    string   `json:"state"`
	Iss      string   `json:"iss"`
	Code     bool     `json:"code"`
	Error    string   `json:"error"`
	Message  string   `json:"message"`
	Names    []string `json:"names"`
	IsError  bool     `json:"isError"`
	Text     string   `json:"text"`
	Result   string   `json:"result"`
	Rotated  bool     `json:"rotated"`
	New      bool     `json:"newAccess"`
	Refresh  bool     `json:"refresh"`
	Type     string   `json:"token_type"`
	ClientID string   `json:"client_id"`
}

// TestMCPClientTypeScriptSDK runs the official MCP TypeScript SDK's client
// (testdata/mcpnode, pinned) under Node against the hosted MCP server:
// the 401, discovery, sign-in as a public client with a client metadata
// document and PKCE in headless Chromium, the redirect to the client's
// loopback port, tools/list, a tool call that reaches the origin with no
// Session, and a refresh.
func TestMCPClientTypeScriptSDK(t *testing.T) {
	t.Parallel()
	nodeDeps(t)
	g := setupMCPClients(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, g.env.CA.CertPEM(), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = mcpNodeDir
	cmd.Env = append(os.Environ(), "MCP_URL="+g.base+"/mcp", "CLIENT_ID="+g.desk.ClientID, "CA_FILE="+caFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan nodeStep)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var s nodeStep
			if json.Unmarshal(sc.Bytes(), &s) != nil {
				s = nodeStep{Step: "output", Message: sc.Text()}
			}
			lines <- s
		}
	}()
	next := func(want string) nodeStep {
		t.Helper()
		for s := range lines {
			require.NotEqual(t, "error", s.Step, "the client failed: %s\n%s", s.Message, stderr.String())
			if s.Step == "output" {
				t.Logf("node: %s", s.Message)
				continue
			}
			require.Equal(t, want, s.Step, "%+v", s)
			return s
		}
		t.Fatalf("the client ended before %q: %s", want, stderr.String())
		return nodeStep{}
	}

	// The SDK found the issuer from the 401 and asks for a sign-in.
	step := next("authorize")
	require.True(t, strings.HasPrefix(step.URL, g.base+"/oauth/authorize?"), step.URL)
	b := chrome.Start(t, g.env.CA, testkit.PublicHost)
	const (
		login   = `button[name="action"][value="login"]`
		approve = `button[name="action"][value="approve"]`
	)
	resp := b.Load(chromedp.Navigate(step.URL))
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)
	resp = b.Load(
		chromedp.SendKeys(`input[name="username"]`, "ada"),
		chromedp.SendKeys(`input[name="password"]`, mcpClientsPassword),
		chromedp.Click(login),
	)
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)
	b.Do(chromedp.WaitVisible(approve))
	text := chrome.Run(b, chromedp.Text("body"))
	require.Contains(t, text, "Desk Assistant")
	require.Contains(t, text, "This is not a Personal Agent")
	// Allow: the browser lands on the client's loopback port.
	resp = b.Load(chromedp.Click(approve))
	require.Equal(t, int64(http.StatusOK), resp.Status, resp.URL)
	require.True(t, strings.HasPrefix(resp.URL, "http://127.0.0.1:"), resp.URL)

	step = next("callback")
	require.True(t, step.Code, "%+v", step)
	require.Equal(t, "st4te-node", step.State)
	require.Equal(t, g.base, step.Iss)
	step = next("token")
	require.Equal(t, "bearer", strings.ToLower(step.Type))
	require.True(t, step.Refresh)
	require.Equal(t, g.desk.ClientID, step.ClientID, "the client metadata document's URL is the client_id")

	step = next("tools")
	require.Equal(t, []string{"catalog.search", "orders.lookup"}, step.Names)
	step = next("call")
	require.False(t, step.IsError, step.Text)
	require.JSONEq(t, `{"order":"o1","status":"shipped"}`, step.Text)
	got := g.origin.Last()
	require.NotNil(t, got.Claims, "%v", got.VerifyErr)
	require.Equal(t, g.desk.ClientID, got.Claims.ClientID)
	require.Empty(t, got.Claims.SID, "the call belongs to no Session")
	require.NotEmpty(t, got.Claims.Account)

	step = next("refresh")
	require.Equal(t, "AUTHORIZED", step.Result)
	require.True(t, step.Rotated, "the refresh token rotates")
	require.True(t, step.New)
	step = next("call")
	require.False(t, step.IsError, step.Text)
	next("done")
	require.NoError(t, cmd.Wait(), stderr.String())
}
