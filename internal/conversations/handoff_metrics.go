package conversations

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/dbmetrics"
)

// HandoffCollector exports, at each scrape, how many conversations wait
// for a person (status queued, spec 8.9), across all Companies, and how
// long the oldest has waited: two series. It runs one query on the
// partial index conversations_handoff_due, which holds exactly the queued
// conversations; now is its clock.
func HandoffCollector(pool *pgxpool.Pool, now func() time.Time) prometheus.Collector {
	waiting := prometheus.NewDesc("poppyhost_handoffs_waiting",
		"Conversations handed off to a person and waiting for one (queued), all Companies.", nil, nil)
	oldest := prometheus.NewDesc("poppyhost_handoffs_waiting_oldest_seconds",
		"How long the longest-waiting handoff has been queued; 0 when none waits.", nil, nil)
	return dbmetrics.CountAndAge(pool, now, waiting, oldest, `SELECT count(*), min(queued_at) FROM conversations
		WHERE handoff_due_at IS NOT NULL`)
}
