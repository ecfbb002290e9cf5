package agentid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/poppyhost/poppyhost/internal/jose"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Fetcher fetches stranger URLs under the address rules of spec 3.
type Fetcher interface {
	Get(ctx context.Context, req safehttp.Request) (*safehttp.Response, error)
}

// ErrUnavailable wraps failures to fetch a document when no usable cached
// copy exists.
var ErrUnavailable = errors.New("could not fetch")

// ErrUnknownKey means the key set has no signing key with the kid asked for.
var ErrUnknownKey = errors.New("no such key in jwks_uri")

// Options tune fetching and the caches. Zero values take the defaults in
// brackets.
type Options struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// FetchTimeout bounds one fetch of a document or key set, which is how
	// long a request that needs it may wait [3s].
	FetchTimeout time.Duration
	// FailFor is how long a failed fetch is remembered: requests needing
	// that document meanwhile fail at once, from the stale copy if there
	// is one, without fetching [30s]. Each failure that follows doubles it,
	// up to FailForMax [10m]; a success forgets it, and so does a quiet
	// spell of FailForMax after the last remembered failure ran out.
	FailFor, FailForMax time.Duration
	// DefaultTTL applies when a response has no max-age [5m]; MinTTL and
	// MaxTTL bound what Cache-Control asks for [1m, 1h].
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// StaleFor is how long past expiry a cached copy still serves when
	// refetching fails for want of a 2xx answer [60s]: a short grace for a
	// hiccup, not a way for a withdrawn key to keep working.
	StaleFor time.Duration
	// RefetchEvery bounds how often an unknown kid may refetch a key set
	// [30s].
	RefetchEvery time.Duration
	// MaxEntries caps each cache [10000].
	MaxEntries int
	// Metrics, when set, is where the fetches' and lookups' metrics are
	// registered.
	Metrics prometheus.Registerer
}

func (o *Options) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	set(&o.DefaultTTL, 5*time.Minute)
	set(&o.MinTTL, time.Minute)
	set(&o.MaxTTL, time.Hour)
	set(&o.StaleFor, time.Minute)
	set(&o.RefetchEvery, 30*time.Second)
	set(&o.FetchTimeout, 3*time.Second)
	set(&o.FailFor, 30*time.Second)
	set(&o.FailForMax, 10*time.Minute)
	if o.MaxEntries == 0 {
		o.MaxEntries = 10000
	}
}

// Size limits of what we fetch.
const (
	maxMetadataBytes = 64 << 10
	maxJWKSBytes     = 64 << 10
	maxKeys          = 20
)

// Resolver fetches, validates and caches client metadata documents and key
// sets. Concurrent misses for one URL share one fetch, and failed fetches
// are remembered (Options.FailFor) so that a document that stalls or fails
// costs one fetch per backoff period, not one per request.
type Resolver struct {
	fetch Fetcher
	opts  Options
	sf    singleflight.Group
	docs  cache[*Client]
	keys  cache[jwk.Set]
	// failed holds the last failure of each fetch ("doc URL", "jwks URL")
	// until it may be tried again.
	failed cache[failure]
	// refetched holds when an unknown kid last refetched each key set, so
	// that failed refetches count against RefetchEvery too.
	refetchMu sync.Mutex
	refetched cache[struct{}]
	metrics   *metrics
}

// NewResolver returns a Resolver fetching through f.
func NewResolver(f Fetcher, opts Options) *Resolver {
	opts.defaults()
	return &Resolver{fetch: f, opts: opts,
		docs: cache[*Client]{max: opts.MaxEntries}, keys: cache[jwk.Set]{max: opts.MaxEntries},
		failed: cache[failure]{max: opts.MaxEntries}, refetched: cache[struct{}]{max: opts.MaxEntries},
		metrics: newMetrics(opts.Metrics)}
}

// Client returns the validated client metadata of clientID, a Personal
// Agent: a public client's document is refused.
func (r *Resolver) Client(ctx context.Context, clientID string) (*Client, error) {
	c, err := r.AnyClient(ctx, clientID)
	if err == nil && c.Public {
		return nil, invalid("the client metadata document is a public client's (token_endpoint_auth_method none), not a Personal Agent's (spec 4.1)")
	}
	return c, err
}

// AnyClient returns the validated client metadata of clientID: a Personal
// Agent's, or a public client's (Client.Public).
func (r *Resolver) AnyClient(ctx context.Context, clientID string) (*Client, error) {
	if err := CheckClientID(clientID); err != nil {
		return nil, err
	}
	now := r.opts.Now()
	if e, ok := r.docs.get(clientID); ok && now.Before(e.expires) {
		r.metrics.hits[docMetadata].Inc()
		return e.val, nil
	}
	r.metrics.misses[docMetadata].Inc()
	key := "doc " + clientID
	if err := r.failing(key, now); err != nil {
		return stale(r, &r.docs, clientID, now, err)
	}
	v, err, _ := r.sf.Do(key, func() (any, error) {
		// A flight that just ended may have failed.
		if err := r.failing(key, now); err != nil {
			return nil, err
		}
		c, ttl, err := remember(r, key, func() (*Client, time.Duration, error) {
			resp, err := r.get(ctx, clientID, maxMetadataBytes, "application/json")
			if err != nil {
				r.metrics.fetched(docMetadata, err)
				return nil, 0, err
			}
			c, err := parseMetadata(clientID, resp.Body)
			r.metrics.fetched(docMetadata, err)
			return c, r.ttl(resp.Header), err
		})
		if err != nil {
			return nil, err
		}
		r.docs.put(clientID, &entry[*Client]{val: c, fetched: now, expires: now.Add(ttl)})
		return c, nil
	})
	if err != nil {
		return stale(r, &r.docs, clientID, now, err)
	}
	return v.(*Client), nil
}

// Key returns the signing key named kid from c's key set. An unknown kid
// refetches the set, at most once per RefetchEvery, so a rotated key is
// found without letting strangers make us fetch on every request.
func (r *Resolver) Key(ctx context.Context, c *Client, kid string) (jwk.Key, error) {
	set, fetched, err := r.keySet(ctx, c.JWKSURI, false)
	if err != nil {
		return nil, err
	}
	if k, ok := signingKey(set, kid); ok {
		return k, nil
	}
	if now := r.opts.Now(); now.Sub(fetched) < r.opts.RefetchEvery || !r.mayRefetch(c.JWKSURI, now) {
		return nil, ErrUnknownKey
	}
	set, _, err = r.keySet(ctx, c.JWKSURI, true)
	if err != nil {
		return nil, err
	}
	if k, ok := signingKey(set, kid); ok {
		return k, nil
	}
	return nil, ErrUnknownKey
}

// mayRefetch records an unknown-kid refetch of uri at now, unless one was
// tried within RefetchEvery, whether or not it succeeded.
func (r *Resolver) mayRefetch(uri string, now time.Time) bool {
	r.refetchMu.Lock()
	defer r.refetchMu.Unlock()
	if e, ok := r.refetched.get(uri); ok && now.Sub(e.fetched) < r.opts.RefetchEvery {
		return false
	}
	r.refetched.put(uri, &entry[struct{}]{fetched: now})
	return true
}

func (r *Resolver) keySet(ctx context.Context, uri string, force bool) (jwk.Set, time.Time, error) {
	now := r.opts.Now()
	if e, ok := r.keys.get(uri); ok && !force && now.Before(e.expires) {
		r.metrics.hits[docJWKS].Inc()
		return e.val, e.fetched, nil
	}
	r.metrics.misses[docJWKS].Inc()
	key := "jwks " + uri
	if err := r.failing(key, now); err != nil {
		set, serr := stale(r, &r.keys, uri, now, err)
		return set, now, serr
	}
	v, err, _ := r.sf.Do(key, func() (any, error) {
		// A concurrent caller may just have refreshed it.
		if e, ok := r.keys.get(uri); ok && now.Sub(e.fetched) < time.Second {
			return e, nil
		}
		if err := r.failing(key, now); err != nil {
			return nil, err
		}
		set, ttl, err := remember(r, key, func() (jwk.Set, time.Duration, error) {
			resp, err := r.get(ctx, uri, maxJWKSBytes, "application/json", "application/jwk-set+json")
			if err != nil {
				r.metrics.fetched(docJWKS, err)
				return nil, 0, err
			}
			set, err := parseKeySet(resp.Body)
			r.metrics.fetched(docJWKS, err)
			return set, r.ttl(resp.Header), err
		})
		if err != nil {
			return nil, err
		}
		e := &entry[jwk.Set]{val: set, fetched: now, expires: now.Add(ttl)}
		r.keys.put(uri, e)
		return e, nil
	})
	if err != nil {
		set, serr := stale(r, &r.keys, uri, now, err)
		return set, now, serr
	}
	e := v.(*entry[jwk.Set])
	return e.val, e.fetched, nil
}

// failure is a failed fetch and how long it was remembered for.
type failure struct {
	err     error
	backoff time.Duration
}

// failing returns the remembered failure of the fetch key, or nil when it
// may be tried.
func (r *Resolver) failing(key string, now time.Time) error {
	if e, ok := r.failed.get(key); ok && now.Before(e.expires) {
		return e.val.err
	}
	return nil
}

// remember runs fetch and records its outcome for key: a success forgets
// earlier failures; a failure is remembered for FailFor, or for twice the
// last failure's period, at most FailForMax, when that one ran out less
// than FailForMax ago.
func remember[T any](r *Resolver, key string, fetch func() (T, time.Duration, error)) (T, time.Duration, error) {
	v, ttl, err := fetch()
	if err == nil {
		r.failed.delete(key)
		return v, ttl, nil
	}
	// The period starts when the fetch gave up, up to FetchTimeout after
	// it started.
	now := r.opts.Now()
	backoff := r.opts.FailFor
	if e, ok := r.failed.get(key); ok && now.Sub(e.expires) < r.opts.FailForMax {
		backoff = min(2*e.val.backoff, r.opts.FailForMax)
	}
	r.failed.put(key, &entry[failure]{val: failure{err: err, backoff: backoff}, fetched: now, expires: now.Add(backoff)})
	return v, 0, err
}

// get fetches a document with its own deadline, FetchTimeout, so that a
// fetch shared by several requests does not end with the first caller's
// context, and a stalling server holds none of them for long.
func (r *Resolver) get(ctx context.Context, url string, max int64, accept ...string) (*safehttp.Response, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.FetchTimeout)
	defer cancel()
	resp, err := r.fetch.Get(ctx, safehttp.Request{URL: url, Accept: accept, MaxBytes: max})
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrUnavailable, url, err)
	}
	return resp, nil
}

// stale serves a cached copy past its expiry, within StaleFor, when a
// refetch failed for want of a response; a document that was fetched but
// is now invalid is not covered for.
func stale[T any](r *Resolver, c *cache[T], key string, now time.Time, err error) (T, error) {
	var zero T
	if !errors.Is(err, ErrUnavailable) {
		return zero, err
	}
	if e, ok := c.get(key); ok && now.Before(e.expires.Add(r.opts.StaleFor)) {
		return e.val, nil
	}
	return zero, err
}

// ttl reads max-age from Cache-Control, within the configured bounds;
// no-store and no-cache win over max-age in any order.
func (r *Resolver) ttl(h http.Header) time.Duration {
	ttl, noStore := r.opts.DefaultTTL, false
	for _, d := range strings.Split(h.Get("Cache-Control"), ",") {
		d = strings.TrimSpace(strings.ToLower(d))
		switch {
		case d == "no-store" || d == "no-cache":
			noStore = true
		case strings.HasPrefix(d, "max-age="):
			if n, err := strconv.Atoi(strings.TrimPrefix(d, "max-age=")); err == nil && n >= 0 {
				ttl = time.Duration(n) * time.Second
			}
		}
	}
	if noStore {
		ttl = 0
	}
	return min(max(ttl, r.opts.MinTTL), r.opts.MaxTTL)
}

// publicMembers are the members RFC 7517 and RFC 7518 define for a
// public key; parseKeySet keeps only these.
var publicMembers = map[string]bool{
	"kty": true, "use": true, "key_ops": true, "alg": true, "kid": true,
	"x5u": true, "x5c": true, "x5t": true, "x5t#S256": true,
	"crv": true, "x": true, "y": true, "n": true, "e": true,
}

// parseKeySet parses a JWK Set, refusing one with private key members.
func parseKeySet(body []byte) (jwk.Set, error) {
	var raw struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || raw.Keys == nil {
		return nil, invalid("jwks_uri did not return a JWK Set")
	}
	if len(raw.Keys) > maxKeys {
		return nil, invalid("the key set holds more than %d keys", maxKeys)
	}
	for _, k := range raw.Keys {
		if jose.HasPrivateMembers(k) {
			return nil, errPrivateKey
		}
		// Members a public JWK does not define are ignored (spec 3.3) and
		// left out of the key we keep: jwx would write their names back
		// unescaped, so a name holding a control character would make the
		// kept key unserializable.
		for m := range k {
			if !publicMembers[m] {
				delete(k, m)
			}
		}
	}
	clean, err := json.Marshal(raw)
	if err != nil {
		return nil, invalid("jwks_uri returned a malformed key set")
	}
	set, err := jwk.Parse(clean)
	if err != nil {
		return nil, invalid("jwks_uri returned a malformed key set")
	}
	return set, nil
}

// signingKey finds kid among the keys meant for signatures; keys without
// "use" count as signing keys.
func signingKey(set jwk.Set, kid string) (jwk.Key, bool) {
	k, ok := set.LookupKeyID(kid)
	if !ok {
		return nil, false
	}
	if u := string(k.KeyUsage()); u != "" && u != "sig" {
		return nil, false
	}
	return k, true
}

type entry[T any] struct {
	val     T
	fetched time.Time
	expires time.Time
}

// cache is a bounded map; when full it drops everything, which only costs
// refetches.
type cache[T any] struct {
	mu  sync.Mutex
	m   map[string]*entry[T]
	max int
}

func (c *cache[T]) get(k string) (*entry[T], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	return e, ok
}

func (c *cache[T]) delete(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

func (c *cache[T]) put(k string, e *entry[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[string]*entry[T])
	}
	c.m[k] = e
}
