package issuer

import (
	"context"
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// sweepGrace keeps expired rows a day: a replayed refresh token that
// expired a moment ago still meets its row and its family's revocation.
const sweepGrace = 24 * time.Hour

// Sweeps are the package's periodic work: deleting codes, tokens, device
// requests and page sign-ins expired sweepGrace ago, every hour.
func Sweeps(store *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "issuer_sweep_expired", Every: time.Hour,
		Run: func(ctx context.Context, now time.Time) (int64, error) {
			return store.DeleteExpired(ctx, now.Add(-sweepGrace))
		}}}
}
