package notify

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Result says where a Cache lookup's value came from.
type Result string

// Results of Cache.Get.
const (
	Hit    Result = "hit"    // from the cache
	Miss   Result = "miss"   // loaded and kept
	Bypass Result = "bypass" // loaded and not kept: the Listener is not connected
)

// CacheOptions tune a Cache; zero values take the defaults.
type CacheOptions struct {
	// TTL bounds how long an entry is used without loading it again, in
	// case a notification were lost while the Listener still looked
	// connected [1m].
	TTL time.Duration
	// MaxEntries bounds the entries [10000]; when full, expired entries
	// go, then everything.
	MaxEntries int
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Cache is a map of loaded values that notifications keep fresh: its
// owner registers handlers on the Listener that Forget or Delete what a
// notification says changed. While the Listener is not connected nothing
// is served from the Cache or kept in it, and each (re)connection empties
// it, so no change is missed for longer than a notification's delivery.
// A load that raced an invalidation is not kept.
type Cache[K comparable, V any] struct {
	l    *Listener
	opts CacheOptions

	mu  sync.Mutex
	gen uint64 // counts invalidations
	m   map[K]cacheEntry[V]
}

type cacheEntry[V any] struct {
	v     V
	until time.Time
}

// NewCache returns a Cache emptied whenever l (re)connects. Call it before
// l starts.
func NewCache[K comparable, V any](l *Listener, opts CacheOptions) *Cache[K, V] {
	if opts.TTL <= 0 {
		opts.TTL = time.Minute
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 10_000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cache[K, V]{l: l, opts: opts, m: map[K]cacheEntry[V]{}}
	l.OnConnect(c.Clear)
	return c
}

// Get returns the value of key, loading it when the Cache does not hold
// it (fresh), and where it came from. Errors are load's, and not kept.
func (c *Cache[K, V]) Get(key K, load func() (V, error)) (V, Result, error) {
	if !c.l.Connected() {
		v, err := load()
		return v, Bypass, err
	}
	now := c.opts.Now()
	c.mu.Lock()
	e, ok := c.m[key]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.v, Hit, nil
	}
	v, err := load()
	if err != nil {
		return v, Miss, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A change since the load began may not be in what it loaded.
	if c.gen == gen && c.l.Connected() {
		if len(c.m) >= c.opts.MaxEntries {
			for k, e := range c.m {
				if !now.Before(e.until) {
					delete(c.m, k)
				}
			}
			if len(c.m) >= c.opts.MaxEntries {
				clear(c.m)
			}
		}
		c.m[key] = cacheEntry[V]{v: v, until: now.Add(c.opts.TTL)}
	}
	return v, Miss, nil
}

// Delete drops key.
func (c *Cache[K, V]) Delete(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, key)
}

// Forget drops every entry match reports.
func (c *Cache[K, V]) Forget(match func(K, V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.m {
		if match(k, e.v) {
			delete(c.m, k)
		}
	}
}

// Clear drops everything.
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.m)
}

// ResultCounter counts Cache results on vec, a counter vector with one
// label, result; its counters are resolved once, not on every lookup.
func ResultCounter(vec *prometheus.CounterVec) func(Result) {
	counters := map[Result]prometheus.Counter{}
	for _, r := range []Result{Hit, Miss, Bypass} {
		counters[r] = vec.WithLabelValues(string(r))
	}
	return func(r Result) { counters[r].Inc() }
}
