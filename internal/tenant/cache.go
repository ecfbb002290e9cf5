package tenant

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/notify"
)

// ChangedChannel is the notification a committed change to a Company's row
// sends, with the Company's ID (a trigger, migration 00022).
const ChangedChannel = "poppy_company_changed"

// CacheOptions tune a Cache; zero values take the defaults.
type CacheOptions struct {
	// TTL bounds how long a Company is used without reading it again, in
	// case a notification were lost while the listener still looked
	// connected [1m].
	TTL time.Duration
	// MaxEntries bounds the entries of each index (slug, domain) [10000].
	MaxEntries int
	// Now is the clock [time.Now].
	Now func() time.Time
	// Metrics, when set, gets poppyhost_company_cache_lookups_total.
	Metrics prometheus.Registerer
}

// Cache is a Lookup that keeps the Companies it read, decoded, so a
// request costs no query and no settings decoding (notify.Cache). A change
// made on this replica drops the Company at once (Store.Modify,
// Store.Delete); one made on another arrives by notification. The
// *Company it returns is shared: callers must not change it, as none does.
type Cache struct {
	store    *Store
	bySlug   *notify.Cache[string, *Company]
	byDomain *notify.Cache[string, *Company]
	count    func(notify.Result)
}

// NewCache returns a Cache over store, kept fresh by l's notifications.
// Call it before l starts.
func NewCache(store *Store, l *notify.Listener, opts CacheOptions) (*Cache, error) {
	copts := notify.CacheOptions{TTL: opts.TTL, MaxEntries: opts.MaxEntries, Now: opts.Now}
	c := &Cache{store: store,
		bySlug:   notify.NewCache[string, *Company](l, copts),
		byDomain: notify.NewCache[string, *Company](l, copts),
	}
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_company_cache_lookups_total",
		Help: "Company lookups by slug or domain, by result: hit (from the cache), miss (read and kept), bypass (read, not kept: the notification listener was not connected).",
	}, []string{"result"})
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(lookups); err != nil {
			return nil, err
		}
	}
	c.count = notify.ResultCounter(lookups)
	l.Handle(ChangedChannel, c.changed)
	store.mu.Lock()
	store.changed = append(store.changed, c.forget)
	store.mu.Unlock()
	return c, nil
}

// Get returns the Company with slug.
func (c *Cache) Get(ctx context.Context, slug string) (*Company, error) {
	co, res, err := c.bySlug.Get(slug, func() (*Company, error) { return c.store.Get(ctx, slug) })
	return c.counted(co, res, err)
}

// GetByDomain returns the Company that domain belongs to.
func (c *Cache) GetByDomain(ctx context.Context, domain string) (*Company, error) {
	co, res, err := c.byDomain.Get(domain, func() (*Company, error) { return c.store.GetByDomain(ctx, domain) })
	return c.counted(co, res, err)
}

func (c *Cache) counted(co *Company, res notify.Result, err error) (*Company, error) {
	if err != nil {
		return nil, err
	}
	c.count(res)
	return co, nil
}

// changed handles a notification: the Company it names is dropped, or
// everything when the payload is not an ID.
func (c *Cache) changed(payload string) {
	id, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		c.bySlug.Clear()
		c.byDomain.Clear()
		return
	}
	c.forget(id)
}

// forget drops a Company from both indexes.
func (c *Cache) forget(companyID int64) {
	match := func(_ string, co *Company) bool { return co.ID == companyID }
	c.bySlug.Forget(match)
	c.byDomain.Forget(match)
}
