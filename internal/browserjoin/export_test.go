package browserjoin

import (
	"context"
	"time"
)

// Sweep runs the sweep job's deletion.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time) error {
	_, err := s.sweep(ctx, cutoff)
	return err
}
