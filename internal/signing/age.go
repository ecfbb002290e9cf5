package signing

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/dbmetrics"
)

// Collector exports, at each scrape, the age of the oldest current
// signing key of any Company next to the rotation period: the hourly job
// keeps the first below the second plus an hour. Two series; one query on
// the current keys, one row per Company.
func (k *Keys) Collector() prometheus.Collector {
	oldest := prometheus.NewDesc("poppyhost_signing_key_oldest_seconds",
		"Age of the oldest current signing key of any Company; 0 when no Company has one yet.", nil, nil)
	period := prometheus.NewDesc("poppyhost_signing_key_rotate_after_seconds",
		"The age at which the periodic job rotates a Company's signing key.", nil, nil)
	return dbmetrics.New(func(ctx context.Context, emit dbmetrics.Emit) error {
		var created *time.Time
		err := k.pool.QueryRow(ctx, `SELECT min(created_at) FROM signing_keys WHERE retired_at IS NULL`).Scan(&created)
		if err != nil {
			return err
		}
		emit(oldest, dbmetrics.Age(k.opts.Now(), created))
		emit(period, k.opts.RotateAfter.Seconds())
		return nil
	}, oldest, period)
}
