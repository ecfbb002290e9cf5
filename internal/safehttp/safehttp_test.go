package safehttp

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// resolverFunc adapts a function to Resolver.
type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// testNames is the DNS of the tests. The test server listens on 127.0.0.1
// only; the other addresses are never connected to.
var testNames = map[string][]netip.Addr{
	"agent.test":    {loopback},
	"other.test":    {loopback},
	"mapped.test":   {netip.MustParseAddr("::ffff:127.0.0.1")}, // how *net.Resolver returns IPv4
	"internal.test": {netip.MustParseAddr("10.0.0.1")},
	"metadata.test": {netip.MustParseAddr("169.254.169.254")},
	"public-first.test": {
		netip.MustParseAddr("93.184.216.34"), loopback,
	},
	"private-last.test": {
		netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("2606:2800:220:1::"), netip.MustParseAddr("fd00::1"),
	},
	"loopback-then-internal.test": {loopback, netip.MustParseAddr("10.0.0.1")},
}

var testResolver = resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := testNames[strings.TrimSuffix(host, ".")]; ok {
		return slices.Clone(addrs), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
})

// bundle is one test's HTTPS server and CA.
type bundle struct {
	ca    *devca.CA
	port  string
	conns atomic.Int64 // TCP connections the server accepted
}

// setup starts an HTTPS server (HTTP/2 and HTTP/1.1) on 127.0.0.1 that
// presents a devca certificate for whatever name the client asks for.
func setup(t *testing.T, h http.Handler) *bundle {
	return setupServer(t, h, false)
}

func setupServer(t *testing.T, h http.Handler, http1Only bool) *bundle {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	b := &bundle{ca: ca}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, b.port, err = net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	// Not httptest: its StartTLS adds its own certificate, which would be
	// served to clients that send no SNI (IP-literal URLs).
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         ca.ServerTLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				b.conns.Add(1)
			}
		},
	}
	if http1Only {
		srv.TLSConfig.NextProtos = []string{"http/1.1"}
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

// url returns the test server's URL under host.
func (b *bundle) url(host, path string) string {
	return "https://" + net.JoinHostPort(host, b.port) + path
}

// client returns a Client trusting the bundle's CA and using testResolver
// unless opts say otherwise.
func (b *bundle) client(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.RootCAs == nil {
		opts.RootCAs = b.ca.Pool()
	}
	if opts.Resolver == nil {
		opts.Resolver = testResolver
	}
	c := New(opts)
	t.Cleanup(c.transport.CloseIdleConnections)
	return c
}

// loopbackClient enforces the real address rules except that it may reach
// the test server on 127.0.0.1, standing in for a public server, so tests
// can check what happens after the first hop.
func (b *bundle) loopbackClient(t *testing.T) *Client {
	t.Helper()
	c := b.client(t, Options{})
	c.blocked = func(ip netip.Addr) bool { return ip != loopback && blockedAddr(ip) }
	return c
}

func jsonHandler(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []*http.Request
	)
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, `{"client_id":"x"}`)
	}))
	c := b.client(t, Options{AllowPrivate: true, UserAgent: "poppyhost-test"})

	for _, host := range []string{"agent.test", "mapped.test", "127.0.0.1"} {
		u := b.url(host, "/agent.json?v=1")
		resp, err := c.Get(t.Context(), Request{URL: u, Accept: []string{"application/json"}})
		require.NoError(t, err, host)
		require.Equal(t, u, resp.URL)
		require.Equal(t, http.StatusOK, resp.Status)
		require.Equal(t, "max-age=60", resp.Header.Get("Cache-Control"))
		require.JSONEq(t, `{"client_id":"x"}`, string(resp.Body))
	}

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 3)
	// SNI is the URL's host; an IP literal sends none.
	require.Equal(t, []string{"agent.test", "mapped.test", ""},
		[]string{seen[0].TLS.ServerName, seen[1].TLS.ServerName, seen[2].TLS.ServerName})
	for _, r := range seen {
		require.Equal(t, "HTTP/2.0", r.Proto)
		require.Equal(t, "poppyhost-test", r.Header.Get("User-Agent"))
		require.Equal(t, "application/json", r.Header.Get("Accept"))
	}
}

func TestGetVerifiesCertificate(t *testing.T) {
	t.Parallel()
	b := setup(t, jsonHandler(`{}`))
	other, err := devca.New()
	require.NoError(t, err)

	c := b.client(t, Options{AllowPrivate: true, RootCAs: other.Pool()})
	_, err = c.Get(t.Context(), Request{URL: b.url("agent.test", "/")})
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	// Nor does the system pool know the dev CA.
	c = New(Options{AllowPrivate: true, Resolver: testResolver})
	t.Cleanup(c.transport.CloseIdleConnections)
	_, err = c.Get(t.Context(), Request{URL: b.url("agent.test", "/")})
	require.Error(t, err)
}

func TestGetRefusesBlockedAddresses(t *testing.T) {
	t.Parallel()
	for _, host := range []string{
		"agent.test",                  // name for 127.0.0.1
		"mapped.test",                 // ::ffff:127.0.0.1
		"internal.test",               // 10.0.0.1
		"metadata.test",               // 169.254.169.254
		"public-first.test",           // public, then 127.0.0.1
		"private-last.test",           // public v4 and v6, then fd00::1
		"loopback-then-internal.test", // 127.0.0.1, then 10.0.0.1
		"127.0.0.1",
		"127.1.2.3",
		"[::1]",
		"[::ffff:127.0.0.1]",
		"169.254.169.254",
		"0.0.0.0",
	} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			b := setup(t, jsonHandler(`{}`))
			c := b.client(t, Options{})
			start := time.Now()
			u := "https://" + host + ":" + b.port + "/agent.json"
			resp, err := c.Get(t.Context(), Request{URL: u})
			require.ErrorIs(t, err, ErrBlockedAddress)
			require.Nil(t, resp)
			require.Less(t, time.Since(start), time.Second, "refused without trying to connect")
			require.Zero(t, b.conns.Load(), "the server saw no connection")
		})
	}
}

func TestGetRefusesNonHTTPS(t *testing.T) {
	t.Parallel()
	noDNS := resolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
		t.Error("resolver called for a URL that should have been refused")
		return nil, fmt.Errorf("unexpected lookup")
	})
	c := New(Options{AllowPrivate: true, Resolver: noDNS})
	for _, u := range []string{
		"http://agent.test/agent.json",
		"HTTP://agent.test/agent.json",
		"ftp://agent.test/agent.json",
		"//agent.test/agent.json",
		"/agent.json",
		"agent.test/agent.json",
		"",
		"https:///agent.json",
		"https://:443/agent.json",
		"https:agent.test/agent.json",
		"https://user@agent.test/agent.json",
		"https://user:secret@agent.test/agent.json",
		"https://agent.test:bad/",
		"https://[::1/?secret",
		"https://user:secret@[::1/",
	} {
		resp, err := c.Get(t.Context(), Request{URL: u})
		require.ErrorIs(t, err, ErrNotHTTPS, u)
		require.Nil(t, resp)
		require.NotContains(t, err.Error(), "secret")
	}
}

// redirector serves /start by redirecting to the location named in the
// "to" query parameter and counts the requests to every other path.
type redirector struct {
	hits atomic.Int64
}

func (rd *redirector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/start" {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		return
	}
	rd.hits.Add(1)
	jsonHandler(`{"ok":true}`)(w, r)
}

func startURL(b *bundle, to string) string {
	return b.url("agent.test", "/start?to="+strings.ReplaceAll(to, "&", "%26"))
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	rd := &redirector{}
	b := setup(t, rd)
	c := b.client(t, Options{AllowPrivate: true})

	resp, err := c.Get(t.Context(), Request{URL: startURL(b, b.url("agent.test", "/target"))})
	require.ErrorIs(t, err, ErrRedirect)
	require.ErrorContains(t, err, "302")
	require.Nil(t, resp)
	require.Zero(t, rd.hits.Load())
}

func TestRedirectFollowed(t *testing.T) {
	t.Parallel()
	rd := &redirector{}
	b := setup(t, rd)
	c := b.client(t, Options{AllowPrivate: true})

	target := b.url("other.test", "/.well-known/poppy.json")
	resp, err := c.Get(t.Context(), Request{URL: startURL(b, target), FollowRedirects: true})
	require.NoError(t, err)
	require.Equal(t, target, resp.URL)
	require.Equal(t, http.StatusOK, resp.Status)
	require.JSONEq(t, `{"ok":true}`, string(resp.Body))
	require.EqualValues(t, 1, rd.hits.Load())
}

func TestRedirectToHTTPRefused(t *testing.T) {
	t.Parallel()
	rd := &redirector{}
	b := setup(t, rd)
	c := b.client(t, Options{AllowPrivate: true})

	for _, to := range []string{
		"http://agent.test:" + b.port + "/target",
		"http://127.0.0.1:" + b.port + "/target",
		"https://user:secret@agent.test:" + b.port + "/target",
	} {
		resp, err := c.Get(t.Context(), Request{URL: startURL(b, to), FollowRedirects: true})
		require.ErrorIs(t, err, ErrNotHTTPS, to)
		require.Nil(t, resp)
		require.NotContains(t, err.Error(), "secret")
	}
	require.Zero(t, rd.hits.Load())
}

func TestRedirectToBlockedAddressRefused(t *testing.T) {
	t.Parallel()
	rd := &redirector{}
	b := setup(t, rd)
	c := b.loopbackClient(t)

	// The stand-in for a public server is reachable, also by redirect.
	resp, err := c.Get(t.Context(), Request{URL: startURL(b, b.url("other.test", "/target")), FollowRedirects: true})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status)

	for _, to := range []string{
		b.url("internal.test", "/target"),
		b.url("metadata.test", "/latest/meta-data/"),
		b.url("loopback-then-internal.test", "/target"),
		b.url("10.0.0.1", "/target"),
		b.url("169.254.169.254", "/latest/meta-data/"),
		b.url("::1", "/target"),
		b.url("::ffff:10.0.0.1", "/target"),
	} {
		start := time.Now()
		resp, err := c.Get(t.Context(), Request{URL: startURL(b, to), FollowRedirects: true})
		require.ErrorIs(t, err, ErrBlockedAddress, to)
		require.Nil(t, resp)
		require.Less(t, time.Since(start), time.Second, "refused without trying to connect")
	}
	require.EqualValues(t, 1, rd.hits.Load())
}

func TestRedirectLimit(t *testing.T) {
	t.Parallel()
	// /r/N redirects to /r/N-1, alternating hosts; /r/0 is the document.
	var port string
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if err != nil || n == 0 {
			jsonHandler(`{}`)(w, r)
			return
		}
		host := []string{"agent.test", "other.test"}[n%2]
		to := "https://" + net.JoinHostPort(host, port) + "/r/" + strconv.Itoa(n-1)
		w.Header().Set("Location", to)
		w.WriteHeader([]int{301, 302, 303, 307, 308}[n%5])
	}))
	port = b.port
	c := b.client(t, Options{AllowPrivate: true})

	resp, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/r/5"), FollowRedirects: true})
	require.NoError(t, err)
	require.Equal(t, b.url("other.test", "/r/0"), resp.URL)

	resp, err = c.Get(t.Context(), Request{URL: b.url("agent.test", "/r/6"), FollowRedirects: true})
	require.ErrorIs(t, err, ErrRedirect)
	require.ErrorContains(t, err, "more than 5 redirects")
	require.Nil(t, resp)
}

func TestRedirectWithoutLocation(t *testing.T) {
	t.Parallel()
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusMultipleChoices)
	}))
	c := b.client(t, Options{AllowPrivate: true})
	_, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/"), FollowRedirects: true})
	require.ErrorIs(t, err, ErrRedirect)
	require.ErrorContains(t, err, "300")
}

func TestNoCredentialsSent(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		headers = map[string]http.Header{}
	)
	var port string
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers[r.Host+r.URL.Path] = r.Header.Clone()
		mu.Unlock()
		if r.URL.Path == "/start" {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cret", Domain: "test", Path: "/"})
			w.Header().Set("WWW-Authenticate", `Basic realm="x"`)
			http.Redirect(w, r, "https://"+net.JoinHostPort("other.test", port)+"/next", http.StatusFound)
			return
		}
		if r.URL.Path == "/next" {
			http.SetCookie(w, &http.Cookie{Name: "next", Value: "s3cret", Path: "/"})
			http.Redirect(w, r, "/final?token=abc", http.StatusTemporaryRedirect)
			return
		}
		jsonHandler(`{}`)(w, r)
	}))
	port = b.port
	c := b.client(t, Options{AllowPrivate: true})

	resp, err := c.Get(t.Context(), Request{
		URL:             b.url("agent.test", "/start?secret=1"),
		Accept:          []string{"application/json", "application/jwk-set+json"},
		FollowRedirects: true,
	})
	require.NoError(t, err)
	require.Equal(t, b.url("other.test", "/final?token=abc"), resp.URL)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, headers, 3)
	for hop, h := range headers {
		var names []string
		for name := range h {
			names = append(names, name)
		}
		slices.Sort(names)
		// Accept-Encoding is net/http's transparent gzip.
		require.Equal(t, []string{"Accept", "Accept-Encoding", "User-Agent"}, names, hop)
		require.Equal(t, "application/json, application/jwk-set+json", h.Get("Accept"), hop)
		require.Equal(t, "poppyhost", h.Get("User-Agent"), hop)
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 1000
	write := func(n int, withLength bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if withLength {
				w.Header().Set("Content-Length", strconv.Itoa(n))
			}
			// Several flushed writes: without Content-Length, HTTP/1.1
			// sends the body chunked.
			chunk := strings.Repeat("x", 100)
			for n > 0 {
				k := min(n, len(chunk))
				_, _ = io.WriteString(w, chunk[:k])
				w.(http.Flusher).Flush()
				n -= k
			}
		}
	}
	for _, http1 := range []bool{false, true} {
		cases := []struct {
			name     string
			h        http.HandlerFunc
			maxBytes int64
			wantErr  error
		}{
			{"at limit with length", write(limit, true), limit, nil},
			{"at limit streamed", write(limit, false), limit, nil},
			{"over limit with length", write(limit+1, true), limit, ErrTooLarge},
			{"over limit streamed", write(limit+1, false), limit, ErrTooLarge},
			{"far over limit streamed", write(100*limit, false), limit, ErrTooLarge},
			{"default limit", write(1<<20, false), 0, nil},
			{"over default limit with length", write(1<<20+1, true), 0, ErrTooLarge},
			{"over default limit streamed", write(1<<20+1, false), 0, ErrTooLarge},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("http1=%v/%s", http1, tc.name), func(t *testing.T) {
				t.Parallel()
				b := setupServer(t, tc.h, http1)
				c := b.client(t, Options{AllowPrivate: true})
				resp, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/"), MaxBytes: tc.maxBytes})
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
					require.Nil(t, resp)
					return
				}
				require.NoError(t, err)
				want := tc.maxBytes
				if want == 0 {
					want = 1 << 20
				}
				require.Len(t, resp.Body, int(want))
			})
		}
	}
}

func TestBodyLimitFailsEarlyOnContentLength(t *testing.T) {
	t.Parallel()
	// Declares 10 MiB, sends a little, then stalls: only a client that
	// trusts Content-Length fails before its timeout.
	b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(10<<20))
		_, _ = io.WriteString(w, "{}")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	c := b.client(t, Options{AllowPrivate: true, Timeout: 5 * time.Second})
	start := time.Now()
	_, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/")})
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorContains(t, err, "Content-Length")
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestContentType(t *testing.T) {
	t.Parallel()
	cases := []struct {
		contentType string // "-" sends none
		accept      []string
		ok          bool
	}{
		{"application/json", []string{"application/json"}, true},
		{"application/json; charset=utf-8", []string{"application/json"}, true},
		{"Application/JSON ; charset=utf-8", []string{"application/json"}, true},
		{"application/json", []string{"application/json; charset=utf-8"}, true},
		{"application/jwk-set+json", []string{"application/json", "application/jwk-set+json"}, true},
		{"text/markdown", []string{"text/*"}, true},
		{"image/png", []string{"*/*"}, true},
		{"text/html", nil, true},
		{"-", nil, true},
		{"text/html; charset=utf-8", []string{"application/json"}, false},
		{"application/jsonx", []string{"application/json"}, false},
		{"application/json+x", []string{"application/json"}, false},
		{"application/problem+json", []string{"application/json"}, false},
		{"text/plain", []string{"application/*"}, false},
		{"application", []string{"application/json"}, false},
		{"", []string{"application/json"}, false},
		{"-", []string{"application/json"}, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q/%q", tc.contentType, tc.accept), func(t *testing.T) {
			t.Parallel()
			b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.contentType == "-" {
					w.Header()["Content-Type"] = nil // no sniffing either
				} else {
					w.Header().Set("Content-Type", tc.contentType)
				}
				_, _ = io.WriteString(w, `{}`)
			}))
			c := b.client(t, Options{AllowPrivate: true})
			resp, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/"), Accept: tc.accept})
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, "{}", string(resp.Body))
				return
			}
			require.ErrorIs(t, err, ErrContentType)
			require.Nil(t, resp)
		})
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 201, 204, 400, 401, 404, 410, 429, 500, 503} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(code)
			}))
			c := b.client(t, Options{AllowPrivate: true})
			resp, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/")})
			if code < 300 {
				require.NoError(t, err)
				require.Equal(t, code, resp.Status)
				return
			}
			require.ErrorIs(t, err, ErrStatus)
			require.ErrorContains(t, err, strconv.Itoa(code))
			require.Nil(t, resp)
		})
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	handlers := map[string]http.HandlerFunc{
		"slow headers": func(_ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		},
		"slow body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"partial":`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			c := b.client(t, Options{AllowPrivate: true, Timeout: timeout})
			start := time.Now()
			resp, err := c.Get(t.Context(), Request{URL: b.url("agent.test", "/")})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Nil(t, resp)
			require.Less(t, time.Since(start), timeout+time.Second)
		})
	}
}

func TestDialTimeout(t *testing.T) {
	t.Parallel()
	const dialTimeout = 200 * time.Millisecond
	hang := resolverFunc(func(ctx context.Context, _, _ string) ([]netip.Addr, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c := New(Options{AllowPrivate: true, Resolver: hang, DialTimeout: dialTimeout, Timeout: time.Minute})
	start := time.Now()
	_, err := c.Get(t.Context(), Request{URL: "https://slow.test/"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), dialTimeout+time.Second)
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	b := setup(t, jsonHandler(`{"ok":true}`))
	c := b.client(t, Options{AllowPrivate: true})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			host := []string{"agent.test", "other.test"}[i%2]
			resp, err := c.Get(t.Context(), Request{URL: b.url(host, "/"), Accept: []string{"application/json"}})
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			} else if resp.Status != http.StatusOK {
				t.Errorf("request %d: status %d", i, resp.Status)
			}
		})
	}
	wg.Wait()
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := New(Options{})
	require.Equal(t, 3*time.Second, c.dialTimeout)
	require.Equal(t, 10*time.Second, c.timeout)
	require.Equal(t, "poppyhost", c.userAgent)
	require.Equal(t, net.DefaultResolver, c.resolver)
	require.Nil(t, c.transport.Proxy)
	require.Equal(t, 5*time.Second, c.transport.TLSHandshakeTimeout)
	require.Equal(t, uint16(tls.VersionTLS12), c.transport.TLSClientConfig.MinVersion)
	require.Empty(t, c.transport.TLSClientConfig.ServerName)
	require.False(t, c.transport.TLSClientConfig.InsecureSkipVerify)
}
