package httpx

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimiter: a key's budget is its limit a minute, a request over it is
// refused with Retry-After and not counted, keys count apart, a replica's
// share of a shared limit is rounded up, and the previous minute weighs on
// the next by what the window still covers of it.
func TestLimiter(t *testing.T) {
	t.Parallel()
	l := NewLimiter()
	for i := range 3 {
		w := httptest.NewRecorder()
		require.False(t, l.Exceeded(w, "a", 3), "request %d", i+1)
		require.Empty(t, w.Header().Get("Retry-After"))
	}
	w := httptest.NewRecorder()
	require.True(t, l.Exceeded(w, "a", 3))
	require.Equal(t, "60", w.Header().Get("Retry-After"))
	require.False(t, l.Exceeded(httptest.NewRecorder(), "b", 3), "another key has its own budget")
	require.False(t, l.Exceeded(httptest.NewRecorder(), "a", 4), "the refused request was not counted")

	shared := NewSharedLimiter(func() int { return 2 })
	require.Equal(t, 2, shared.Share(3))
	require.False(t, shared.Exceeded(httptest.NewRecorder(), "a", 3))
	require.False(t, shared.Exceeded(httptest.NewRecorder(), "a", 3))
	require.True(t, shared.Exceeded(httptest.NewRecorder(), "a", 3))

	// A whole window of 10, then a quarter into the next: 3/4 of the
	// previous window's 10 still count, so 2 more make 9.5, 10 in all.
	start := time.Now().UTC()
	minute := start.Add(-l.offset).Truncate(window).Add(l.offset)
	for range 10 {
		require.True(t, l.count("c", 10, minute))
	}
	next := minute.Add(window + window/4)
	require.True(t, l.count("c", 10, next))
	require.True(t, l.count("c", 10, next))
	require.False(t, l.count("c", 10, next))
}

// TestLimiterCountsWithoutAllocating: counting a request copies nothing,
// neither the request nor its context, and sets no header within the
// limit (issue 19: a Session request is counted three times).
func TestLimiterCountsWithoutAllocating(t *testing.T) {
	l := NewSharedLimiter(func() int { return 1 })
	w := httptest.NewRecorder()
	require.False(t, l.Exceeded(w, "agent 1 https://agent.test", 1_000_000))
	allocs := testing.AllocsPerRun(100, func() {
		if l.Exceeded(w, "agent 1 https://agent.test", 1_000_000) {
			t.Fatal("over the limit")
		}
	})
	require.Zero(t, allocs)
	require.Empty(t, w.Header())
}
