package conversations

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Conversation is one conversation's state.
type Conversation struct {
	CompanyID    int64
	ID           string
	ClientID     string
	UserID       string
	AccountID    int64
	ParentID     string
	AcceptedID   string
	OpenDirectID string
	Status       string
	Responder    string
	Context      map[string]json.RawMessage
	LastSeq      int64
	FirstSeq     int64
	CreatedAt    time.Time
}

// Enqueuer schedules delivery of a conversation's new events to the
// Company Agent, in the transaction that adds them.
type Enqueuer interface {
	EnqueueConversation(ctx context.Context, tx pgx.Tx, c *Conversation) error
}

// StoreOptions configure a Store.
type StoreOptions struct {
	// Enqueue schedules the Company Agent's webhook; nil delivers nothing.
	Enqueue Enqueuer
	// Operations carries operations in conversations; nil leaves them off.
	Operations *Operations
	// Metrics counts the messages stored; nil counts them unregistered.
	Metrics *Metrics
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Store keeps conversations in PostgreSQL, always filtered by Company.
type Store struct {
	pool    *pgxpool.Pool
	enqueue Enqueuer
	ops     *Operations
	metrics *Metrics
	now     func() time.Time
}

// NewStore returns a Store.
func NewStore(pool *pgxpool.Pool, opts StoreOptions) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{pool: pool, enqueue: opts.Enqueue, ops: opts.Operations, metrics: opts.Metrics.orDefault(),
		now: opts.Now}
}

const conversationColumns = `id, client_id, user_id, coalesce(account_id, 0), coalesce(parent_id, ''),
	coalesce(user_requested_event_id, ''), coalesce(open_direct_id, ''), status, responder, context,
	last_seq, first_seq, created_at`

// scanConversation scans conversationColumns, then the row's extra
// columns into extra.
func scanConversation(companyID int64, row pgx.Row, extra ...any) (*Conversation, error) {
	c := &Conversation{CompanyID: companyID}
	err := row.Scan(append([]any{&c.ID, &c.ClientID, &c.UserID, &c.AccountID, &c.ParentID, &c.AcceptedID, &c.OpenDirectID,
		&c.Status, &c.Responder, &c.Context, &c.LastSeq, &c.FirstSeq, &c.CreatedAt}, extra...)...)
	if db.IsNotFound(err) {
		return nil, nil
	}
	return c, err
}

// get returns a conversation, or nil. forUpdate locks it in tx.
func get(ctx context.Context, q db.Executor, companyID int64, id string, forUpdate bool) (*Conversation, error) {
	sql := `SELECT ` + conversationColumns + ` FROM conversations WHERE company_id = $1 AND id = $2`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	return scanConversation(companyID, q.QueryRow(ctx, sql, companyID, id))
}

// Get returns a conversation, or nil.
func (s *Store) Get(ctx context.Context, companyID int64, id string) (*Conversation, error) {
	if !validID(id) {
		return nil, nil
	}
	return get(ctx, s.pool, companyID, id, false)
}

// newEvent is an event to append.
type newEvent struct {
	Type string
	Body map[string]any
	// Raw is Body as JSON, when already encoded; Body is then nil.
	Raw []byte
	// Verified are the facts of the request that added the event, for the
	// Company Agent's webhook; never part of Body, which agents read.
	Verified *verified.Facts
}

func stateEvent(status, responder string) newEvent {
	return newEvent{Type: EventState, Body: map[string]any{"status": status, "responder": responder}}
}

// appendEvents adds events to a conversation in tx, sets its status and
// responder, and notifies readers on commit. A change of status or
// responder adds its state event (spec 8.7).
func (s *Store) appendEvents(ctx context.Context, tx pgx.Tx, c *Conversation, status, responder string, events ...newEvent) error {
	return s.appendRemembering(ctx, tx, c, status, responder, nil, events...)
}

// remembered is a Personal Agent message ID to record with the events
// that its message added (spec 8.3).
type remembered struct {
	owner Owner
	id    string
	hash  []byte
}

// appendSQL is appendEvents' one statement: the conversation's row, its
// events and the notification, and with remember the message ID, in one
// round trip. Its arguments are those of appendRemembering.
const appendSQL = `WITH u AS (
		UPDATE conversations SET last_seq = last_seq + $3, status = $4, responder = $5,
			last_activity_at = $6, first_event_at = coalesce(first_event_at, $6),
			queued_at = CASE WHEN $4 = 'queued' THEN coalesce(queued_at, $6) ELSE NULL END,
			closed_at = CASE WHEN $4 = 'closed' THEN coalesce(closed_at, $6) ELSE NULL END
		WHERE company_id = $1 AND id = $2 RETURNING last_seq
	)` + appendEventsSQL

// appendEventsSQL inserts the events $7, $8 and $9 (types, bodies and
// verified facts as text, of equal length $3) after the updated row u's
// new last_seq, at time $6, as the CTE e.
const appendEventsSQL = `, e AS (
		INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at, verified)
		SELECT $1, $2, u.last_seq - $3 + t.n, t.type, t.body::jsonb, $6, t.verified::jsonb
		FROM u, unnest($7::text[], $8::text[], $9::text[]) WITH ORDINALITY AS t(type, body, verified, n)
		RETURNING seq, type, body, created_at
	)`

// appendRememberSQL adds the message ID (remembered) to appendSQL.
const appendRememberSQL = `, m AS (
		INSERT INTO conversation_message_ids
			(company_id, client_id, user_id, message_id, conversation_id, content_hash, response)
		SELECT $1, $12, $13, $14, $2, $15, $16 FROM u
	)`

// appendNotify is the notification sent on commit (Hub) on channel $10
// for the conversation's key $11, with the events e as stored, read back
// as a read reads them, when they fit; it reads appendNotified.
var appendNotify = `pg_notify($10, CASE WHEN octet_length(x.p) <= ` + strconv.Itoa(maxPayload) + ` THEN x.p ELSE $11 END)`

// appendNotified is appendNotify's payload, x.p.
const appendNotified = `(SELECT $11 || ' ' || json_agg(json_build_object('seq', seq, 'type', type, 'body', body, 'created_at', created_at)
		ORDER BY seq) AS p FROM e) x`

// appendEnd ends appendSQL: the new last event's seq, and the
// notification.
var appendEnd = ` SELECT last_seq, ` + appendNotify + ` FROM u, ` + appendNotified

// appendRemembering is appendEvents, recording remember's message ID with
// its reply, when not nil, in the same statement.
func (s *Store) appendRemembering(ctx context.Context, tx pgx.Tx, c *Conversation, status, responder string,
	remember *remembered, events ...newEvent) error {
	if status != c.Status || responder != c.Responder {
		events = append(events, stateEvent(status, responder))
	}
	if len(events) == 0 {
		return nil
	}
	now := s.now()
	types, bodies, facts, err := encodeEvents(events)
	if err != nil {
		return err
	}
	sql := appendSQL
	args := []any{c.CompanyID, c.ID, len(events), status, responder, now, types, bodies, facts,
		eventsChannel, hubKey(c.CompanyID, c.ID)}
	if remember != nil {
		after := *c
		after.Status, after.Responder = status, responder
		reply, err := json.Marshal(replyOf(&after))
		if err != nil {
			return err
		}
		sql += appendRememberSQL
		args = append(args, remember.owner.ClientID, remember.owner.UserID, remember.id, remember.hash, reply)
	}
	var last int64
	if err := tx.QueryRow(ctx, sql+appendEnd, args...).Scan(&last, nil); err != nil {
		return err
	}
	c.LastSeq, c.Status, c.Responder = last, status, responder
	return nil
}

// encodeEvents is events as appendEventsSQL takes them: their types,
// bodies and verified facts (nil for none) as JSON text.
func encodeEvents(events []newEvent) (types, bodies []string, facts []*string, err error) {
	types = make([]string, len(events))
	bodies = make([]string, len(events))
	facts = make([]*string, len(events))
	for i, e := range events {
		body := e.Raw
		if body == nil {
			var err error
			if body, err = json.Marshal(e.Body); err != nil {
				return nil, nil, nil, err
			}
		}
		types[i], bodies[i] = e.Type, string(body)
		if e.Verified != nil {
			raw, err := json.Marshal(e.Verified)
			if err != nil {
				return nil, nil, nil, err
			}
			f := string(raw)
			facts[i] = &f
		}
	}
	return types, bodies, facts, nil
}

// deliver schedules the Company Agent's webhook for c.
func (s *Store) deliver(ctx context.Context, tx pgx.Tx, c *Conversation) error {
	if s.enqueue == nil {
		return nil
	}
	return s.enqueue.EnqueueConversation(ctx, tx, c)
}

// skipper is an Enqueuer that can tell ahead of a transaction that it
// would schedule nothing for a conversation of the Company.
type skipper interface {
	skips(ctx context.Context, companyID int64) bool
}

// delivers says whether deliver may schedule something for a
// conversation of the Company.
func (s *Store) delivers(ctx context.Context, companyID int64) bool {
	if s.enqueue == nil {
		return false
	}
	sk, ok := s.enqueue.(skipper)
	return !ok || !sk.skips(ctx, companyID)
}

// Events returns up to limit events after seq, and whether there are
// more.
func (s *Store) Events(ctx context.Context, companyID int64, id string, after int64, limit int) ([]Event, bool, error) {
	return events(ctx, s.pool, companyID, id, after, limit)
}

func events(ctx context.Context, q db.Executor, companyID int64, id string, after int64, limit int) ([]Event, bool, error) {
	rows, err := q.Query(ctx, `SELECT seq, type, body, created_at FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`,
		companyID, id, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var (
			e    Event
			body []byte
		)
		if err := row.Scan(&e.Seq, &e.Type, &body, &e.CreatedAt); err != nil {
			return e, err
		}
		// Numbers stay as written: data may hold IDs beyond float64.
		v, err := decodeNumbers(body)
		if err != nil {
			return e, err
		}
		e.Body, _ = v.(map[string]any)
		return e, nil
	})
	if err != nil {
		return nil, false, err
	}
	if len(events) > limit {
		return events[:limit], true, nil
	}
	return events, false, nil
}

// snapshot returns a conversation and up to limit events after seq from
// one snapshot, so the status and responder of a read are never older
// than its events; the conversation is nil when it is gone.
func (s *Store) snapshot(ctx context.Context, companyID int64, id string, after int64, limit int) (*Conversation, []Event, bool, error) {
	var (
		c    *Conversation
		evs  []Event
		more bool
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var err error
			if c, err = get(ctx, tx, companyID, id, false); err != nil || c == nil {
				return err
			}
			evs, more, err = events(ctx, tx, companyID, id, after, limit)
			return err
		})
	return c, evs, more, err
}
