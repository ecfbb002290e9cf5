package signing

import (
	"context"
	"time"
)

// Maintain runs the periodic job's work once as of now, without River.
func Maintain(ctx context.Context, k *Keys, now time.Time) error {
	_, err := k.maintain(ctx, now)
	return err
}

// Loads says how many times k has read keys from the database.
func Loads(k *Keys) uint64 { return k.flights.Load() }
