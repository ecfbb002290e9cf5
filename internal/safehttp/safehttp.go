package safehttp

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Errors returned by Get, wrapped with context; test with errors.Is.
var (
	// ErrNotHTTPS: the URL, or a redirect's target, is not an absolute
	// https URL with a host and without user info (spec 3 "HTTPS").
	ErrNotHTTPS = errors.New("safehttp: not an absolute https URL")
	// ErrBlockedAddress: the host is, or resolves to, an address that is
	// not public (spec 3 "Redirects and addresses").
	ErrBlockedAddress = errors.New("safehttp: address not allowed")
	// ErrRedirect: a 3xx response when redirects are not followed (CIMD
	// §5), a 3xx that could not be followed, or too many redirects.
	ErrRedirect = errors.New("safehttp: redirect not allowed")
	// ErrTooLarge: the body is larger than Request.MaxBytes.
	ErrTooLarge = errors.New("safehttp: response body too large")
	// ErrContentType: the Content-Type is not one of Request.Accept.
	ErrContentType = errors.New("safehttp: unexpected content type")
	// ErrStatus: a status outside 2xx (3xx is ErrRedirect).
	ErrStatus = errors.New("safehttp: unexpected status")
)

const (
	defaultDialTimeout = 3 * time.Second
	defaultTimeout     = 10 * time.Second
	defaultUserAgent   = "poppyhost"
	defaultMaxBytes    = 1 << 20
	tlsHandshakeTime   = 5 * time.Second
	maxRedirects       = 5
)

// Resolver looks up host names; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configures a Client. Zero values mean the defaults.
type Options struct {
	// AllowPrivate lets fetches reach loopback, private, link-local and
	// other non-public addresses (POPPYHOST_ALLOW_PRIVATE_FETCH). For
	// development and tests only.
	AllowPrivate bool
	// RootCAs verifies servers; nil means the system roots.
	RootCAs *x509.CertPool
	// Resolver looks up host names; nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds name resolution plus TCP connect; default 3s. The
	// TLS handshake has its own 5s budget.
	DialTimeout time.Duration
	// Timeout bounds a whole Get, redirects and body read included;
	// default 10s.
	Timeout time.Duration
	// UserAgent is sent on every request; default "poppyhost".
	UserAgent string
	// MaxIdleConnsPerHost keeps this many idle connections to each host;
	// default 4. The gateway, which calls few hosts often, keeps more.
	MaxIdleConnsPerHost int
}

// Client fetches stranger-supplied https URLs. It is safe for concurrent
// use; make one with New and share it.
type Client struct {
	transport   *http.Transport
	dialer      *net.Dialer
	resolver    Resolver
	dialTimeout time.Duration
	timeout     time.Duration
	userAgent   string
	// blocked says which addresses may not be dialled; nil allows all
	// (AllowPrivate). Tests may swap it to reach their loopback server.
	blocked func(netip.Addr) bool
}

// New returns a Client with its own connection pool.
func New(opts Options) *Client {
	c := &Client{
		resolver:    opts.Resolver,
		dialTimeout: opts.DialTimeout,
		timeout:     opts.Timeout,
		userAgent:   opts.UserAgent,
	}
	if c.resolver == nil {
		c.resolver = net.DefaultResolver
	}
	if c.dialTimeout <= 0 {
		c.dialTimeout = defaultDialTimeout
	}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	if c.userAgent == "" {
		c.userAgent = defaultUserAgent
	}
	c.dialer = &net.Dialer{KeepAlive: 30 * time.Second}
	if !opts.AllowPrivate {
		c.blocked = blockedAddr
		c.dialer.Control = c.control
	}
	c.transport = &http.Transport{
		// Never a proxy from the environment: the address check must be
		// on the server we talk to.
		Proxy:       nil,
		DialContext: c.dialContext,
		// The transport sets ServerName to the URL's host for each
		// connection (SNI and verification).
		TLSClientConfig: &tls.Config{
			RootCAs:    opts.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		TLSHandshakeTimeout:    tlsHandshakeTime,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    cmp.Or(opts.MaxIdleConnsPerHost, 4),
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		HTTP2:                  &http.HTTP2Config{MaxEncoderHeaderTableSize: headerTableLimit},
	}
	return c
}

// headerTableLimit bounds the HPACK dynamic table the transport's HTTP/2
// encoder uses (RFC 7541 §4.2). Go's encoder indexes every field that
// fits, and the credentials sent to origins are new on every request
// (Poppy-Verified: about 0.7 KB); indexed, each would push the static
// fields out of a 4 KiB table and be evicted unused a few requests later,
// costing map inserts and deletes over the whole value (issue 19). No
// per-request credential fits in 512 bytes (Poppy-Verified's header and
// signature alone take about 200), so those go as literals without
// indexing and the host, user agent, accept and content type fields stay
// indexed.
const headerTableLimit = 512

// Request is one GET.
type Request struct {
	// URL must be an absolute https URL with a host and no user info.
	URL string
	// Accept lists acceptable media types of the response, such as
	// "application/json", matched on type/subtype ignoring parameters
	// ("type/*" and "*/*" work too); empty accepts any.
	Accept []string
	// MaxBytes caps the response body; 0 means 1 MiB.
	MaxBytes int64
	// FollowRedirects follows up to 5 redirects, each to an https URL that
	// passes the address check. When false any 3xx is ErrRedirect (CIMD
	// §5: client metadata documents are fetched without following).
	FollowRedirects bool
}

// Response is a successful (2xx) response with its whole body.
type Response struct {
	URL    string // final URL after redirects
	Status int
	Header http.Header
	Body   []byte
}

// Get fetches req.URL with a plain GET that carries only Accept and
// User-Agent: no Authorization, no cookies (there is no jar), no Referer,
// so nothing secret can follow a redirect (spec 3). It fails on anything
// but a 2xx response whose type and size match req.
func (c *Client) Get(ctx context.Context, req Request) (*Response, error) {
	u, err := target(http.MethodGet, req.URL)
	if err != nil {
		return nil, err
	}
	limit := req.MaxBytes
	if limit <= 0 {
		limit = defaultMaxBytes
	}
	accept := parseAccept(req.Accept)

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	header := http.Header{"User-Agent": {c.userAgent}, "Accept": {"*/*"}}
	if len(req.Accept) > 0 {
		header.Set("Accept", strings.Join(req.Accept, ", "))
	}
	hreq.Header = header.Clone()

	hc := &http.Client{
		Transport: c.transport,
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if !req.FollowRedirects {
				return http.ErrUseLastResponse
			}
			if len(via) > maxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrRedirect, maxRedirects)
			}
			if err := checkURL(next.URL); err != nil {
				return fmt.Errorf("redirect to %s: %w", redact(next.URL), err)
			}
			// net/http copied our headers and added a Referer, which
			// would tell the next host the previous URL, query included.
			next.Header = header.Clone()
			return nil
		},
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		// Our message names the URL without its query, unlike url.Error.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	defer resp.Body.Close()

	final := resp.Request.URL
	fail := func(err error) (*Response, error) {
		return nil, fmt.Errorf("GET %s: %w", redact(final), err)
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fail(fmt.Errorf("%w: status %d", ErrRedirect, resp.StatusCode))
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		return fail(fmt.Errorf("%w: %d", ErrStatus, resp.StatusCode))
	}
	if err := checkContentType(resp.Header.Get("Content-Type"), accept); err != nil {
		return fail(err)
	}
	if resp.ContentLength > limit {
		return fail(fmt.Errorf("%w: Content-Length %d exceeds %d bytes", ErrTooLarge, resp.ContentLength, limit))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fail(fmt.Errorf("read body: %w", err))
	}
	if int64(len(body)) > limit {
		return fail(fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit))
	}
	return &Response{
		URL:    final.String(),
		Status: resp.StatusCode,
		Header: resp.Header,
		Body:   body,
	}, nil
}

// checkURL enforces spec 3 "HTTPS" on a URL we are about to request.
func checkURL(u *url.URL) error {
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("%w: scheme %q", ErrNotHTTPS, u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Errorf("%w: no host", ErrNotHTTPS)
	case u.User != nil:
		return fmt.Errorf("%w: user info not allowed", ErrNotHTTPS)
	}
	return nil
}

// redact renders u for error messages: no user info, query or fragment,
// which may carry something the URL's owner meant only for us.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// parseAccept reduces media types to lower-case type/subtype.
func parseAccept(accept []string) []string {
	out := make([]string, 0, len(accept))
	for _, a := range accept {
		out = append(out, mediaType(a))
	}
	return out
}

// mediaType returns the lower-case type/subtype of a Content-Type value,
// ignoring parameters, or "" when it has none.
func mediaType(v string) string {
	v, _, _ = strings.Cut(v, ";")
	v = strings.ToLower(strings.TrimSpace(v))
	typ, sub, ok := strings.Cut(v, "/")
	if !ok || typ == "" || sub == "" || strings.ContainsAny(sub, "/ \t") {
		return ""
	}
	return v
}

// checkContentType matches the response's Content-Type against accept.
func checkContentType(contentType string, accept []string) error {
	if len(accept) == 0 {
		return nil
	}
	got := mediaType(contentType)
	if got != "" {
		typ, _, _ := strings.Cut(got, "/")
		for _, want := range accept {
			if want == got || want == "*/*" || want == typ+"/*" {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %q, want %s", ErrContentType, contentType, strings.Join(accept, " or "))
}

// target parses and checks the URL a request is sent to.
func target(method, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error would repeat the whole URL, query and password too.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %w", ErrNotHTTPS, err)
	}
	if err := checkURL(u); err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, redact(u), err)
	}
	return u, nil
}
