package chrome

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
)

// Timeout bounds each call that drives the browser, so a hung browser fails
// the test instead of hanging CI.
const Timeout = 30 * time.Second

// EnvBinary names the Chromium binary to use instead of searching PATH.
const EnvBinary = "POPPYHOST_CHROMIUM"

// Browser is one headless Chromium with one tab, stopped when the test ends.
type Browser struct {
	t   testing.TB
	ctx context.Context // the tab; never given a deadline itself
}

// Start launches Chromium with a fresh profile. It resolves each of hosts
// to 127.0.0.1 (keeping the URL's port) and accepts only certificates
// chained to ca, so the test's HTTPS servers work and nothing else is
// trusted beyond the system's roots.
func Start(t testing.TB, ca *devca.CA, hosts ...string) *Browser {
	t.Helper()
	bin := binary(t)

	rules := make([]string, len(hosts))
	for i, h := range hosts {
		rules[i] = "MAP " + h + " 127.0.0.1"
	}
	out := &output{}
	profile := filepath.Join(t.TempDir(), "profile")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		// Chromium's sandbox refuses to run as root (CI containers).
		chromedp.Flag("no-sandbox", os.Geteuid() == 0),
		chromedp.UserDataDir(profile),
		chromedp.Flag("host-resolver-rules", strings.Join(rules, ", ")),
		// Honoured only with --user-data-dir: certificate errors are
		// ignored when a certificate in the chain has this key, i.e. the
		// test CA's.
		chromedp.Flag("ignore-certificate-errors-spki-list", spkiHash(t, ca)),
		chromedp.CombinedOutput(out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(out.printf))
	// chromedp's cancel funcs wait on a semaphore that only the first call
	// may take; a second call after a failed start would block for ever.
	stopTab := sync.OnceFunc(cancelTab)
	started := false
	t.Cleanup(func() {
		// Close the browser gracefully so it stops its own child processes,
		// kill it if that fails or takes too long, and wait for it to exit.
		if started {
			closeCtx, cancelClose := context.WithTimeout(ctx, Timeout)
			if err := chromedp.Cancel(closeCtx); err != nil {
				out.printf("close: %v", err)
			}
			cancelClose()
		}
		stopTab()
		cancelAlloc()
		// Children such as the network service can outlive the browser and
		// keep writing to the profile, which makes t.TempDir's single
		// RemoveAll fail: stop them, and remove it once none is left.
		for deadline := time.Now().Add(Timeout); ; time.Sleep(20 * time.Millisecond) {
			if killUsing(profile) == 0 && os.RemoveAll(profile) == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("chromium processes kept using %s for %v", profile, Timeout)
				break
			}
		}
		if t.Failed() {
			t.Logf("chromium output (last 8 KiB):\n%s", out.tail(8<<10))
		}
	})

	// The first Run starts the browser, whose lifetime is that of ctx, so
	// bound it with a timer rather than a deadline on ctx.
	timer := time.AfterFunc(Timeout, stopTab)
	err := chromedp.Do(ctx)
	inTime := timer.Stop()
	require.NoError(t, err, "start chromium %s", bin)
	require.True(t, inTime, "chromium took longer than %v to start", Timeout)
	started = true
	return &Browser{t: t, ctx: ctx}
}

// killUsing kills the processes started with profile as their user data
// directory, which Chromium gives every child on its command line, and
// returns how many it found. Without /proc it finds none.
func killUsing(profile string) int {
	want := []byte("--user-data-dir=" + profile)
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !slices.ContainsFunc(bytes.Split(cmdline, []byte{0}), func(arg []byte) bool { return bytes.Equal(arg, want) }) {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Kill() == nil {
			n++
		}
	}
	return n
}

// binary finds Chromium, failing the test (skipping it under -short) when
// there is none.
func binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(EnvBinary); bin != "" {
		path, err := exec.LookPath(bin)
		require.NoError(t, err, "%s=%s: not an executable", EnvBinary, bin)
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const msg = "headless Chromium is needed: install it (apt-get install chromium; .ci/run does) or set " + EnvBinary
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}

// spkiHash returns base64(SHA-256(SubjectPublicKeyInfo)) of the CA
// certificate, the form --ignore-certificate-errors-spki-list takes.
func spkiHash(t testing.TB, ca *devca.CA) string {
	t.Helper()
	block, _ := pem.Decode(ca.CertPEM())
	require.NotNil(t, block, "CA certificate PEM")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Do runs steps in the tab within Timeout and fails the test on error.
func (b *Browser) Do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

// Load runs steps that start a navigation, such as a click on a submit
// button, and waits within Timeout until the page has loaded, following
// redirects. It returns the response that carried the final document.
func (b *Browser) Load(steps ...chromedp.Action[chromedp.Void]) *network.Response {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	require.NoError(b.t, err)
	return resp
}

// Run runs an action that returns a value within Timeout and fails the test
// on error.
func Run[T any](b *Browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err)
	return v
}

// output collects what the browser and chromedp print, shown only when the
// test fails. It is not the test log: chromedp may write after the test.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) printf(format string, args ...any) {
	fmt.Fprintf(o, "chromedp: "+format+"\n", args...)
}

func (o *output) tail(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.buf.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
