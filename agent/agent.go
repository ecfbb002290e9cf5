package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure an Agent. Host and TLS are required.
type Options struct {
	// Name is the client_name in the client metadata document.
	Name string
	// Host is the host name in the agent's own URLs: client_id, jwks_uri
	// and redirect_uris are https://{Host}:{port}/...
	Host string
	// Listener is where the agent serves its documents; nil listens on
	// 127.0.0.1 on a free port.
	Listener net.Listener
	// TLS serves the agent's documents; it must hold a certificate for Host.
	TLS *tls.Config
	// CAPEM holds the certificates, PEM encoded, that the agent and its
	// browser trust besides the system's roots (a dev CA).
	CAPEM []byte
	// HostMap sends connections for a host name to another address, keeping
	// the port unless it names one (for example "stormline.test" ->
	// "127.0.0.1" or "127.0.0.1:8443"). It applies to the agent's HTTP
	// client and to its browser.
	HostMap map[string]string
	// AllowPrivate lets the agent connect to loopback, private and
	// link-local addresses for URLs a Company gave it. Spec 3 forbids that
	// unless configured on purpose: tests and local demos do.
	AllowPrivate bool
	// Chromium is the browser binary; empty uses POPPYHOST_CHROMIUM, then
	// chromium or chromium-browser on PATH.
	Chromium string
	// Recorder keeps the transcript; nil makes a new one.
	Recorder *Recorder
	// NoOperations leaves the Operations extension undeclared.
	NoOperations bool
	// NoDPoP sends no DPoP proofs, so the agent gets Bearer tokens where
	// the Company allows them (spec 4.5).
	NoDPoP bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Agent is one Personal Agent acting for one User: it holds the User's
// User IDs, sign-ins and Sessions at each Company it works with.
type Agent struct {
	opts     Options
	key      *ecdsa.PrivateKey // signs client assertions and delegations
	dpopKey  *ecdsa.PrivateKey // signs DPoP proofs (spec 4.5)
	kid      string
	bot      *botKey // signs Web Bot Auth signatures (spec 5.3)
	base     string  // https://{Host}:{port}
	server   *http.Server
	ln       net.Listener
	client   *http.Client // protocol requests: never follows redirects
	roots    *x509.CertPool
	Recorder *Recorder

	mu        sync.Mutex
	callbacks map[string]chan url.Values // Direct Sign-In state -> redirect query
	users     map[string]string          // Company identifier -> User ID
	keys      map[string]*delegatedKey   // User ID -> delegated key
	nonces    map[string]string          // origin -> its latest DPoP server nonce
	browser   *Browser
}

// New starts the agent's HTTPS server for its client metadata document,
// key set and sign-in callback. Close stops it.
func New(opts Options) (*Agent, error) {
	if opts.Host == "" || opts.TLS == nil {
		return nil, errors.New("agent: Options.Host and Options.TLS are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Name == "" {
		opts.Name = "Poppy reference agent"
	}
	rec := opts.Recorder
	if rec == nil {
		rec = NewRecorder()
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	dpopKey, err := newKey()
	if err != nil {
		return nil, err
	}
	bot, err := newBotKey()
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if len(opts.CAPEM) > 0 && !roots.AppendCertsFromPEM(opts.CAPEM) {
		return nil, errors.New("agent: Options.CAPEM holds no certificate")
	}
	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	a := &Agent{
		opts:      opts,
		key:       key,
		dpopKey:   dpopKey,
		kid:       thumbprint(&key.PublicKey),
		bot:       bot,
		base:      "https://" + net.JoinHostPort(opts.Host, port),
		ln:        ln,
		roots:     roots,
		Recorder:  rec,
		callbacks: map[string]chan url.Values{},
		users:     map[string]string{},
		keys:      map[string]*delegatedKey{},
		nonces:    map[string]string{},
	}
	if port == "443" {
		a.base = "https://" + opts.Host
	}
	a.client = &http.Client{
		Transport: rec.wrap(a.transport()),
		// Spec 3: outside discovery a redirect never carries secrets, so
		// protocol requests stop at a redirect; discovery follows its own.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       2 * time.Minute,
	}
	a.server = &http.Server{
		Handler:           a.routes(),
		TLSConfig:         opts.TLS,
		ReadHeaderTimeout: 10 * time.Second,
	}
	go a.server.ServeTLS(ln, "", "") //nolint:errcheck // ends with Close
	return a, nil
}

// transport dials with the host map and refuses private addresses unless
// allowed (spec 3, "Redirects and addresses").
func (a *Agent) transport() *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if !a.opts.AllowPrivate {
		dialer.Control = refusePrivate
	}
	return &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: a.roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if h := strings.ToLower(host); h == "localhost" || strings.HasSuffix(h, ".localhost") {
				addr = net.JoinHostPort("127.0.0.1", port) // RFC 6761 §6.3
			}
			if to, ok := a.opts.HostMap[host]; ok {
				addr = net.JoinHostPort(to, port)
				if _, _, err := net.SplitHostPort(to); err == nil {
					addr = to // the map names the port too
				}
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}
}

// refusePrivate is a dialer Control that refuses loopback, private,
// link-local and unspecified addresses.
func refusePrivate(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("agent: refusing to connect to %s (spec 3: no private addresses)", host)
	}
	return nil
}

// ClientID is the agent's client_id: the URL of its metadata document.
func (a *Agent) ClientID() string { return a.base + "/agent.json" }

// JWKSURI is the URL of the agent's public key set.
func (a *Agent) JWKSURI() string { return a.base + "/jwks.json" }

// RedirectURI is where Direct Sign-In brings the User back.
func (a *Agent) RedirectURI() string { return a.base + "/oauth/callback" }

// Close stops the agent's server and browser.
func (a *Agent) Close() error {
	a.mu.Lock()
	b := a.browser
	a.browser = nil
	a.mu.Unlock()
	if b != nil {
		b.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.server.Shutdown(ctx)
}

// now is the agent's clock in Unix seconds.
func (a *Agent) now() int64 { return a.opts.Now().Unix() }

// userID returns the User's User ID for a Company identifier, making a
// random one the first time (spec 5.1: opaque, pairwise, stable).
func (a *Agent) userID(company string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.users[company]
	if !ok {
		id = "usr_" + randomID(12)
		a.users[company] = id
	}
	return id
}

// retryAfter reads a Retry-After header in seconds, defaulting to def.
func retryAfter(h http.Header, def time.Duration) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h.Get("Retry-After")); err == nil {
		return time.Until(t)
	}
	return def
}
