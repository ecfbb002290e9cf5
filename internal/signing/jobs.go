package signing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: every hour, rotating current
// keys older than RotateAfter, deleting keys retired more than Retain ago
// and deleting retired secrets that verify nothing more.
func Sweeps(k *Keys) []jobs.Sweep {
	return []jobs.Sweep{{Name: "signing_rotate_keys", Every: time.Hour, Run: k.maintain}}
}

// maintain rotates every current key made RotateAfter before now or
// earlier, then deletes the keys retired Retain before now or earlier and
// the secrets verifying until now or earlier, which no longer verify, and
// returns how many it deleted. A Company that fails does not stop the
// others.
func (k *Keys) maintain(ctx context.Context, now time.Time) (int64, error) {
	cutoff := now.Add(-k.opts.RotateAfter)
	companies, err := k.companiesWithKeysBefore(ctx, cutoff)
	if err != nil {
		return 0, fmt.Errorf("signing: find old keys: %w", err)
	}
	var errs []error
	for _, id := range companies {
		if _, err := k.rotate(ctx, id, &cutoff); err != nil {
			errs = append(errs, err)
		}
	}
	n, err := k.deleteRetired(ctx, now.Add(-k.opts.Retain))
	if err != nil {
		errs = append(errs, fmt.Errorf("signing: delete retired keys: %w", err))
	}
	m, err := k.deleteVerified(ctx, now)
	if err != nil {
		errs = append(errs, fmt.Errorf("signing: delete retired secrets: %w", err))
	}
	return n + m, errors.Join(errs...)
}
