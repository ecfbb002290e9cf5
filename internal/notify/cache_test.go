package notify

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// connected returns a Listener that reports being connected, without a
// database: the Cache only asks.
func connected() *Listener {
	l := New(nil, nil)
	l.connected.Store(true)
	return l
}

func TestCacheGet(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	c := NewCache[string, int](connected(), CacheOptions{TTL: time.Minute, Now: func() time.Time { return now }})
	loads := 0
	load := func() (int, error) { loads++; return loads, nil }

	v, res, err := c.Get("a", load)
	require.NoError(t, err)
	require.Equal(t, Miss, res)
	require.Equal(t, 1, v)
	v, res, _ = c.Get("a", load)
	require.Equal(t, Hit, res)
	require.Equal(t, 1, v)

	now = now.Add(time.Minute)
	v, res, _ = c.Get("a", load)
	require.Equal(t, Miss, res, "past its TTL")
	require.Equal(t, 2, v)

	_, _, err = c.Get("b", func() (int, error) { return 0, errors.New("down") })
	require.Error(t, err)
	_, res, _ = c.Get("b", load)
	require.Equal(t, Miss, res, "an error is not kept")
}

// TestCacheInvalidation: Delete, Forget and Clear drop entries, and a load
// that an invalidation raced is returned but not kept.
func TestCacheInvalidation(t *testing.T) {
	t.Parallel()
	c := NewCache[string, int](connected(), CacheOptions{})
	fill := func(keys ...string) {
		for i, k := range keys {
			_, _, err := c.Get(k, func() (int, error) { return i, nil })
			require.NoError(t, err)
		}
	}
	held := func(k string) bool {
		_, res, _ := c.Get(k, func() (int, error) { return -1, nil })
		return res == Hit
	}
	fill("a", "b", "c")
	c.Delete("a")
	require.False(t, held("a"))
	require.True(t, held("b"))
	c.Forget(func(k string, v int) bool { return k == "b" })
	require.False(t, held("b"))
	require.True(t, held("c"))
	c.Clear()
	require.False(t, held("c"))

	v, res, err := c.Get("raced", func() (int, error) {
		c.Delete("raced") // a notification arrives while loading
		return 7, nil
	})
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Equal(t, Miss, res)
	require.False(t, held("raced"), "what a raced load read is not kept")
}

// TestCacheDisconnected: nothing is served or kept while the Listener is
// not connected.
func TestCacheDisconnected(t *testing.T) {
	t.Parallel()
	l := connected()
	c := NewCache[string, int](l, CacheOptions{})
	_, _, err := c.Get("a", func() (int, error) { return 1, nil })
	require.NoError(t, err)
	l.connected.Store(false)
	v, res, _ := c.Get("a", func() (int, error) { return 2, nil })
	require.Equal(t, Bypass, res)
	require.Equal(t, 2, v)
	_, res, _ = c.Get("b", func() (int, error) { return 3, nil })
	require.Equal(t, Bypass, res)
	// The reconnection empties it (OnConnect).
	for _, f := range l.onConnect {
		f()
	}
	l.connected.Store(true)
	_, res, _ = c.Get("a", func() (int, error) { return 4, nil })
	require.Equal(t, Miss, res)
}

// TestCacheBounded: a full Cache drops expired entries, then everything.
func TestCacheBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	c := NewCache[int, int](connected(), CacheOptions{TTL: time.Minute, MaxEntries: 3, Now: func() time.Time { return now }})
	for i := range 10 {
		_, _, _ = c.Get(i, func() (int, error) { return i, nil })
		require.LessOrEqual(t, len(c.m), 3)
	}
}
