package crosstenant_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestClientAuth: replays of client assertions are kept per Company, by
// its issuer: a jti A saw neither counts at B nor is used up by B.
func TestClientAuth(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	replays := clientauth.NewPGReplays(w.pool)
	urls := tenant.URLs{Public: &url.URL{Scheme: "https", Host: "poppy.test"}}
	issuerA, issuerB := urls.Issuer(w.a), urls.Issuer(w.b)
	require.NotEqual(t, issuerA, issuerB)
	const client, jti = "https://agent.test/client", "jti-1"
	exp := time.Now().Add(time.Minute)
	fresh, err := replays.Use(w.ctx, issuerA, client, jti, exp)
	require.NoError(t, err)
	require.True(t, fresh)

	t.Run("clientauth.PGReplays/Use", func(t *testing.T) {
		fresh, err := replays.Use(w.ctx, issuerB, client, jti, exp)
		require.NoError(t, err)
		require.True(t, fresh, "A's jti does not count at B")
		fresh, err = replays.Use(w.ctx, issuerA, client, jti, exp)
		require.NoError(t, err)
		require.False(t, fresh, "A's jti is still seen at A")
	})
}
