package crosstenant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/dpop"
)

// TestDPoP: DPoP proof jtis are kept per Company: a proof A saw neither
// counts at B nor is used up by B.
func TestDPoP(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := dpop.NewStore(w.pool)
	const jkt, jti = "thumbprint-of-the-proof-key", "jti-1"
	until := time.Now().Add(time.Minute)
	fresh, err := store.Seen(w.ctx, w.a.ID, jkt, jti, until)
	require.NoError(t, err)
	require.True(t, fresh)

	t.Run("dpop.Store/Seen", func(t *testing.T) {
		fresh, err := store.Seen(w.ctx, w.b.ID, jkt, jti, until)
		require.NoError(t, err)
		require.True(t, fresh, "A's proof does not count at B")
		fresh, err = store.Seen(w.ctx, w.a.ID, jkt, jti, until)
		require.NoError(t, err)
		require.False(t, fresh, "A's proof is still seen at A")
	})
}
