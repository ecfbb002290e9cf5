package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeadlinesBackfill rolls back to before migration 00020, adds a
// Company with a queued conversation whose oldest kept event is older
// than the conversation's last activity and a closed one, and migrates
// up again: the deadlines are those the Company's settings give.
func TestDeadlinesBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := setup(t)
	require.NoError(t, m.Up(ctx))
	st, err := m.Status(ctx)
	require.NoError(t, err)
	steps := 0
	for _, s := range st {
		if s.Source == "poppyhost" && s.Version >= 20 {
			steps++
		}
	}
	require.NoError(t, m.Down(ctx, steps, false))

	var co int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings)
		VALUES ('old', '{"conversations": {"handoff_timeout_seconds": 60, "retention_days": 10}}') RETURNING id`).Scan(&co))
	_, err = pool.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
			created_at, last_activity_at, queued_at, closed_at, first_seq, last_seq)
		VALUES ($1, 'cnv_q', 'https://agent.test/', 'u', 'queued', 'agent', '2030-01-01Z', '2030-01-03Z', '2030-01-02Z', NULL, 2, 3),
			($1, 'cnv_c', 'https://agent.test/', 'u', 'closed', 'agent', '2030-01-01Z', '2030-01-04Z', NULL, '2030-01-04Z', 1, 0)`, co)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
		VALUES ($1, 'cnv_q', 2, 'message', '{}', '2030-01-01T12:00:00Z'), ($1, 'cnv_q', 3, 'state', '{}', '2030-01-03Z')`, co)
	require.NoError(t, err)

	require.NoError(t, m.Up(ctx))
	var handoff, idle, prune, closedPrune time.Time
	var closedIdle *time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT handoff_due_at FROM conversations WHERE id = 'cnv_q'),
			(SELECT idle_due_at FROM conversations WHERE id = 'cnv_q'),
			(SELECT prune_due_at FROM conversations WHERE id = 'cnv_q'),
			(SELECT idle_due_at FROM conversations WHERE id = 'cnv_c'),
			(SELECT prune_due_at FROM conversations WHERE id = 'cnv_c')`).
		Scan(&handoff, &idle, &prune, &closedIdle, &closedPrune))
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	require.Equal(t, at("2030-01-02T00:01:00Z"), handoff.UTC(), "a minute after it was queued")
	require.Equal(t, at("2030-01-10T00:00:00Z"), idle.UTC(), "the default week after its last activity")
	require.Equal(t, at("2030-01-11T12:00:00Z"), prune.UTC(), "ten days after the oldest kept event")
	require.Nil(t, closedIdle)
	require.Equal(t, at("2030-01-14T00:00:00Z"), closedPrune.UTC(), "no event kept: ten days after its last activity")
}

// TestRetentionInHours: a conversation's prune deadline is its retention
// in 24-hour days, as the prune sweep counts it, even across a daylight
// saving change in the session's time zone.
func TestRetentionInHours(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := setup(t)
	require.NoError(t, m.Up(ctx))
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET TIME ZONE 'America/New_York'`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `RESET TIME ZONE`) }()
	var co int64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO companies (slug, settings)
		VALUES ('dst', '{"conversations": {"retention_days": 1}}') RETURNING id`).Scan(&co))
	// Noon before the change of 8 March 2026, when New York skips an hour.
	var hours float64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
			created_at, last_activity_at, first_event_at)
		VALUES ($1, 'cnv_dst', 'https://agent.test/', 'u', 'idle', 'agent', '2026-03-07 12:00-05', '2026-03-07 12:00-05', '2026-03-07 12:00-05')
		RETURNING extract(epoch FROM prune_due_at - first_event_at) / 3600`, co).Scan(&hours))
	require.Equal(t, 24.0, hours)
}
