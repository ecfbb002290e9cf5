package conversations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Defaults of the Company's conversation limits (tenant.Conversations),
// used where a setting is 0.
const (
	DefaultHandoffTimeout = 300 * time.Second
	DefaultIdleClose      = 7 * 24 * time.Hour
	DefaultRetentionDays  = 90
)

// jobBatch bounds the conversations one run changes per Company; the next
// run goes on.
const jobBatch = 500

// HandoffTimeoutArgs is the periodic job that ends handoffs nobody took in
// the Company's handoff_timeout_seconds (spec 8.9).
type HandoffTimeoutArgs struct{}

// Kind names the job in River.
func (HandoffTimeoutArgs) Kind() string { return "conversations_handoff_timeout" }

// InsertOpts makes at most one run wait at a time.
func (HandoffTimeoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// IdleCloseArgs is the periodic job that closes conversations without
// activity for the Company's idle_close_seconds (spec 8.12).
type IdleCloseArgs struct{}

// Kind names the job in River.
func (IdleCloseArgs) Kind() string { return "conversations_idle_close" }

// InsertOpts makes at most one run wait at a time.
func (IdleCloseArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// PruneArgs is the periodic job that deletes events older than the
// Company's retention_days (spec 8.5: a cursor for them answers
// cursor_expired), then closed conversations with none left.
type PruneArgs struct{}

// Kind names the job in River.
func (PruneArgs) Kind() string { return "conversations_prune" }

// InsertOpts makes at most one run wait at a time.
func (PruneArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}

// Jobs are the conversations' background work.
type Jobs struct {
	store     *Store
	companies Companies
	now       func() time.Time
}

type handoffWorker struct {
	river.WorkerDefaults[HandoffTimeoutArgs]
	j *Jobs
}

func (w *handoffWorker) Work(ctx context.Context, _ *river.Job[HandoffTimeoutArgs]) error {
	return w.j.eachCompany(ctx, w.j.handoffTimeouts)
}

type idleWorker struct {
	river.WorkerDefaults[IdleCloseArgs]
	j *Jobs
}

func (w *idleWorker) Work(ctx context.Context, _ *river.Job[IdleCloseArgs]) error {
	return w.j.eachCompany(ctx, w.j.idleClose)
}

type pruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	j *Jobs
}

func (w *pruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	return w.j.eachCompany(ctx, w.j.prune)
}

// AddJobs registers the package's workers: webhook delivery (when
// delivery is set) and the periodic jobs, handoff timeouts and idle close
// every minute and pruning every hour, each also when a replica becomes
// River's leader.
func AddJobs(workers *river.Workers, store *Store, delivery *Delivery, companies Companies, now func() time.Time) []*river.PeriodicJob {
	if now == nil {
		now = time.Now
	}
	j := &Jobs{store: store, companies: companies, now: now}
	if delivery != nil {
		river.AddWorker(workers, &deliverWorker{d: delivery})
	}
	river.AddWorker(workers, &handoffWorker{j: j})
	river.AddWorker(workers, &idleWorker{j: j})
	river.AddWorker(workers, &pruneWorker{j: j})
	periodic := func(every time.Duration, args river.JobArgs) *river.PeriodicJob {
		return river.NewPeriodicJob(river.PeriodicInterval(every),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
	}
	return []*river.PeriodicJob{
		periodic(time.Minute, HandoffTimeoutArgs{}),
		periodic(time.Minute, IdleCloseArgs{}),
		periodic(time.Hour, PruneArgs{}),
	}
}

// eachCompany runs f for every Company; one that fails does not stop the
// others.
func (j *Jobs) eachCompany(ctx context.Context, f func(ctx context.Context, co *companyLimits) error) error {
	var errs []error
	after := ""
	for {
		page, err := j.companies.List(ctx, after, 100)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		for _, co := range page {
			if err := f(ctx, limitsOf(co)); err != nil {
				errs = append(errs, fmt.Errorf("conversations: company %s: %w", co.Slug, err))
			}
		}
		if len(page) < 100 {
			return errors.Join(errs...)
		}
		after = page[len(page)-1].Slug
	}
}

// companyLimits are one Company's limits, defaults applied.
type companyLimits struct {
	id             int64
	handoffTimeout time.Duration
	idleClose      time.Duration
	retention      time.Duration
	unavailable    string
}

func limitsOf(co *tenant.Company) *companyLimits {
	cv := co.Settings.Conversations
	l := &companyLimits{id: co.ID, handoffTimeout: DefaultHandoffTimeout, idleClose: DefaultIdleClose,
		retention: DefaultRetentionDays * 24 * time.Hour, unavailable: handoffUnavailableText(co)}
	if cv.HandoffTimeoutSeconds > 0 {
		l.handoffTimeout = time.Duration(cv.HandoffTimeoutSeconds) * time.Second
	}
	if cv.IdleCloseSeconds > 0 {
		l.idleClose = time.Duration(cv.IdleCloseSeconds) * time.Second
	}
	if cv.RetentionDays > 0 {
		l.retention = time.Duration(cv.RetentionDays) * 24 * time.Hour
	}
	return l
}

// ids returns the first column of a query's rows.
func (j *Jobs) ids(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := j.store.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// handoffTimeouts moves each conversation queued longer than the limit
// back to idle with the Company Agent, which says nobody is available
// (spec 8.9), and tells the Company's webhook.
func (j *Jobs) handoffTimeouts(ctx context.Context, co *companyLimits) error {
	cutoff := j.now().Add(-co.handoffTimeout)
	ids, err := j.ids(ctx, `SELECT id FROM conversations WHERE company_id = $1 AND status = 'queued' AND queued_at <= $2
		ORDER BY queued_at LIMIT $3`, co.id, cutoff, jobBatch)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := j.store.inTx(ctx, func(tx pgx.Tx) error {
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
			return j.store.deliver(ctx, tx, c)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// idleClose closes each open conversation without activity for the limit
// (spec 8.12), as the Company, and tells the Company's webhook. A parent
// whose Direct Conversation is open waits for it: closing the parent
// would close a conversation still in use.
func (j *Jobs) idleClose(ctx context.Context, co *companyLimits) error {
	cutoff := j.now().Add(-co.idleClose)
	ids, err := j.ids(ctx, `SELECT id FROM conversations WHERE company_id = $1 AND status <> 'closed'
		AND last_activity_at <= $2 AND open_direct_id IS NULL ORDER BY last_activity_at LIMIT $3`, co.id, cutoff, jobBatch)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := j.store.inTx(ctx, func(tx pgx.Tx) error {
			if err := asOrigin(ctx, tx, originPlatform); err != nil {
				return err
			}
			// Lock as close does, parent first, then check again.
			var parent string
			if err := tx.QueryRow(ctx, `SELECT coalesce(parent_id, '') FROM conversations WHERE company_id = $1 AND id = $2`,
				co.id, id).Scan(&parent); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
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
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// prune deletes events added before the Company's retention period and
// moves each conversation's first_seq past them, so a cursor for them
// answers cursor_expired (spec 8.5). A conversation keeps its events in
// order: one is kept while a later one is, whatever the clocks said. Then
// closed conversations with no event left are deleted with their message
// IDs (spec 8.3: the check lasts as long as the conversation); a parent
// goes after its Direct Conversations.
func (j *Jobs) prune(ctx context.Context, co *companyLimits) error {
	cutoff := j.now().Add(-co.retention)
	for {
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
			return err
		}
		if tag.RowsAffected() == 0 {
			break
		}
	}
	_, err := j.store.pool.Exec(ctx, `DELETE FROM conversations c WHERE c.company_id = $1 AND c.status = 'closed'
		AND c.last_activity_at < $2 AND c.first_seq > c.last_seq
		AND NOT EXISTS (SELECT 1 FROM conversations d WHERE d.company_id = $1 AND d.parent_id = c.id)`, co.id, cutoff)
	return err
}
