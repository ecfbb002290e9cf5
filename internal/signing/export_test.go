package signing

import "context"

// MaintainArgs is the periodic job's args, for testkit.RunJob.
type MaintainArgs = maintainArgs

// Maintain runs the periodic job's work once, without River.
func Maintain(ctx context.Context, k *Keys) error { return k.maintain(ctx) }

// Loads says how many times k has read keys from the database.
func Loads(k *Keys) uint64 { return k.flights.Load() }
