package tenant_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// replica is what one server process has of the Company cache: its own
// Store, listener and Cache on the shared database.
type replica struct {
	store *tenant.Store
	cache *tenant.Cache
	reg   *prometheus.Registry
	stop  func()
	l     *notify.Listener
}

func newReplica(t *testing.T, pool *pgxpool.Pool, opts tenant.CacheOptions) *replica {
	t.Helper()
	r := &replica{store: tenant.NewStore(pool), reg: prometheus.NewRegistry(), l: notify.New(pool, nil)}
	opts.Metrics = r.reg
	var err error
	r.cache, err = tenant.NewCache(r.store, r.l, opts)
	require.NoError(t, err)
	r.stop = r.l.Start(context.Background())
	t.Cleanup(func() { r.stop() })
	require.Eventually(t, r.l.Connected, 10*time.Second, 10*time.Millisecond)
	return r
}

// lookups is how many lookups had result so far.
func (r *replica) lookups(t *testing.T, result string) int {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "poppyhost_company_cache_lookups_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

func storeCompany(t *testing.T, s *tenant.Store, slug, domain string) *tenant.Company {
	t.Helper()
	set := tenant.DefaultSettings()
	set.Organization = tenant.Organization{Name: "Company " + slug, Domain: domain}
	c, err := s.Create(context.Background(), slug, set)
	require.NoError(t, err)
	return c
}

func rename(t *testing.T, s *tenant.Store, id int64, name string) {
	t.Helper()
	_, err := s.Modify(context.Background(), id, func(c *tenant.Company) (tenant.Settings, error) {
		set := c.Settings
		set.Organization.Name = name
		return set, nil
	})
	require.NoError(t, err)
}

// TestCacheAcrossReplicas: a replica serves a Company from its cache, and a
// change made on another replica reaches it by notification (its next
// lookups see the new settings, within the wait below, without waiting for
// the TTL); the replica that made the change sees it at once.
func TestCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	a := newReplica(t, pool, tenant.CacheOptions{TTL: time.Hour})
	b := newReplica(t, pool, tenant.CacheOptions{TTL: time.Hour})
	c := storeCompany(t, a.store, "acme", "acme.example")

	for range 3 {
		got, err := b.cache.Get(ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, "Company acme", got.Settings.Organization.Name)
		got, err = b.cache.GetByDomain(ctx, "acme.example")
		require.NoError(t, err)
		require.Equal(t, c.ID, got.ID)
	}
	require.Equal(t, 2, b.lookups(t, "miss"))
	require.Equal(t, 4, b.lookups(t, "hit"), "served from the cache")
	_, err := a.cache.Get(ctx, "acme")
	require.NoError(t, err)

	rename(t, a.store, c.ID, "Acme Renamed")
	got, err := a.cache.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, "Acme Renamed", got.Settings.Organization.Name, "the replica that changed it sees it at once")
	require.Eventually(t, func() bool {
		bySlug, err1 := b.cache.Get(ctx, "acme")
		byDomain, err2 := b.cache.GetByDomain(ctx, "acme.example")
		return err1 == nil && err2 == nil && bySlug.Settings.Organization.Name == "Acme Renamed" &&
			byDomain.Settings.Organization.Name == "Acme Renamed"
	}, 5*time.Second, 5*time.Millisecond, "the other replica sees the change by notification")

	// A domain that moves to another Company follows it; a deleted
	// Company is gone from every replica.
	_, err = a.store.Modify(ctx, c.ID, func(co *tenant.Company) (tenant.Settings, error) {
		set := co.Settings
		set.Organization.Domain = "acme-old.example"
		return set, nil
	})
	require.NoError(t, err)
	other := storeCompany(t, a.store, "other", "acme.example")
	require.Eventually(t, func() bool {
		got, err := b.cache.GetByDomain(ctx, "acme.example")
		return err == nil && got.ID == other.ID
	}, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, a.store.Delete(ctx, other.ID))
	require.Eventually(t, func() bool {
		_, err := b.cache.GetByDomain(ctx, "acme.example")
		return err == tenant.ErrNotFound
	}, 5*time.Second, 5*time.Millisecond)
}

// TestCacheWithoutListener: while the listener is not connected nothing
// is served from the cache or kept in it, and the first connection empties
// what was kept before.
func TestCacheWithoutListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	r := &replica{store: tenant.NewStore(pool), reg: prometheus.NewRegistry(), l: notify.New(pool, nil)}
	cache, err := tenant.NewCache(r.store, r.l, tenant.CacheOptions{Metrics: r.reg})
	require.NoError(t, err)
	storeCompany(t, r.store, "acme", "acme.example")
	for range 3 {
		_, err := cache.Get(ctx, "acme")
		require.NoError(t, err)
	}
	require.Equal(t, 3, r.lookups(t, "bypass"))
	require.Zero(t, r.lookups(t, "hit"))

	// Now listening: a rename made behind the Store's back (another
	// replica whose notification this one could have missed while not
	// listening) shows.
	stop := r.l.Start(ctx)
	defer stop()
	require.Eventually(t, r.l.Connected, 10*time.Second, 10*time.Millisecond)
	got, err := cache.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, "Company acme", got.Settings.Organization.Name)
	_, err = pool.Exec(ctx, `UPDATE companies SET settings = jsonb_set(settings, '{organization,name}', '"Renamed"') WHERE slug = 'acme'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := cache.Get(ctx, "acme")
		return err == nil && got.Settings.Organization.Name == "Renamed"
	}, 5*time.Second, 5*time.Millisecond, "a change by any writer notifies (the trigger)")
}

// TestCacheTTL: an entry is read again after its TTL even without a
// notification, and entries are bounded.
func TestCacheTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	now := time.Now()
	r := newReplica(t, pool, tenant.CacheOptions{TTL: time.Minute, MaxEntries: 2, Now: func() time.Time { return now }})
	for _, slug := range []string{"a", "b", "c"} {
		storeCompany(t, r.store, slug, slug+".example")
	}
	_, err := r.cache.Get(ctx, "a")
	require.NoError(t, err)
	_, err = r.cache.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, r.lookups(t, "hit"))
	now = now.Add(time.Minute)
	_, err = r.cache.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 2, r.lookups(t, "miss"), "past its TTL the entry is read again")
	for _, slug := range []string{"b", "c", "a", "b", "c"} {
		_, err := r.cache.Get(ctx, slug)
		require.NoError(t, err)
	}
	require.Equal(t, 1, r.lookups(t, "hit"), "with room for two, cycling through three never hits")
	_, err = r.cache.Get(ctx, "nobody")
	require.ErrorIs(t, err, tenant.ErrNotFound)
}

// BenchmarkCompanyLookup is finding a request's Company by slug
// (docs/benchmarks.md): from the Store (a query and the settings' JSON
// decoded) and from the Cache once it holds the Company.
func BenchmarkCompanyLookup(b *testing.B) {
	ctx := context.Background()
	pool := testdb.NewPool(b)
	store := tenant.NewStore(pool)
	l := notify.New(pool, nil)
	cache, err := tenant.NewCache(store, l, tenant.CacheOptions{})
	require.NoError(b, err)
	b.Cleanup(l.Start(ctx))
	require.Eventually(b, l.Connected, 10*time.Second, 10*time.Millisecond)
	set := tenant.DefaultSettings()
	set.Organization = tenant.Organization{Name: "Acme", Domain: "acme.example"}
	set.Auth.Scopes = map[string]string{"orders:read": "See your orders", "orders:write": "Change your orders"}
	_, err = store.Create(ctx, "acme", set)
	require.NoError(b, err)
	for name, lookup := range map[string]tenant.Lookup{"store": store, "cache": cache} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := lookup.Get(ctx, "acme"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
