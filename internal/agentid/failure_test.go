package agentid_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
)

// stall makes the agent answer path only when the client gives up or the
// test ends.
func stall(t *testing.T, b *bundle, path string) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	b.agent.Serve(path, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
}

// TestStallingDocumentIsRemembered: a metadata document that never
// answers holds the first request for FetchTimeout (3 s by default, not
// the 10 s of a whole safehttp fetch), and the failure is remembered, so
// the next request fails at once without fetching.
func TestStallingDocumentIsRemembered(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	stall(t, b, metadataPath)
	ctx := context.Background()

	start := time.Now()
	_, err := b.resolver.Client(ctx, b.agent.ClientID)
	took := time.Since(start)
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Bounds generous for a loaded machine: at least the deadline, well
	// under safehttp's 10 s.
	require.GreaterOrEqual(t, took, 3*time.Second)
	require.Less(t, took, 8*time.Second)
	require.Equal(t, 1, b.agent.Hits(metadataPath))

	start = time.Now()
	_, err = b.resolver.Client(ctx, b.agent.ClientID)
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	require.Less(t, time.Since(start), time.Second, "answered from the remembered failure")
	require.Equal(t, 1, b.agent.Hits(metadataPath), "not fetched again")
}

// TestStallingKeySetIsRemembered: the same for a key set, with a shorter
// FetchTimeout.
func TestStallingKeySetIsRemembered(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{Resolver: agentid.Options{FetchTimeout: 200 * time.Millisecond}})
	c := b.client(t)
	_, kid := b.agent.Key("ES256")
	stall(t, b, jwksPath)
	ctx := context.Background()

	start := time.Now()
	_, err := b.resolver.Key(ctx, c, kid)
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	require.Less(t, time.Since(start), 5*time.Second, "the deadline is FetchTimeout")
	for range 3 {
		_, err = b.resolver.Key(ctx, c, kid)
		require.ErrorIs(t, err, agentid.ErrUnavailable)
	}
	require.Equal(t, 1, b.agent.Hits(jwksPath), "fetched once")

	b.clock.Advance(30 * time.Second)
	b.agent.Serve(jwksPath, nil)
	k, err := b.resolver.Key(ctx, c, kid)
	require.NoError(t, err)
	require.Equal(t, kid, k.KeyID())
	require.Equal(t, 2, b.agent.Hits(jwksPath))
}

// TestFailuresBackOff: each failure in a row is remembered twice as long
// as the one before, from 30 s to at most 10 minutes; invalid documents
// count as failures too; a success, or a quiet spell of 10 minutes, starts
// again at 30 s.
func TestFailuresBackOff(t *testing.T) {
	t.Parallel()
	for name, serve := range map[string]http.HandlerFunc{
		"error status": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusInternalServerError) },
		"invalid document": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"client_id":"https://elsewhere.test/agent.json"}`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			ctx := context.Background()
			fetches := func() int { return b.agent.Hits(metadataPath) }
			// try asks after d and reports whether that fetched; a stale
			// copy may answer, so the outcome is not checked.
			try := func(d time.Duration) bool {
				before := fetches()
				b.clock.Advance(d)
				_, _ = b.resolver.Client(ctx, b.agent.ClientID)
				return fetches() > before
			}
			b.agent.Serve(metadataPath, serve)
			require.True(t, try(0))
			for _, period := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute,
				8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
				require.False(t, try(period-time.Second), "fetched before %s", period)
				require.True(t, try(time.Second), "not fetched after %s", period)
			}

			// A quiet spell: the last failure ran out 10 minutes ago.
			require.True(t, try(20*time.Minute))
			require.False(t, try(29*time.Second))
			require.True(t, try(time.Second), "back to 30 s")
			require.False(t, try(59*time.Second))

			// A success forgets the failures.
			b.agent.Serve(metadataPath, nil)
			b.clock.Advance(time.Second)
			b.client(t)
			b.agent.Serve(metadataPath, serve)
			require.True(t, try(5*time.Minute), "the cached copy expired")
			require.False(t, try(29*time.Second))
			require.True(t, try(time.Second), "back to 30 s after a success")
		})
	}
}
