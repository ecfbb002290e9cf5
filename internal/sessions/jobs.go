package sessions

import (
	"context"
	"time"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: forgetting jti records past
// their replay window, every minute.
func Sweeps(store *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "sessions_sweep_jtis", Every: time.Minute, Run: store.SweepJTIs}}
}

// SweepJTIs deletes replay records past their window.
func (s *Store) SweepJTIs(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "session_jtis", "expires_at < $1", now)
}
