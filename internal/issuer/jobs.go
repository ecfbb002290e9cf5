package issuer

import (
	"context"
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// sweepGrace keeps expired rows a day: a replayed refresh token that
// expired a moment ago still meets its row and its family's revocation.
const sweepGrace = 24 * time.Hour

// endedLookBack is how far back each run looks for sign-ins that expired:
// runs overlap, harmlessly, so that a run missed for a while loses none.
const endedLookBack = 15 * time.Minute

// Sweeps are the package's periodic work: deleting codes, tokens, device
// requests and page sign-ins expired sweepGrace ago, every hour; and
// recording the sign-ins whose refresh tokens expired, every minute; and
// deleting MCP clients' registrations that expired unused, every hour.
func Sweeps(store *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "issuer_sweep_expired", Every: time.Hour,
		Run: func(ctx context.Context, now time.Time) (int64, error) {
			return store.DeleteExpired(ctx, now.Add(-sweepGrace))
		}}, {Name: "issuer_end_expired_sign_ins", Every: time.Minute,
		Run: func(ctx context.Context, now time.Time) (int64, error) {
			return store.EndExpiredSignIns(ctx, now.Add(-endedLookBack), now)
		}}, {Name: "issuer_sweep_client_registrations", Every: time.Hour,
		Run: func(ctx context.Context, now time.Time) (int64, error) {
			return store.DeleteExpiredRegistrations(ctx, now)
		}}}
}
