package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/subproc"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestDevStoriesAgain runs the command dev mode prints, `poppy-agent
// story`, through each interface against one run of the built server in
// dev mode, one after another, and the first one again (issue 21): each
// run asks the demo shop for a fresh copy of the jacket's order, so no run
// finds the jacket already exchanged.
func TestDevStoriesAgain(t *testing.T) {
	t.Parallel()
	requireBuilt(t)
	dir, port := t.TempDir(), freePort(t)
	cmd := exec.Command(serverBin)
	cmd.Env = subproc.Env(map[string]string{
		"POPPYHOST_DEV":          "true",
		"POPPYHOST_DATA_DIR":     dir,
		"POPPYHOST_DATABASE_URL": testdb.NewEmptyDatabase(t),
		"POPPYHOST_PUBLIC_URL":   "https://poppyhost.localhost:" + port,
		"POPPYHOST_LISTEN_ADDR":  "127.0.0.1:" + port,
		"POPPYHOST_OPS_ADDR":     "127.0.0.1:" + freePort(t),
		// As startServerEnv: a loaded test machine sheds nothing.
		"POPPYHOST_OVERLOAD_DELAY": "0s",
	})
	out, done := startProcess(t, "dev server", cmd)
	// The demo's own systems are printed once they serve.
	printed := regexp.MustCompile(`Company Agent  https://\S+  \(its webhook\)`)
	deadline := time.Now().Add(2 * time.Minute)
	for !printed.MatchString(out.String()) {
		select {
		case <-done:
			t.Fatalf("the dev server exited: %s", out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "the dev server did not start the demo")
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, out.String(), "go run ./cmd/poppy-agent story --company https://stormline.localhost:"+port)

	// What each interface prints when the exchange was performed.
	performed := map[string]*regexp.Regexp{
		"conversation": regexp.MustCompile(regexp.QuoteMeta("company (agent): " + demoagent.ExchangeDone)),
		"api":          regexp.MustCompile(`answer: 201 \{[^\n]*"order_id":"ord_`),
		"mcp":          regexp.MustCompile(`tool result \(isError false\)`),
		"web":          regexp.MustCompile(`the browser is at \S+/orders/ord_[A-Z0-9]+: 200`),
	}
	for i, via := range []string{"conversation", "api", "mcp", "web", "conversation"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		require.NoError(t, os.MkdirAll(artifactsDir(), 0o755))
		transcript, err := filepath.Abs(filepath.Join(artifactsDir(), fmt.Sprintf("%s-%d-%s.txt", t.Name(), i+1, via)))
		require.NoError(t, err)
		story := exec.CommandContext(ctx, poppyAgentBin, "story", "--via", via, "--yes",
			"--company", "https://stormline.localhost:"+port, "--ca", filepath.Join(dir, "dev-ca.pem"),
			"--ca-key", filepath.Join(dir, "dev-ca-key.pem"), "--user", "ada",
			"--password-file", filepath.Join(dir, "demo-password"), "--transcript", transcript)
		env := map[string]string{}
		if c := os.Getenv("POPPYHOST_CHROMIUM"); c != "" {
			env["POPPYHOST_CHROMIUM"] = c
		}
		story.Env = subproc.Env(env)
		story.Dir = t.TempDir()
		b, err := story.CombinedOutput()
		cancel()
		printedOut := string(b)
		t.Logf("run %d, --via %s:\n%s", i+1, via, printedOut)
		require.NoError(t, err, "run %d, --via %s:\n%s", i+1, via, printedOut)
		require.Contains(t, printedOut, "a fresh copy of the jacket's order: ord_", "run %d, --via %s", i+1, via)
		require.Regexp(t, performed[via], printedOut, "run %d, --via %s: the exchange was performed:\n%s", i+1, via, printedOut)
		require.Contains(t, printedOut, "\nDone.\n", "run %d, --via %s:\n%s", i+1, via, printedOut)
	}
}
