package agent

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// browserTimeout bounds each step the agent takes in its browser.
const browserTimeout = 30 * time.Second

// EnvChromium names the Chromium binary when Options.Chromium is empty.
const EnvChromium = "POPPYHOST_CHROMIUM"

// Browser is the agent's own headless Chromium, with one tab. The agent
// joins it to Sessions (spec 6) and drives sign-in pages in it for the
// User.
type Browser struct {
	ctx    context.Context // the tab
	cancel func()
	// sid is the Session the browser is joined to ("" if none).
	sid string
	rec *Recorder
}

// Browser returns the agent's browser, starting it the first time.
func (a *Agent) Browser() (*Browser, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.browser != nil {
		return a.browser, nil
	}
	b, err := startBrowser(a.opts)
	if err != nil {
		return nil, err
	}
	b.rec = a.Recorder
	a.browser = b
	return b, nil
}

// chromiumPath finds the Chromium binary.
func chromiumPath(configured string) (string, error) {
	if configured == "" {
		configured = os.Getenv(EnvChromium)
	}
	if configured != "" {
		return exec.LookPath(configured)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("agent: no Chromium found: install chromium or set " + EnvChromium)
}

func startBrowser(opts Options) (*Browser, error) {
	bin, err := chromiumPath(opts.Chromium)
	if err != nil {
		return nil, err
	}
	profile, err := os.MkdirTemp("", "poppy-agent-chromium")
	if err != nil {
		return nil, err
	}
	var rules []string
	for host, to := range opts.HostMap {
		rules = append(rules, "MAP "+host+" "+to)
	}
	flags := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("no-sandbox", os.Geteuid() == 0),
		chromedp.UserDataDir(profile),
	)
	if len(rules) > 0 {
		flags = append(flags, chromedp.Flag("host-resolver-rules", strings.Join(rules, ", ")))
	}
	if spki := spkiHashes(opts.CAPEM); spki != "" {
		// Honoured with --user-data-dir: trust chains through these keys.
		flags = append(flags, chromedp.Flag("ignore-certificate-errors-spki-list", spki))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	stopTab := sync.OnceFunc(cancelTab)
	timer := time.AfterFunc(browserTimeout, stopTab)
	err = chromedp.Do(tab)
	if !timer.Stop() && err == nil {
		err = errors.New("chromium took too long to start")
	}
	b := &Browser{ctx: tab, cancel: func() {
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		_ = chromedp.Cancel(ctx)
		cancel()
		stopTab()
		cancelAlloc()
		os.RemoveAll(profile)
	}}
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("agent: start chromium %s: %w", bin, err)
	}
	return b, nil
}

// spkiHashes returns the comma-separated base64 SHA-256 hashes of the
// certificates' public keys, the form Chromium's SPKI list takes.
func spkiHashes(pemData []byte) string {
	var out []string
	for {
		var block *pem.Block
		block, pemData = pem.Decode(pemData)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		out = append(out, base64.StdEncoding.EncodeToString(sum[:]))
	}
	return strings.Join(out, ",")
}

// Close stops the browser.
func (b *Browser) Close() { b.cancel() }

// Page is what the browser got for a document load.
type Page struct {
	Status  int
	URL     string
	Headers map[string]string // lowercased names
}

// Do runs steps in the tab.
func (b *Browser) Do(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := b.within(ctx)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// Load runs steps that navigate (a Navigate, a click on a submit button)
// and returns the response of the document that loaded.
func (b *Browser) Load(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) (*Page, error) {
	ctx, cancel := b.within(ctx)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		return nil, err
	}
	p := pageOf(resp)
	if b.rec != nil {
		// The browser's own traffic: what loaded, and the header the
		// extension defines (cookies are never noted).
		op := ""
		if h, ok := p.Headers["poppy-operation"]; ok {
			op = ", Poppy-Operation: " + h
		}
		b.rec.Note("browser loaded %s: %d%s", redactURLString(p.URL), p.Status, op)
	}
	return p, nil
}

// Run runs one action that returns a value.
func Run[T any](ctx context.Context, b *Browser, a chromedp.Action[T]) (T, error) {
	ctx, cancel := b.within(ctx)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// within bounds a step by browserTimeout and by the caller's ctx.
func (b *Browser) within(ctx context.Context) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	stop := context.AfterFunc(ctx, cancel)
	return tctx, func() { stop(); cancel() }
}

func pageOf(resp *network.Response) *Page {
	p := &Page{Headers: map[string]string{}}
	if resp == nil {
		return p
	}
	p.Status = int(resp.Status)
	p.URL = resp.URL
	for k, v := range resp.Headers {
		p.Headers[strings.ToLower(k)] = fmt.Sprint(v)
	}
	return p
}
