package conversations

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// The store of webhook delivery: how far each conversation's events were
// delivered (conversations.delivered_seq), the events still to deliver,
// and each Company's webhook secrets.

// undeliveredParent returns the parent of conversation id when it has
// events not yet delivered, else "".
func undeliveredParent(ctx context.Context, q db.Executor, companyID int64, id string) (string, error) {
	var parentID string
	err := q.QueryRow(ctx, `SELECT p.id FROM conversations c JOIN conversations p ON p.company_id = c.company_id AND p.id = c.parent_id
		WHERE c.company_id = $1 AND c.id = $2 AND p.last_seq > p.delivered_seq`, companyID, id).Scan(&parentID)
	if db.IsNotFound(err) {
		return "", nil
	}
	return parentID, err
}

// markDelivered records that conversation id's events up to seq were
// delivered.
func markDelivered(ctx context.Context, q db.Executor, companyID int64, id string, seq int64) error {
	_, err := q.Exec(ctx, `UPDATE conversations SET delivered_seq = $3
		WHERE company_id = $1 AND id = $2 AND delivered_seq < $3`, companyID, id, seq)
	return err
}

// markAllDelivered records that all of conversation id's events were
// delivered, or need not be.
func markAllDelivered(ctx context.Context, q db.Executor, companyID int64, id string) error {
	_, err := q.Exec(ctx, `UPDATE conversations SET delivered_seq = last_seq WHERE company_id = $1 AND id = $2`,
		companyID, id)
	return err
}

// lockDelivered locks conversation id and returns how far its events
// were delivered; pgx.ErrNoRows when it is gone.
func lockDelivered(ctx context.Context, tx pgx.Tx, companyID int64, id string) (int64, error) {
	var delivered int64
	err := tx.QueryRow(ctx, `SELECT delivered_seq FROM conversations WHERE company_id = $1 AND id = $2 FOR UPDATE`,
		companyID, id).Scan(&delivered)
	return delivered, err
}

// pendingEvents returns up to limit events of conversation id to deliver
// after seq after: not the Company's own, and added since since.
func pendingEvents(ctx context.Context, q db.Executor, companyID int64, id string, after int64, since time.Time, limit int) ([]pendingEvent, error) {
	rows, err := q.Query(ctx, `SELECT seq, type, body, created_at, verified FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2 AND seq > $3 AND origin <> 'company' AND created_at >= $4
		ORDER BY seq LIMIT $5`, companyID, id, after, since, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (pendingEvent, error) {
		var e pendingEvent
		err := row.Scan(&e.Seq, &e.Type, &e.Body, &e.CreatedAt, &e.verified)
		return e, err
	})
}

// hasPending reports whether conversation id has an event to deliver
// after seq after, as pendingEvents finds them.
func hasPending(ctx context.Context, q db.Executor, companyID int64, id string, after int64, since time.Time) (bool, error) {
	var more bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2 AND seq > $3 AND origin <> 'company' AND created_at >= $4)`,
		companyID, id, after, since).Scan(&more)
	return more, err
}

// companySlug returns the slug of the Company with id, or "" when it is
// gone.
func companySlug(ctx context.Context, q db.Executor, id int64) (string, error) {
	var slug string
	err := q.QueryRow(ctx, `SELECT slug FROM companies WHERE id = $1`, id).Scan(&slug)
	if db.IsNotFound(err) {
		return "", nil
	}
	return slug, err
}

// storedSecrets is a Company's webhook secrets as stored: each sealed,
// or plain when stored before sealing and not sealed yet.
type storedSecrets struct {
	cur, curSealed   []byte
	prev, prevSealed []byte
	until            *time.Time // until when prev signs
}

// webhookSecrets returns the Company's stored webhook secrets, all nil
// without any; with lock, locked until the end of q's transaction.
func webhookSecrets(ctx context.Context, q db.Executor, companyID int64, lock bool) (storedSecrets, error) {
	sql := `SELECT secret, secret_sealed, previous_secret, previous_secret_sealed, previous_until
		FROM conversation_webhook_secrets WHERE company_id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var s storedSecrets
	err := q.QueryRow(ctx, sql, companyID).Scan(&s.cur, &s.curSealed, &s.prev, &s.prevSealed, &s.until)
	if db.IsNotFound(err) {
		return storedSecrets{}, nil
	}
	return s, err
}

// insertWebhookSecret stores the Company's first webhook secret, sealed,
// made at now, unless it has one; it reports whether it stored it.
func insertWebhookSecret(ctx context.Context, q db.Executor, companyID int64, sealed []byte, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO conversation_webhook_secrets (company_id, secret_sealed, created_at)
		VALUES ($1, $2, $3) ON CONFLICT (company_id) DO NOTHING`, companyID, sealed, now)
	return tag.RowsAffected() == 1, err
}

// replaceWebhookSecret makes sealed the Company's webhook secret, made at
// now; prevSealed, the one it replaces, signs until until.
func replaceWebhookSecret(ctx context.Context, q db.Executor, companyID int64, sealed, prevSealed []byte, now, until time.Time) error {
	_, err := q.Exec(ctx, `UPDATE conversation_webhook_secrets SET secret = NULL, secret_sealed = $2, created_at = $3,
		previous_secret = NULL, previous_secret_sealed = $4, previous_until = $5 WHERE company_id = $1`,
		companyID, sealed, now, prevSealed, until)
	return err
}
