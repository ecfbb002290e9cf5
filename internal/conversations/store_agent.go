package conversations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The Personal Agent side's store (spec 8.2, 8.3, 8.9, 8.10, 8.12):
// starting conversations and Direct Conversations, sending messages once
// per message ID, handoffs and closing, each in one transaction on the
// conversation's row.

// Owner is who a Personal Agent request speaks for (spec 8.2).
type Owner struct {
	ClientID string
	UserID   string
	// AccountID is the account of the request's access token, or 0.
	AccountID int64
	// Verified are the request's verified facts for the webhook; not part
	// of ownership.
	Verified *verified.Facts
}

// errSignInNeeded: the conversation used an account, and the request of
// the same User carries no access token (spec 8.11): a challenge.
var errSignInNeeded = errors.New("this conversation used the User's account: send an access token for it")

// owns applies the ownership table of spec 8.2: any mismatch looks like a
// missing conversation, except the same User signed out of the account
// the conversation used, who gets a challenge.
func (o Owner) owns(c *Conversation) error {
	if c == nil || c.ClientID != o.ClientID || c.UserID != o.UserID {
		return notFound()
	}
	switch {
	case c.AccountID == 0 || c.AccountID == o.AccountID:
		return nil
	case o.AccountID == 0:
		return errSignInNeeded
	default:
		return notFound()
	}
}

// StartRequest is the body of POST {endpoint} (spec 8.3, 8.10).
type StartRequest struct {
	ParentID        string   `json:"parent_conversation_id"`
	AcceptedEventID string   `json:"user_requested_event_id"`
	Message         *Message `json:"message"`
}

// Policy is what the Company's settings decide for the Personal Agent
// side.
type Policy struct {
	// HasAgent: a Company Agent prepares replies, so a new message makes
	// the conversation working; without one it waits idle for staff.
	HasAgent bool
}

func (p Policy) afterMessage(c *Conversation) string {
	if p.HasAgent && c.Responder == ResponderAgent && c.Status != StatusQueued {
		return StatusWorking
	}
	return c.Status
}

// retried runs f again once when it lost a race on a unique key, such as
// two copies of one first message: the second run finds the first's work.
func retried(f func() (*Conversation, error)) (*Conversation, error) {
	c, err := f()
	if db.IsConflict(err, "") {
		return f()
	}
	return c, err
}

// usedMessage is a message ID the User already used (spec 8.3).
type usedMessage struct {
	ConversationID string
	// Same says the content matches: a retry.
	Same bool
	// Reply is the original response.
	Reply Reply
}

// findMessage returns what the User's message ID was used for, or nil.
func findMessage(ctx context.Context, tx pgx.Tx, companyID int64, o Owner, id string, hash []byte) (*usedMessage, error) {
	var (
		usedIn string
		stored []byte
		reply  []byte
	)
	err := tx.QueryRow(ctx, `SELECT conversation_id, content_hash, response FROM conversation_message_ids
		WHERE company_id = $1 AND client_id = $2 AND user_id = $3 AND message_id = $4`,
		companyID, o.ClientID, o.UserID, id).Scan(&usedIn, &stored, &reply)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return usedOf(usedIn, stored, reply, hash)
}

// usedOf is a recorded message ID: used in conversation usedIn, with the
// stored content hash and reply, compared with a request's hash.
func usedOf(usedIn string, stored, reply, hash []byte) (*usedMessage, error) {
	u := &usedMessage{ConversationID: usedIn, Same: bytes.Equal(stored, hash)}
	if err := json.Unmarshal(reply, &u.Reply); err != nil {
		return nil, err
	}
	return u, nil
}

// retriedReply is a conversation as a retried message's original
// response showed it: "it returns the original response" (spec 8.3). A
// retry with wait reads the current state anyway.
func retriedReply(c *Conversation, u *usedMessage) *Conversation {
	out := *c
	if u.Reply.Status != "" && u.Reply.Responder != "" {
		out.Status, out.Responder = u.Reply.Status, u.Reply.Responder
	}
	return &out
}

func conflict() error {
	return httpx.Errorf(httpx.CodeMessageIDConflict, "this message ID was already used with other content (spec 8.3)")
}

func rememberMessage(ctx context.Context, tx pgx.Tx, c *Conversation, o Owner, id string, hash []byte) error {
	reply, _ := json.Marshal(replyOf(c))
	_, err := tx.Exec(ctx, `INSERT INTO conversation_message_ids
		(company_id, client_id, user_id, message_id, conversation_id, content_hash, response)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, c.CompanyID, o.ClientID, o.UserID, id, c.ID, hash, reply)
	return err
}

// messageEvent is the event of a Personal Agent message, its data kept as
// written (numbers are not rounded through float64).
// agentMessageEvent is a Personal Agent message with the facts verified
// on its request.
func agentMessageEvent(m *Message, o Owner) newEvent {
	e := messageEvent(m)
	e.Verified = o.Verified
	return e
}

func messageEvent(m *Message) newEvent {
	raw, _ := json.Marshal(m)
	body, _ := decodeNumbers(raw)
	return newEvent{Type: EventMessage, Body: map[string]any{"message": body}}
}

// Start starts a conversation, or a Direct Conversation under a parent
// (spec 8.3, 8.10). A retried first message returns the conversation it
// started; a repeated acceptance returns the Direct Conversation it
// opened.
func (s *Store) Start(ctx context.Context, companyID int64, o Owner, req StartRequest, p Policy) (*Conversation, error) {
	return s.start(ctx, companyID, o, req, p, nil)
}

// precheck refuses a request before it changes anything, given the
// conversation it would answer with, or nil for a new one: the handler
// checks the cursor of a POST with wait, so that a bad cursor does not
// come back after the message was accepted.
type precheck func(c *Conversation) error

func (f precheck) run(c *Conversation) error {
	if f == nil {
		return nil
	}
	return f(c)
}

func (s *Store) start(ctx context.Context, companyID int64, o Owner, req StartRequest, p Policy, check precheck) (*Conversation, error) {
	if req.Message == nil && (req.ParentID == "" || req.AcceptedEventID == "") {
		return nil, invalid("message is required, except when accepting a user_requested event (spec 8.10)")
	}
	if req.AcceptedEventID != "" && req.ParentID == "" {
		return nil, invalid("user_requested_event_id needs parent_conversation_id (spec 8.10)")
	}
	var (
		hash     []byte
		approval *operations.Approval
	)
	if req.Message != nil {
		var err error
		if approval, err = s.takeApproval(ctx, o, req.Message); err != nil {
			return nil, err
		}
		hash = contentHash(req.Message, "start", req.ParentID, req.AcceptedEventID)
	}
	var stored bool
	c, err := retried(func() (*Conversation, error) {
		var out *Conversation
		stored = false
		err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			if req.Message != nil {
				used, err := findMessage(ctx, tx, companyID, o, req.Message.ID, hash)
				switch {
				case err != nil:
					return err
				case used != nil && !used.Same:
					return conflict()
				case used != nil:
					c, err := get(ctx, tx, companyID, used.ConversationID, false)
					if err != nil {
						return err
					}
					if err := o.owns(c); err != nil {
						return err
					}
					if err := check.run(c); err != nil {
						return err
					}
					out = retriedReply(c, used)
					return nil
				}
			}
			var parent *Conversation
			if req.ParentID != "" {
				var err error
				if parent, err = s.lockParent(ctx, tx, companyID, o, req); err != nil {
					return err
				}
				if req.AcceptedEventID != "" {
					direct, err := acceptedDirect(ctx, tx, companyID, req)
					if err != nil {
						return err
					}
					if direct != nil {
						if err := o.owns(direct); err != nil {
							return err
						}
						if err := check.run(direct); err != nil {
							return err
						}
						out = direct
						return nil
					}
				}
				if err := checkParentOpen(parent); err != nil {
					return err
				}
			}
			if err := check.run(nil); err != nil {
				return err
			}
			c, err := s.insert(ctx, tx, companyID, o, req, p)
			if err != nil {
				return err
			}
			if parent != nil {
				if _, err := tx.Exec(ctx, `UPDATE conversations SET open_direct_id = $3 WHERE company_id = $1 AND id = $2`,
					companyID, parent.ID, c.ID); err != nil {
					return err
				}
				if err := s.appendEvents(ctx, tx, parent, parent.Status, parent.Responder,
					newEvent{Type: EventDirectOpened, Body: map[string]any{"conversation_id": c.ID}}); err != nil {
					return err
				}
			}
			if req.Message != nil {
				if err := rememberMessage(ctx, tx, c, o, req.Message.ID, hash); err != nil {
					return err
				}
				// The first message is the first event.
				if err := s.schedulePerform(ctx, tx, c, o, req.Message.ID, 1, approval); err != nil {
					return err
				}
				stored = true
			}
			out = c
			return s.deliver(ctx, tx, c)
		})
		return out, err
	})
	if err == nil && stored {
		s.metrics.message("")
	}
	return c, err
}

// lockParent locks and checks a Direct Conversation's parent (spec 8.10).
func (s *Store) lockParent(ctx context.Context, tx pgx.Tx, companyID int64, o Owner, req StartRequest) (*Conversation, error) {
	if !validID(req.ParentID) {
		return nil, notFound()
	}
	parent, err := get(ctx, tx, companyID, req.ParentID, true)
	if err != nil {
		return nil, err
	}
	if err := o.owns(parent); err != nil {
		return nil, err
	}
	if parent.ParentID != "" {
		return nil, notFound()
	}
	if req.AcceptedEventID != "" {
		seq, ok := parseEventID(req.AcceptedEventID)
		var typ string
		if ok {
			err = tx.QueryRow(ctx, `SELECT type FROM conversation_events
				WHERE company_id = $1 AND conversation_id = $2 AND seq = $3`, companyID, parent.ID, seq).Scan(&typ)
			if err != nil && !db.IsNotFound(err) {
				return nil, err
			}
		}
		if typ != EventUserRequested {
			return nil, invalid("user_requested_event_id does not name a user_requested event of the parent (spec 8.10)")
		}
	}
	return parent, nil
}

func acceptedDirect(ctx context.Context, tx pgx.Tx, companyID int64, req StartRequest) (*Conversation, error) {
	return scanConversation(companyID, tx.QueryRow(ctx, `SELECT `+conversationColumns+` FROM conversations
		WHERE company_id = $1 AND parent_id = $2 AND user_requested_event_id = $3`,
		companyID, req.ParentID, req.AcceptedEventID))
}

func checkParentOpen(parent *Conversation) error {
	return refuseClosedOrDirect(parent, "the parent conversation is closed", "the parent already has an open Direct Conversation")
}

// insert creates the conversation row and its first events.
func (s *Store) insert(ctx context.Context, tx pgx.Tx, companyID int64, o Owner, req StartRequest, p Policy) (*Conversation, error) {
	now := s.now()
	c := &Conversation{CompanyID: companyID, ID: newID(conversationPrefix), ClientID: o.ClientID, UserID: o.UserID,
		AccountID: o.AccountID, ParentID: req.ParentID, AcceptedID: req.AcceptedEventID, CreatedAt: now}
	ctxJSON := []byte("{}")
	if req.Message != nil && req.Message.Context != nil {
		ctxJSON, _ = json.Marshal(req.Message.Context)
	}
	var account *int64
	if o.AccountID != 0 {
		account = &o.AccountID
	}
	if _, err := tx.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, account_id, parent_id,
			user_requested_event_id, status, responder, context, created_at, last_activity_at)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), nullif($7, ''), 'idle', 'agent', $8, $9, $9)`,
		companyID, c.ID, o.ClientID, o.UserID, account, req.ParentID, req.AcceptedEventID, ctxJSON, now); err != nil {
		return nil, err
	}
	var events []newEvent
	if req.Message != nil {
		events = append(events, agentMessageEvent(req.Message, o))
	}
	status := StatusIdle
	if p.HasAgent {
		// The Company Agent prepares a reply, or the Direct Conversation's
		// first message (spec 8.10).
		status = StatusWorking
	}
	// A new conversation's first state event says where it starts.
	events = append(events, stateEvent(status, ResponderAgent))
	c.Status, c.Responder = status, ResponderAgent
	return c, s.appendEvents(ctx, tx, c, status, ResponderAgent, events...)
}

// Send adds a Personal Agent message to a conversation (spec 8.3).
func (s *Store) Send(ctx context.Context, companyID int64, o Owner, id string, m *Message, p Policy) (*Conversation, error) {
	return s.send(ctx, companyID, o, id, m, p, nil, nil)
}

// send is Send after check; replay, when not nil, is the request's Session
// JWT's jti, recorded in the message's transaction (sessions.DeferReplay).
func (s *Store) send(ctx context.Context, companyID int64, o Owner, id string, m *Message, p Policy, check precheck,
	replay *sessions.Replay) (*Conversation, error) {
	approval, err := s.takeApproval(ctx, o, m)
	if err != nil {
		return nil, err
	}
	if !validID(id) {
		return nil, notFound()
	}
	canon := canonicalMessage(m)
	hash := hashContent(canon, "send", id)
	if check == nil && m.Context == nil && approval == nil && !p.HasAgent && !s.delivers(ctx, companyID) {
		// The event's body is {"message": m} as messageEvent has it.
		event := newEvent{Type: EventMessage, Raw: append(append([]byte(`{"message":`), canon...), '}'),
			Verified: o.Verified}
		c, recorded, err := s.sendAtOnce(ctx, companyID, o, id, m.ID, event, hash, replay)
		if err == nil && c != nil {
			s.metrics.message("")
		}
		if err != nil || c != nil {
			return c, err
		}
		if recorded {
			replay = nil
		}
	}
	var stored bool
	c, err := retried(func() (*Conversation, error) {
		var (
			out  *Conversation
			lock messageLock
		)
		stored = false
		err := db.InTxWith(ctx, s.pool, func(b *pgx.Batch) {
			lock.queue(b, companyID, id, o, m.ID, hash, replay)
		}, func(tx pgx.Tx) error {
			c, used := lock.c, lock.used
			if err := o.owns(c); err != nil {
				return err
			}
			if err := check.run(c); err != nil {
				return err
			}
			switch {
			case used != nil && !used.Same:
				return conflict()
			case used != nil:
				out = retriedReply(c, used)
				return nil
			}
			if err := checkOpen(c); err != nil {
				return err
			}
			if err := bindAccount(ctx, tx, c, o); err != nil {
				return err
			}
			if m.Context != nil {
				// Fields left out keep their values (spec 8.4); the merged
				// context keeps the per-message limit on fields.
				merged, _ := json.Marshal(m.Context)
				tag, err := tx.Exec(ctx, `UPDATE conversations SET context = context || $3::jsonb
					WHERE company_id = $1 AND id = $2
					AND (SELECT count(*) FROM jsonb_object_keys(context || $3::jsonb)) <= $4`,
					companyID, id, merged, maxContextKeys)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					return invalid("the conversation's context would have more than %d fields", maxContextKeys)
				}
			}
			seq := c.LastSeq + 1
			if err := s.appendRemembering(ctx, tx, c, p.afterMessage(c), c.Responder,
				&remembered{owner: o, id: m.ID, hash: hash}, agentMessageEvent(m, o)); err != nil {
				return err
			}
			if err := s.schedulePerform(ctx, tx, c, o, m.ID, seq, approval); err != nil {
				return err
			}
			out, stored = c, true
			return s.deliver(ctx, tx, c)
		})
		return out, err
	})
	if err == nil && replay != nil {
		replay.Committed()
	}
	if err == nil && stored {
		s.metrics.message("")
	}
	return c, err
}

// sendAtOnceSQL adds a message that changes neither the conversation's
// status nor its responder in one statement: the conversation's row
// (locked, checked and updated), the event, the message ID with its reply
// and the notification, in one round trip and one commit. The row is
// updated only when send's transaction would do just that: the request's
// owner owns the conversation (binding its account if it has none yet),
// which is open, has no open Direct Conversation, has had its first event
// and an earlier activity (so that the deadlines' trigger is not
// considered: migration 00043), and whose message ID is new; else the
// statement writes nothing and returns no row. Its arguments: $1 the
// Company, $2 the conversation, $3 1, $4 and $5 the owner's client and
// User IDs, $6 the time, $7 to $9 the event's type, body and verified
// facts (text, the facts NULL for none; one event, so no arrays as in
// appendEventsSQL), $10 and $11 the notification's channel and key, $12
// the request's account or NULL, $13 the message ID, $14 its content hash.
var sendAtOnceSQL = sendAtOnce("")

// sendAtOnceReplaySQL is sendAtOnceSQL recording the request's jti first
// (sessions.ReplayInsert, $15 to $18): the row then waits for a
// transaction that used the jti, and the statement fails if it committed.
var sendAtOnceReplaySQL = sendAtOnce(sessions.ReplayInsert(15))

// sendAtOnce is sendAtOnceSQL, with jti as its first CTE when not "".
func sendAtOnce(jti string) string {
	with, after := "WITH ", ""
	if jti != "" {
		// Read in u's condition, the insert runs before the row is
		// locked, in the order of send's transaction (no deadlock).
		with, after = "WITH j AS ("+jti+" RETURNING true), ", " AND EXISTS (SELECT FROM j)"
	}
	// The owner is compared with IS NOT DISTINCT FROM, which no index
	// can serve (the columns are NOT NULL, so it means =): with client_id
	// = $4 AND user_id = $5 the planner may read the row through
	// conversations_owner, every conversation of the User, rather than by
	// its key (the plans test found it). The UPDATE rechecks it, with
	// every other condition, on the version it locks.
	return with + `u AS (
		UPDATE conversations SET last_seq = last_seq + $3, last_activity_at = $6, account_id = coalesce(account_id, $12)
		WHERE company_id = $1 AND id = $2 AND (client_id, user_id) IS NOT DISTINCT FROM ($4, $5)
			AND (account_id IS NULL OR account_id = $12)
			AND status <> 'closed' AND open_direct_id IS NULL AND first_event_at IS NOT NULL AND last_activity_at < $6
			AND NOT EXISTS (SELECT FROM conversation_message_ids
				WHERE company_id = $1 AND client_id = $4 AND user_id = $5 AND message_id = $13)` + after + `
		RETURNING ` + conversationColumns + `
	), e AS (
		INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at, verified)
		SELECT $1, $2, u.last_seq, $7, $8::text::jsonb, $6, $9::text::jsonb FROM u
		RETURNING seq, type, body, created_at
	), m AS (
		INSERT INTO conversation_message_ids
			(company_id, client_id, user_id, message_id, conversation_id, content_hash, response)
		SELECT $1, $4, $5, $13, $2, $14, jsonb_build_object('conversation_id', id, 'status', status, 'responder', responder)
		FROM u
	) SELECT u.*, ` + appendNotify + ` FROM u, ` + appendNotified
}

// sendAtOnce adds the message messageID, whose event is event, to
// conversation id with sendAtOnceSQL, for a Company without a Company
// Agent (the status stays as it is) and a message that needs nothing else
// of the transaction. It returns the
// conversation, or nil having written nothing, when the conversation is
// not one the message is simply added to: send's transaction then
// decides. recorded says that the request's jti (replay, when not nil)
// was recorded all the same: the request used it.
func (s *Store) sendAtOnce(ctx context.Context, companyID int64, o Owner, id, messageID string, event newEvent, hash []byte,
	replay *sessions.Replay) (c *Conversation, recorded bool, err error) {
	types, bodies, facts, err := encodeEvents([]newEvent{event})
	if err != nil {
		return nil, false, err
	}
	var account *int64
	if o.AccountID != 0 {
		account = &o.AccountID
	}
	sql, args := sendAtOnceSQL, []any{companyID, id, 1, o.ClientID, o.UserID, s.now(), types[0], bodies[0], facts[0],
		eventsChannel, hubKey(companyID, id), account, messageID, hash}
	if replay != nil {
		sql, args = sendAtOnceReplaySQL, append(args, replay.Values()...)
	}
	c, err = scanConversation(companyID, s.pool.QueryRow(ctx, sql, args...), nil)
	switch {
	case replay != nil && sessions.Replayed(err):
		return nil, false, replay.Refuse()
	case db.IsConflict(err, ""):
		// The message ID, used at once by another request: the
		// transaction finds it.
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if replay != nil {
		replay.Committed()
	}
	return c, replay != nil, nil
}

// messageLock is what a message's transaction reads first: the
// conversation with its row locked, nil when there is none, and what the
// User's message ID was used for, or nil.
type messageLock struct {
	c    *Conversation
	used *usedMessage
}

// queue queues on b, the batch that begins the transaction, the read of
// l, in one query; a replay not nil records the request's jti before it,
// and fails the transaction if it was used.
func (l *messageLock) queue(b *pgx.Batch, companyID int64, id string, o Owner, messageID string, hash []byte,
	replay *sessions.Replay) {
	if replay != nil {
		replay.Queue(b)
	}
	b.Queue(`SELECT c.*, m.conversation_id, m.content_hash, m.response
		FROM (SELECT `+conversationColumns+` FROM conversations WHERE company_id = $1 AND id = $2 FOR UPDATE) c
		LEFT JOIN conversation_message_ids m
			ON m.company_id = $1 AND m.client_id = $3 AND m.user_id = $4 AND m.message_id = $5`,
		companyID, id, o.ClientID, o.UserID, messageID).QueryRow(func(row pgx.Row) error {
		var (
			usedIn *string
			stored []byte
			reply  []byte
			err    error
		)
		l.c, err = scanConversation(companyID, row, &usedIn, &stored, &reply)
		if err != nil || l.c == nil || usedIn == nil {
			return err
		}
		l.used, err = usedOf(*usedIn, stored, reply, hash)
		return err
	})
}

// onConversation runs f in a transaction on the Company's conversation id,
// read with its row locked when lock is set; c is nil when there is no
// such conversation.
func (s *Store) onConversation(ctx context.Context, companyID int64, id string, lock bool, f func(tx pgx.Tx, c *Conversation) error) error {
	if !validID(id) {
		return notFound()
	}
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		c, err := get(ctx, tx, companyID, id, lock)
		if err != nil {
			return err
		}
		return f(tx, c)
	})
}

// ownedTx runs f on conversation id once o owns it (spec 8.2), in a
// transaction, with its row locked when lock is set; f's conversation is
// the answer.
func (s *Store) ownedTx(ctx context.Context, companyID int64, o Owner, id string, lock bool, f func(tx pgx.Tx, c *Conversation) (*Conversation, error)) (*Conversation, error) {
	var out *Conversation
	err := s.onConversation(ctx, companyID, id, lock, func(tx pgx.Tx, c *Conversation) error {
		if err := o.owns(c); err != nil {
			return err
		}
		var err error
		out, err = f(tx, c)
		return err
	})
	return out, err
}

// checkOpen refuses messages and handoffs to a closed conversation or a
// parent whose Direct Conversation is open (spec 8.10, 8.12).
func checkOpen(c *Conversation) error {
	return refuseClosedOrDirect(c, "the conversation is closed", "a Direct Conversation is open; talk there until it closes")
}

// refuseClosedOrDirect refuses c when it is closed, or when its Direct
// Conversation is open, which the error names; closed and directOpen say
// why.
func refuseClosedOrDirect(c *Conversation, closed, directOpen string) error {
	switch {
	case c.Status == StatusClosed:
		return &httpx.Error{Code: httpx.CodeConversationClosed, Description: closed}
	case c.OpenDirectID != "":
		return &httpx.Error{Code: httpx.CodeDirectConversationOpen, Description: directOpen,
			Extra: map[string]any{"conversation_id": c.OpenDirectID}}
	}
	return nil
}

// bindAccount makes a signed-in request's account the conversation's
// (spec 8.2: once it uses the account, the account is part of ownership).
func bindAccount(ctx context.Context, tx pgx.Tx, c *Conversation, o Owner) error {
	if o.AccountID == 0 || c.AccountID != 0 {
		return nil
	}
	c.AccountID = o.AccountID
	_, err := tx.Exec(ctx, `UPDATE conversations SET account_id = $3 WHERE company_id = $1 AND id = $2`,
		c.CompanyID, c.ID, o.AccountID)
	return err
}

// Handoff asks for a person (spec 8.9): queued, unless already queued or
// with a person, which changes nothing.
func (s *Store) Handoff(ctx context.Context, companyID int64, o Owner, id string) (*Conversation, error) {
	return s.ownedTx(ctx, companyID, o, id, true, func(tx pgx.Tx, c *Conversation) (*Conversation, error) {
		if err := checkOpen(c); err != nil {
			return nil, err
		}
		if c.Status == StatusQueued || c.Responder == ResponderHuman {
			return c, nil
		}
		if err := bindAccount(ctx, tx, c, o); err != nil {
			return nil, err
		}
		if err := s.appendEvents(ctx, tx, c, StatusQueued, ResponderAgent); err != nil {
			return nil, err
		}
		return c, s.deliver(ctx, tx, c)
	})
}

// Close closes a conversation (spec 8.12), with its open Direct
// Conversation; closing a Direct Conversation reopens its parent to
// messages. Closing a closed conversation changes nothing.
func (s *Store) Close(ctx context.Context, companyID int64, o Owner, id string) (*Conversation, error) {
	// close locks a parent before its child, so nothing is locked here.
	return s.ownedTx(ctx, companyID, o, id, false, func(tx pgx.Tx, _ *Conversation) (*Conversation, error) {
		return s.close(ctx, tx, companyID, id)
	})
}

// close closes conversation id in tx, locking a parent before its child.
func (s *Store) close(ctx context.Context, tx pgx.Tx, companyID int64, id string) (*Conversation, error) {
	c, err := get(ctx, tx, companyID, id, false)
	if err != nil || c == nil {
		return c, err
	}
	var parent *Conversation
	if c.ParentID != "" {
		if parent, err = get(ctx, tx, companyID, c.ParentID, true); err != nil {
			return nil, err
		}
	}
	if c, err = get(ctx, tx, companyID, id, true); err != nil {
		return nil, err
	}
	if c.Status == StatusClosed {
		return c, nil
	}
	if c.OpenDirectID != "" {
		direct, err := get(ctx, tx, companyID, c.OpenDirectID, true)
		if err != nil {
			return nil, err
		}
		if direct != nil && direct.Status != StatusClosed {
			if err := s.appendEvents(ctx, tx, direct, StatusClosed, direct.Responder); err != nil {
				return nil, err
			}
			if err := s.deliver(ctx, tx, direct); err != nil {
				return nil, err
			}
		}
		if err := s.directClosed(ctx, tx, c, c.OpenDirectID); err != nil {
			return nil, err
		}
	}
	if err := s.appendEvents(ctx, tx, c, StatusClosed, c.Responder); err != nil {
		return nil, err
	}
	if parent != nil && parent.OpenDirectID == c.ID {
		if err := s.directClosed(ctx, tx, parent, c.ID); err != nil {
			return nil, err
		}
	}
	return c, s.deliver(ctx, tx, c)
}

// directClosed tells parent that its Direct Conversation directID closed,
// and opens parent to messages again (spec 8.10).
func (s *Store) directClosed(ctx context.Context, tx pgx.Tx, parent *Conversation, directID string) error {
	if err := s.appendEvents(ctx, tx, parent, parent.Status, parent.Responder,
		newEvent{Type: EventDirectClosed, Body: map[string]any{"conversation_id": directID}}); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE conversations SET open_direct_id = NULL WHERE company_id = $1 AND id = $2`,
		parent.CompanyID, parent.ID); err != nil {
		return err
	}
	parent.OpenDirectID = ""
	return nil
}
