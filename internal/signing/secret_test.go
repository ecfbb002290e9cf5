package signing_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/signing"
)

// secretRows counts the Company's stored secrets, and the current ones.
func (b *bundle) secretRows(t *testing.T, companyID int64) (all, current int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*), count(*) FILTER (WHERE retired_at IS NULL)
		FROM company_secrets WHERE company_id = $1`, companyID).Scan(&all, &current))
	return all, current
}

// TestRotateSecret: a rotated secret stops signing at once here and after
// CacheTTL on other replicas, verifies until what it signed expires (plus
// CacheTTL), and is then dropped on read and deleted by the job.
func TestRotateSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha, beta := b.company(t, "alpha"), b.company(t, "beta")
	other := b.replica()
	first, err := other.Secret(b.ctx, alpha)
	require.NoError(t, err)
	betaSecret, err := b.keys.Secret(b.ctx, beta)
	require.NoError(t, err)

	rot, err := b.keys.RotateSecret(b.ctx, alpha, b.clock.Now().Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, b.clock.Now(), rot.CreatedAt)
	require.Equal(t, b.clock.Now().Add(2*time.Hour+time.Minute), rot.PreviousVerifiesUntil)
	second, err := b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.NotEqual(t, first, second)
	rotated, err := b.keys.RotatedSecrets(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, [][]byte{first}, rotated)

	// The other replica signs with its cached secret for up to CacheTTL.
	s, err := other.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, first, s)
	b.clock.Add(time.Minute)
	s, err = other.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, second, s)
	rotated, err = other.RotatedSecrets(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, [][]byte{first}, rotated)

	// A second rotation: both retired secrets verify, newest first.
	_, err = b.keys.RotateSecret(b.ctx, alpha, b.clock.Now().Add(24*time.Hour))
	require.NoError(t, err)
	third, err := b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	rotated, err = b.keys.RotatedSecrets(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, [][]byte{second, first}, rotated)

	// Once what the first signed has expired, it verifies nothing, even
	// from the cache, and the job deletes it; the second stays.
	b.clock.Add(2 * time.Hour)
	rotated, err = b.keys.RotatedSecrets(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, [][]byte{second}, rotated)
	all, _ := b.secretRows(t, alpha)
	require.Equal(t, 3, all)
	require.NoError(t, signing.Maintain(b.ctx, b.keys, b.clock.Now()))
	all, current := b.secretRows(t, alpha)
	require.Equal(t, 2, all)
	require.Equal(t, 1, current)
	s, err = b.replica().Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, third, s)

	// Beta's secret never changed.
	s, err = b.replica().Secret(b.ctx, beta)
	require.NoError(t, err)
	require.Equal(t, betaSecret, s)
	rotated, err = b.replica().RotatedSecrets(b.ctx, beta)
	require.NoError(t, err)
	require.Empty(t, rotated)
}

// TestRotateSecretRaces: rotations racing on several replicas, and with a
// Company's first use, each retire one secret: one current secret at the
// end, and every secret made verifies.
func TestRotateSecretRaces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")
	const n = 8
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		k := b.replica()
		wg.Go(func() {
			<-start
			_, errs[i] = k.RotateSecret(b.ctx, alpha, b.clock.Now().Add(time.Hour))
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	all, current := b.secretRows(t, alpha)
	require.Equal(t, n+1, all, "the first secret and one per rotation")
	require.Equal(t, 1, current)
	rotated, err := b.replica().RotatedSecrets(b.ctx, alpha)
	require.NoError(t, err)
	require.Len(t, rotated, n)
}
