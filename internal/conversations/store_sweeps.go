package conversations

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// The sweeps' statements: each runs for one Company (sweeps.go).

// ids returns the first column of a query's rows.
func (j *sweeper) ids(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := j.store.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// handoffTimeouts moves each conversation queued longer than the limit
// back to idle with the Company Agent, which says nobody is available
// (spec 8.9), and tells the Company's webhook.
func (j *sweeper) handoffTimeouts(ctx context.Context, co *companyLimits, now time.Time) (int64, error) {
	cutoff := now.Add(-co.handoffTimeout)
	ids, err := j.ids(ctx, `SELECT id FROM conversations WHERE company_id = $1 AND status = 'queued' AND queued_at <= $2
		ORDER BY queued_at LIMIT $3`, co.id, cutoff, jobBatch)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, id := range ids {
		err := db.InTx(ctx, j.store.pool, func(tx pgx.Tx) error {
			if err := asOrigin(ctx, tx, originPlatform); err != nil {
				return err
			}
			c, err := get(ctx, tx, co.id, id, true)
			if err != nil || c == nil {
				return err
			}
			// Taken, ended or asked again since the query: nothing to do.
			var queuedAt *time.Time
			if err := tx.QueryRow(ctx, `SELECT queued_at FROM conversations WHERE company_id = $1 AND id = $2`,
				co.id, id).Scan(&queuedAt); err != nil {
				return err
			}
			if c.Status != StatusQueued || queuedAt == nil || queuedAt.After(cutoff) {
				return nil
			}
			if _, _, err := j.store.endHandoff(ctx, tx, c, co.unavailable); err != nil {
				return err
			}
			n++
			return j.store.deliver(ctx, tx, c)
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// idleClose closes each open conversation without activity for the limit
// (spec 8.12), as the Company, and tells the Company's webhook. A parent
// whose Direct Conversation is open waits for it: closing the parent
// would close a conversation still in use.
func (j *sweeper) idleClose(ctx context.Context, co *companyLimits, now time.Time) (int64, error) {
	cutoff := now.Add(-co.idleClose)
	ids, err := j.ids(ctx, `SELECT id FROM conversations WHERE company_id = $1 AND status <> 'closed'
		AND last_activity_at <= $2 AND open_direct_id IS NULL ORDER BY last_activity_at LIMIT $3`, co.id, cutoff, jobBatch)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, id := range ids {
		err := db.InTx(ctx, j.store.pool, func(tx pgx.Tx) error {
			if err := asOrigin(ctx, tx, originPlatform); err != nil {
				return err
			}
			// Lock as close does, parent first, then check again.
			var parent string
			if err := tx.QueryRow(ctx, `SELECT coalesce(parent_id, '') FROM conversations WHERE company_id = $1 AND id = $2`,
				co.id, id).Scan(&parent); err != nil {
				if db.IsNotFound(err) {
					return nil
				}
				return err
			}
			if parent != "" {
				if _, err := get(ctx, tx, co.id, parent, true); err != nil {
					return err
				}
			}
			var still bool
			if err := tx.QueryRow(ctx, `SELECT status <> 'closed' AND last_activity_at <= $3 AND open_direct_id IS NULL
				FROM conversations WHERE company_id = $1 AND id = $2 FOR UPDATE`, co.id, id, cutoff).Scan(&still); err != nil || !still {
				return err
			}
			c, err := j.store.close(ctx, tx, co.id, id)
			if err != nil || c == nil {
				return err
			}
			n++
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// prune deletes events added before the Company's retention period and
// moves each conversation's first_seq past them, so a cursor for them
// answers cursor_expired (spec 8.5). A conversation keeps its events in
// order: one is kept while a later one is, whatever the clocks said. Then
// closed conversations with no event left are deleted with their message
// IDs (spec 8.3: the check lasts as long as the conversation); a parent
// goes after its Direct Conversations.
func (j *sweeper) prune(ctx context.Context, co *companyLimits, now time.Time) (int64, error) {
	cutoff := now.Add(-co.retention)
	var n int64
	for {
		// Not db.DeleteInBatches: each batch also moves first_seq.
		tag, err := j.store.pool.Exec(ctx, `WITH old AS (
				SELECT conversation_id, max(seq) + 1 AS first FROM conversation_events
				WHERE company_id = $1 AND created_at < $2 GROUP BY conversation_id LIMIT $3
			), moved AS (
				UPDATE conversations c SET first_seq = greatest(c.first_seq, old.first) FROM old
				WHERE c.company_id = $1 AND c.id = old.conversation_id RETURNING c.id, c.first_seq
			)
			DELETE FROM conversation_events e USING moved
			WHERE e.company_id = $1 AND e.conversation_id = moved.id AND e.seq < moved.first_seq`,
			co.id, cutoff, jobBatch)
		if err != nil {
			return n, err
		}
		if tag.RowsAffected() == 0 {
			break
		}
		n += tag.RowsAffected()
	}
	convs, err := db.DeleteInBatches(ctx, j.store.pool, "conversations", "company_id, id",
		`company_id = $1 AND status = 'closed' AND last_activity_at < $2 AND first_seq > last_seq
		AND NOT EXISTS (SELECT 1 FROM conversations d WHERE d.company_id = $1 AND d.parent_id = conversations.id)`,
		co.id, cutoff)
	return n + convs, err
}
