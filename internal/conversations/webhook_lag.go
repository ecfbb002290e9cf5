package conversations

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/dbmetrics"
)

// DeliveryLagCollector exports, at each scrape, the webhook deliveries
// waiting, running or waiting to retry, all Companies together, and how
// long ago the oldest of them was asked for: the lag of the Company
// Agents' webhooks, in two series. It runs one query on River's index of
// job kinds; now is its clock.
func DeliveryLagCollector(pool *pgxpool.Pool, now func() time.Time) prometheus.Collector {
	pending := prometheus.NewDesc("poppyhost_webhook_deliveries_pending",
		"Conversations whose new events wait for delivery to the Company Agent's webhook (one job each), all Companies.", nil, nil)
	lag := prometheus.NewDesc("poppyhost_webhook_delivery_lag_seconds",
		"How long ago the oldest pending webhook delivery was asked for; 0 when none is pending.", nil, nil)
	return dbmetrics.CountAndAge(pool, now, pending, lag, `SELECT count(*), min(created_at) FROM river_job
		WHERE kind = $1 AND state IN ('available', 'running', 'retryable', 'scheduled', 'pending')`,
		DeliverArgs{}.Kind())
}
