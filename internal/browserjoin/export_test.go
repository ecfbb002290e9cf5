package browserjoin

import (
	"context"
	"time"
)

// Sweep runs the sweep job's deletion.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time) error { return s.sweep(ctx, cutoff) }
