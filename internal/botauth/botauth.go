package botauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/poppyhost/poppyhost/internal/httpsig"
)

// Tag is the tag parameter of Web Bot Auth signatures.
const Tag = "web-bot-auth"

// DirectoryPath is where an operator publishes its key directory.
const DirectoryPath = "/.well-known/http-message-signatures-directory"

// DirectoryMediaType is the key directory's media type.
const DirectoryMediaType = "application/http-message-signatures-directory+json"

// Operator is the verified signer of a request.
type Operator struct {
	// Host is the operator's host, the key directory's authority.
	Host string
	// Directory is the key directory's URL.
	Directory string
	// KeyID is the thumbprint of the key that signed.
	KeyID string
}

// ErrInvalid wraps every reason a Web Bot Auth signature is refused.
var ErrInvalid = errors.New("invalid Web Bot Auth signature")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Options tune a Verifier. Zero values take the defaults in brackets.
type Options struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// MaxLifetime bounds expires - created [5m]; Skew is the clock skew
	// allowed on both [30s].
	MaxLifetime, Skew time.Duration
	// Directories tunes the key directory cache.
	Directories DirectoryOptions
}

func (o *Options) defaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxLifetime == 0 {
		o.MaxLifetime = 5 * time.Minute
	}
	if o.Skew == 0 {
		o.Skew = 30 * time.Second
	}
	if o.Directories.Now == nil {
		o.Directories.Now = o.Now
	}
}

// Verifier verifies Web Bot Auth signatures. It is safe for concurrent
// use.
type Verifier struct {
	opts   Options
	dirs   *Directories
	nonces nonceCache
}

// NewVerifier returns a Verifier fetching key directories through f.
func NewVerifier(f Fetcher, opts Options) *Verifier {
	opts.defaults()
	return &Verifier{opts: opts, dirs: NewDirectories(f, opts.Directories), nonces: nonceCache{max: 100000}}
}

// Signed reports whether r carries HTTP message signature fields at all.
func Signed(r *http.Request) bool {
	return r.Header.Get("Signature-Input") != "" || r.Header.Get("Signature") != ""
}

// Verify checks the Web Bot Auth signature of r, received at its public
// https origin. It returns nil and no error when r carries no signature
// tagged web-bot-auth, the verified Operator when one verifies, and an
// ErrInvalid error otherwise.
func (v *Verifier) Verify(ctx context.Context, r *http.Request) (*Operator, error) {
	sigs, err := httpsig.Parse(r.Header)
	if err != nil {
		return nil, invalid("%v", err)
	}
	var sig *httpsig.Signature
	for i := range sigs {
		if tag, _ := sigs[i].StringParam("tag"); tag == Tag {
			if sig != nil {
				return nil, invalid("more than one signature is tagged %s", Tag)
			}
			sig = &sigs[i]
		}
	}
	if sig == nil {
		if len(sigs) > 0 {
			return nil, invalid("no signature is tagged %s", Tag)
		}
		return nil, nil
	}
	now := v.opts.Now()
	created, ok1 := sig.TimeParam("created")
	expires, ok2 := sig.TimeParam("expires")
	switch {
	case !ok1 || !ok2:
		return nil, invalid("created and expires are required")
	case created.After(now.Add(v.opts.Skew)):
		return nil, invalid("created is in the future")
	case !expires.After(now.Add(-v.opts.Skew)):
		return nil, invalid("the signature has expired")
	case !expires.After(created) || expires.Sub(created) > v.opts.MaxLifetime:
		return nil, invalid("expires must follow created by at most %s", v.opts.MaxLifetime)
	}
	keyID, ok := sig.StringParam("keyid")
	if !ok || keyID == "" {
		return nil, invalid("keyid is required")
	}
	if !sig.Covers("@authority") {
		return nil, invalid("the signature must cover @authority")
	}
	dirURL, err := signatureAgent(r.Header, sig)
	if err != nil {
		return nil, err
	}
	key, err := v.dirs.Key(ctx, dirURL, keyID)
	if err != nil {
		return nil, err
	}
	if err := httpsig.Verify(httpsig.FromRequest(r), sig, key); err != nil {
		return nil, invalid("%v", err)
	}
	if nonce, ok := sig.StringParam("nonce"); ok {
		// Remembered until the signature can no longer be accepted.
		if !v.nonces.add(dirURL+" "+keyID+" "+nonce, expires.Add(v.opts.Skew), now) {
			return nil, invalid("the nonce was already used")
		}
	}
	u, _ := url.Parse(dirURL)
	return &Operator{Host: u.Host, Directory: dirURL, KeyID: keyID}, nil
}

// signatureAgent reads the Signature-Agent header, which must be covered,
// as an sf-string or as a Dictionary member named by the signature's
// label, and returns the key directory URL it names.
func signatureAgent(h http.Header, sig *httpsig.Signature) (string, error) {
	lines := h.Values("Signature-Agent")
	if len(lines) == 0 {
		return "", invalid("the Signature-Agent header is required to find the key directory")
	}
	if !sig.Covers("signature-agent") {
		return "", invalid("the signature must cover signature-agent")
	}
	var raw string
	if it, err := httpsfv.UnmarshalItem(lines); err == nil {
		raw, _ = it.Value.(string)
	} else if d, err := httpsfv.UnmarshalDictionary(lines); err == nil {
		if m, ok := d.Get(sig.Label); ok {
			if it, ok := m.(httpsfv.Item); ok {
				raw, _ = it.Value.(string)
			}
		}
	}
	u, err := url.Parse(raw)
	if raw == "" || err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return "", invalid("Signature-Agent must name an https URL")
	}
	if u.Path != "" && u.Path != "/" && u.Path != DirectoryPath {
		return "", invalid("Signature-Agent must name an origin or its %s", DirectoryPath)
	}
	return "https://" + strings.ToLower(u.Host) + DirectoryPath, nil
}

// nonceCache remembers nonces until they expire; when full it forgets
// those that expired, and refuses new ones if none did, so a flood cannot
// make it forget live nonces.
type nonceCache struct {
	mu  sync.Mutex
	m   map[string]time.Time
	max int
}

func (c *nonceCache) add(k string, until, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	if t, ok := c.m[k]; ok && now.Before(t) {
		return false
	}
	if len(c.m) >= c.max {
		for n, t := range c.m {
			if !now.Before(t) {
				delete(c.m, n)
			}
		}
		if len(c.m) >= c.max {
			return false
		}
	}
	c.m[k] = until
	return true
}
