package conversations

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The sweeps' statements (sweeps.go). Each conversation keeps the time
// of its next handoff timeout, idle close and prune, which the trigger of
// migration 00020 computes from its Company's settings whenever the
// conversation changes; a sweep claims what is due across all Companies.

// dueWork is one of the sweeps' kinds of work.
type dueWork int

const (
	dueHandoff dueWork = iota
	dueIdle
	duePrune
)

// column is the conversations column that says when w is due.
func (w dueWork) column() string {
	return [...]string{"handoff_due_at", "idle_due_at", "prune_due_at"}[w]
}

// dueRow is a claimed conversation and its Company's conversation
// settings.
type dueRow struct {
	companyID int64
	id        string
	queuedAt  *time.Time
	activeAt  time.Time
	settings  tenant.Conversations
}

// batch is what one transaction of a sweep did: how many conversations
// it handled, the rows it changed or removed, and the errors of those it
// could not handle.
type batch struct {
	handled int
	rows    int64
	errs    []error
	// failed are the conversations whose work failed, as failedKey.
	failed []string
}

// failedKey names a conversation in a run's list of failures.
func failedKey(companyID int64, id string) string { return strconv.FormatInt(companyID, 10) + " " + id }

// dueBatch claims up to jobBatch conversations whose w is due as of now,
// oldest deadline first, skipping those another transaction holds (the
// same sweep on another replica, or a request), and does w on each in a
// savepoint of its own. The claim re-reads the deadline under the lock,
// so a conversation changed since is not handled, nor one handled twice.
func (s *Store) dueBatch(ctx context.Context, w dueWork, now time.Time, skip []string) (batch, error) {
	var b batch
	if skip == nil {
		skip = []string{} // not NULL, which would match nothing
	}
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		b = batch{}
		if err := asOrigin(ctx, tx, originPlatform); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT c.company_id, c.id, c.queued_at, c.last_activity_at, co.settings -> 'conversations'
			FROM conversations c JOIN companies co ON co.id = c.company_id
			WHERE c.`+w.column()+` <= $1 AND NOT (c.company_id::text || ' ' || c.id = ANY($3::text[]))
			ORDER BY c.`+w.column()+` LIMIT $2 FOR UPDATE OF c SKIP LOCKED`, now, jobBatch, skip)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dueRow, error) {
			var d dueRow
			var cv *tenant.Conversations
			if err := row.Scan(&d.companyID, &d.id, &d.queuedAt, &d.activeAt, &cv); err != nil {
				return d, err
			}
			if cv != nil {
				d.settings = *cv
			}
			return d, nil
		})
		if err != nil {
			return err
		}
		for _, d := range due {
			var n int64
			var handled bool
			err := db.InTx(ctx, tx, func(sp pgx.Tx) error {
				var err error
				n, handled, err = s.doDue(ctx, sp, w, d, now)
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.errs = append(b.errs, fmt.Errorf("conversations: %s of %s (company %d): %w", w.column(), d.id, d.companyID, err))
				b.failed = append(b.failed, failedKey(d.companyID, d.id))
				continue
			}
			b.rows += n
			if handled {
				b.handled++
			}
		}
		return nil
	})
	if err != nil {
		return batch{}, err
	}
	return b, nil
}

// doDue does w on the claimed conversation d; handled is false when it
// had to leave it for a later run. A deadline the Company's settings as
// they are now put later (written by a transaction that read them before
// a change committed) is computed again instead.
func (s *Store) doDue(ctx context.Context, tx pgx.Tx, w dueWork, d dueRow, now time.Time) (int64, bool, error) {
	if stale(w, d, now) {
		_, err := tx.Exec(ctx, `UPDATE conversations SET first_event_at = first_event_at WHERE company_id = $1 AND id = $2`,
			d.companyID, d.id)
		return 0, true, err
	}
	switch w {
	case dueHandoff:
		n, err := s.handoffTimeout(ctx, tx, d)
		return n, true, err
	case dueIdle:
		return s.idleClose(ctx, tx, d)
	default:
		n, err := s.prune(ctx, tx, d, now)
		return n, true, err
	}
}

// stale reports whether the Company's settings as they are now put d's
// handoff timeout or idle close after now. (The prune reads them itself.)
func stale(w dueWork, d dueRow, now time.Time) bool {
	switch w {
	case dueHandoff:
		limit := DefaultHandoffTimeout
		if d.settings.HandoffTimeoutSeconds > 0 {
			limit = time.Duration(d.settings.HandoffTimeoutSeconds) * time.Second
		}
		return d.queuedAt == nil || d.queuedAt.Add(limit).After(now)
	case dueIdle:
		limit := DefaultIdleClose
		if d.settings.IdleCloseSeconds > 0 {
			limit = time.Duration(d.settings.IdleCloseSeconds) * time.Second
		}
		return d.activeAt.Add(limit).After(now)
	}
	return false
}

// anyDue reports whether some conversation's w is due as of now. It
// reads the first entry of the deadline's index with a statement without
// parameters, whose one plan serves every run: a run that finds nothing
// due costs this alone, however many Companies and conversations there
// are. (With now as a parameter, PostgreSQL would plan the claim again
// on each run, its plan for any now being a scan of a third of the rows.)
func (s *Store) anyDue(ctx context.Context, w dueWork, now time.Time) (bool, error) {
	var next *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT min(`+w.column()+`) FROM conversations`).Scan(&next); err != nil {
		return false, err
	}
	return next != nil && !next.After(now), nil
}

// dueLeft counts the conversations whose w is due as of now, up to
// leftBound.
func (s *Store) dueLeft(w dueWork) func(ctx context.Context, now time.Time) (int64, error) {
	return func(ctx context.Context, now time.Time) (int64, error) {
		if due, err := s.anyDue(ctx, w, now); err != nil || !due {
			return 0, err
		}
		var n int64
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM conversations WHERE `+w.column()+` <= $1 LIMIT $2) due`,
			now, leftBound).Scan(&n)
		return n, err
	}
}

// handoffTimeout moves a conversation queued past the Company's handoff
// timeout back to idle with the Company Agent, which says nobody is
// available (spec 8.9), and tells the Company's webhook.
func (s *Store) handoffTimeout(ctx context.Context, tx pgx.Tx, d dueRow) (int64, error) {
	c, err := get(ctx, tx, d.companyID, d.id, true)
	if err != nil || c == nil {
		return 0, err
	}
	if _, _, err := s.endHandoff(ctx, tx, c, handoffUnavailableText(&d.settings)); err != nil {
		return 0, err
	}
	return 1, s.deliver(ctx, tx, c)
}

// idleClose closes a conversation without activity for the Company's
// idle limit (spec 8.12), as the Company, and tells the Company's
// webhook. Closing a Direct Conversation changes its parent, which close
// locks first: held elsewhere, the parent is skipped rather than waited
// for while this conversation is locked, and the conversation is left
// for the next run.
func (s *Store) idleClose(ctx context.Context, tx pgx.Tx, d dueRow) (int64, bool, error) {
	var parent string
	if err := tx.QueryRow(ctx, `SELECT coalesce(parent_id, '') FROM conversations WHERE company_id = $1 AND id = $2`,
		d.companyID, d.id).Scan(&parent); err != nil {
		return 0, false, err
	}
	if parent != "" {
		rows, err := tx.Query(ctx, `SELECT id FROM conversations WHERE company_id = $1 AND id = $2 FOR UPDATE SKIP LOCKED`,
			d.companyID, parent)
		if err != nil {
			return 0, false, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(got) == 0 {
			return 0, false, err
		}
	}
	c, err := s.close(ctx, tx, d.companyID, d.id)
	if err != nil || c == nil {
		return 0, c != nil, err
	}
	return 1, true, nil
}

// pruneRecheck is when a closed conversation with no event left, kept
// for its Direct Conversations, is looked at again.
const pruneRecheck = time.Hour

// prune deletes a conversation's events added before the Company's
// retention period, at most eventBatch of them, and moves its first_seq
// past them, so a cursor for them answers cursor_expired (spec 8.5). A
// conversation keeps its events in order: one is kept while a later one
// is, whatever the clocks said. A closed conversation with no event left
// is then deleted with its message IDs (spec 8.3: the check lasts as long
// as the conversation); a parent after its Direct Conversations.
func (s *Store) prune(ctx context.Context, tx pgx.Tx, d dueRow, now time.Time) (int64, error) {
	cutoff := now.Add(-time.Duration(retentionDays(d.settings.RetentionDays)) * 24 * time.Hour)
	var (
		first, last int64
		status      string
		active      time.Time
		batchOld    *bool
		upto        *int64
	)
	if err := tx.QueryRow(ctx, `SELECT first_seq, last_seq, status, last_activity_at,
			(SELECT created_at < $3 FROM conversation_events WHERE company_id = $1 AND conversation_id = $2 AND seq = first_seq + $4)
		FROM conversations WHERE company_id = $1 AND id = $2`, d.companyID, d.id, cutoff, eventBatch-1).
		Scan(&first, &last, &status, &active, &batchOld); err != nil {
		return 0, err
	}
	if batchOld != nil && *batchOld {
		// The batch's last event is old, so the whole batch goes (events
		// go in order), whatever the later ones are: no need to read them.
		end := first + eventBatch - 1
		upto = &end
	} else if err := tx.QueryRow(ctx, `SELECT max(seq) FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2 AND created_at < $3`, d.companyID, d.id, cutoff).Scan(&upto); err != nil {
		return 0, err
	}
	var n int64
	if upto != nil && *upto >= first {
		end := min(*upto, first+eventBatch-1)
		tag, err := tx.Exec(ctx, `DELETE FROM conversation_events WHERE company_id = $1 AND conversation_id = $2 AND seq <= $3`,
			d.companyID, d.id, end)
		if err != nil {
			return 0, err
		}
		n, first = tag.RowsAffected(), end+1
	}
	// The trigger computes the next deadline from the oldest event kept
	// (none: from last_activity_at).
	if _, err := tx.Exec(ctx, `UPDATE conversations SET first_seq = $3, first_event_at = (SELECT created_at
			FROM conversation_events WHERE company_id = $1 AND conversation_id = $2 AND seq = $3)
		WHERE company_id = $1 AND id = $2`, d.companyID, d.id, first); err != nil {
		return n, err
	}
	var next *time.Time
	switch {
	case first <= last || (status == StatusClosed && !active.Before(cutoff)):
		return n, nil
	case status == StatusClosed:
		tag, err := tx.Exec(ctx, `DELETE FROM conversations c WHERE company_id = $1 AND id = $2
			AND NOT EXISTS (SELECT 1 FROM conversations d WHERE d.company_id = $1 AND d.parent_id = c.id)`, d.companyID, d.id)
		if err != nil || tag.RowsAffected() == 1 {
			return n + tag.RowsAffected(), err
		}
		t := now.Add(pruneRecheck)
		next = &t
	}
	// Open with no event: due again when it next changes. Closed, kept
	// for its Direct Conversations: due again in pruneRecheck.
	_, err := tx.Exec(ctx, `UPDATE conversations SET prune_due_at = $3 WHERE company_id = $1 AND id = $2`,
		d.companyID, d.id, next)
	return n, err
}

// SettingsChanged computes again, in tx, the deadlines of the Company's
// conversations that its new conversation limits move: those of open
// conversations when the handoff timeout or idle close changed, and of
// all its conversations when the retention became shorter. A longer
// retention needs nothing: the prune, visiting a conversation before its
// time, deletes nothing and computes the later deadline itself.
// tenant.Store calls it where it writes the change (tenant.Store.OnModify).
func (s *Store) SettingsChanged(ctx context.Context, tx pgx.Tx, before, after *tenant.Company) error {
	b, a := before.Settings.Conversations, after.Settings.Conversations
	var which string
	switch {
	case retentionDays(a.RetentionDays) < retentionDays(b.RetentionDays):
		which = ""
	case b.HandoffTimeoutSeconds != a.HandoffTimeoutSeconds || b.IdleCloseSeconds != a.IdleCloseSeconds:
		which = ` AND status <> 'closed'`
	default:
		return nil
	}
	// Naming first_event_at is what runs the trigger; its value stays.
	_, err := tx.Exec(ctx, `UPDATE conversations SET first_event_at = first_event_at WHERE company_id = $1`+which, after.ID)
	return err
}

// retentionDays is a retention_days setting, the default for 0.
func retentionDays(days int) int {
	if days <= 0 {
		return DefaultRetentionDays
	}
	return days
}
