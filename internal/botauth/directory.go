package botauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"golang.org/x/sync/singleflight"

	"github.com/poppyhost/poppyhost/internal/jose"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Fetcher fetches stranger URLs under the address rules of spec 3; it is
// *safehttp.Client outside tests.
type Fetcher interface {
	Get(ctx context.Context, req safehttp.Request) (*safehttp.Response, error)
}

// ErrUnavailable means a key directory could not be fetched.
var ErrUnavailable = errors.New("the key directory could not be fetched")

// DirectoryOptions tune the key directory cache. Zero values take the
// defaults in brackets.
type DirectoryOptions struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// FetchTimeout bounds one fetch [3s].
	FetchTimeout time.Duration
	// DefaultTTL applies without max-age; MinTTL and MaxTTL bound
	// Cache-Control [5m, 1m, 1h].
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// FailFor is how long a failed fetch is remembered, so that requests
	// naming a broken directory fail at once without refetching [30s].
	FailFor time.Duration
	// RefetchEvery bounds how often an unknown keyid refetches a
	// directory [30s].
	RefetchEvery time.Duration
	// MaxEntries caps the cache [10000].
	MaxEntries int
}

func (o *DirectoryOptions) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	set(&o.FetchTimeout, 3*time.Second)
	set(&o.DefaultTTL, 5*time.Minute)
	set(&o.MinTTL, time.Minute)
	set(&o.MaxTTL, time.Hour)
	set(&o.FailFor, 30*time.Second)
	set(&o.RefetchEvery, 30*time.Second)
	if o.MaxEntries == 0 {
		o.MaxEntries = 10000
	}
}

const (
	maxDirectoryBytes = 64 << 10
	maxKeys           = 20
)

// Directories fetches and caches key directories, keyed by URL, each as
// its keys by RFC 7638 thumbprint. Concurrent misses share one fetch.
type Directories struct {
	fetch Fetcher
	opts  DirectoryOptions
	sf    singleflight.Group
	mu    sync.Mutex
	m     map[string]*dirEntry
}

type dirEntry struct {
	keys    map[string]crypto.PublicKey
	err     error // a remembered failure, until expires
	fetched time.Time
	expires time.Time
}

// NewDirectories returns a cache fetching through f.
func NewDirectories(f Fetcher, opts DirectoryOptions) *Directories {
	opts.defaults()
	return &Directories{fetch: f, opts: opts, m: map[string]*dirEntry{}}
}

// Key returns the public key whose thumbprint is keyID in the directory
// at url. An unknown keyID refetches the directory at most once per
// RefetchEvery, so a new key is found without letting strangers make us
// fetch on every request.
func (d *Directories) Key(ctx context.Context, url, keyID string) (crypto.PublicKey, error) {
	now := d.opts.Now()
	e := d.get(url)
	if e == nil || !now.Before(e.expires) ||
		(e.err == nil && e.keys[keyID] == nil && now.Sub(e.fetched) >= d.opts.RefetchEvery) {
		v, _, _ := d.sf.Do(url, func() (any, error) { return d.load(ctx, url), nil })
		e = v.(*dirEntry)
	}
	if e.err != nil {
		return nil, e.err
	}
	if k := e.keys[keyID]; k != nil {
		return k, nil
	}
	return nil, invalid("keyid is not the thumbprint of a key in %s", url)
}

func (d *Directories) get(url string) *dirEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[url]
}

// load fetches url and caches the outcome: the keys for the response's
// max-age, or the failure for FailFor.
func (d *Directories) load(ctx context.Context, url string) *dirEntry {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.FetchTimeout)
	defer cancel()
	resp, err := d.fetch.Get(ctx, safehttp.Request{URL: url, MaxBytes: maxDirectoryBytes,
		Accept: []string{DirectoryMediaType, "application/jwk-set+json", "application/json"}})
	now := d.opts.Now()
	e := &dirEntry{fetched: now}
	if err != nil {
		e.err, e.expires = invalid("%v: %v", ErrUnavailable, err), now.Add(d.opts.FailFor)
	} else if e.keys, err = parseDirectory(resp.Body); err != nil {
		e.err, e.expires = err, now.Add(d.opts.FailFor)
	} else {
		e.expires = now.Add(d.ttl(resp.Header))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.m) >= d.opts.MaxEntries {
		d.m = map[string]*dirEntry{}
	}
	d.m[url] = e
	return e
}

// ttl reads max-age from Cache-Control within the bounds; no-store and
// no-cache mean the minimum.
func (d *Directories) ttl(h http.Header) time.Duration {
	ttl := d.opts.DefaultTTL
	for _, v := range strings.Split(h.Get("Cache-Control"), ",") {
		v = strings.TrimSpace(strings.ToLower(v))
		switch {
		case v == "no-store" || v == "no-cache":
			return d.opts.MinTTL
		case strings.HasPrefix(v, "max-age="):
			if n, err := strconv.Atoi(strings.TrimPrefix(v, "max-age=")); err == nil && n >= 0 {
				ttl = time.Duration(n) * time.Second
			}
		}
	}
	return min(max(ttl, d.opts.MinTTL), d.opts.MaxTTL)
}

// parseDirectory reads a JWK Set of public keys and indexes its keys by
// their RFC 7638 SHA-256 thumbprint, base64url without padding.
func parseDirectory(body []byte) (map[string]crypto.PublicKey, error) {
	var raw struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || raw.Keys == nil {
		return nil, invalid("the key directory is not a JWK Set")
	}
	if len(raw.Keys) > maxKeys {
		return nil, invalid("the key directory holds more than %d keys", maxKeys)
	}
	out := map[string]crypto.PublicKey{}
	for _, rk := range raw.Keys {
		if jose.HasPrivateMembers(rk) {
			return nil, invalid("the key directory holds private key members")
		}
		b, _ := json.Marshal(rk)
		k, err := jwk.ParseKey(b)
		if err != nil {
			continue // a key we cannot read is a key we do not use
		}
		tp, err := jose.Thumbprint(k)
		if err != nil {
			continue
		}
		var pub any
		if err := k.Raw(&pub); err != nil || !verifiable(pub) {
			continue
		}
		out[tp] = pub
	}
	return out, nil
}

// verifiable reports whether pub is a public key of an algorithm
// httpsig verifies (RFC 9421 §3.3): an X25519 key, a P-384 key or a
// symmetric key in a directory signs nothing we accept.
func verifiable(pub any) bool {
	switch k := pub.(type) {
	case ed25519.PublicKey, *rsa.PublicKey:
		return true
	case *ecdsa.PublicKey:
		return k.Curve == elliptic.P256()
	}
	return false
}

// Thumbprint returns the RFC 7638 SHA-256 thumbprint of a public key,
// base64url without padding: the keyid of Web Bot Auth signatures.
func Thumbprint(pub crypto.PublicKey) (string, error) {
	k, err := jwk.FromRaw(pub)
	if err != nil {
		return "", err
	}
	return jose.Thumbprint(k)
}
