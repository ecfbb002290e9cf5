package conversations

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The Company side's store: the conversations the Company API lists and
// changes. Every change goes through appendEvents in a transaction marked
// as the Company's, so its events are not sent back to the Company's own
// webhook.

// Event origins (conversation_events.origin).
const (
	originCompany  = "company"
	originPlatform = "platform"
)

const viewColumns = `id, coalesce(parent_id, ''), coalesce(user_requested_event_id, ''), coalesce(open_direct_id, ''),
	status, responder, context, client_id, user_id, coalesce(account_id, 0), last_seq, delivered_seq,
	created_at, last_activity_at, queued_at, closed_at`

func scanView(row pgx.Row) (*ConversationView, error) {
	var (
		v       ConversationView
		account int64
	)
	err := row.Scan(&v.ID, &v.ParentID, &v.UserRequestedEventID, &v.DirectID, &v.Status, &v.Responder, &v.Context,
		&v.Owner.ClientID, &v.Owner.UserID, &account, &v.lastSeq, &v.deliveredSeq,
		&v.CreatedAt, &v.LastActivityAt, &v.QueuedAt, &v.ClosedAt)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if account != 0 {
		v.Owner.Account = strconv.FormatInt(account, 10)
	}
	if v.lastSeq > 0 {
		v.Cursor = eventID(v.lastSeq)
	}
	if v.Context == nil {
		v.Context = map[string]json.RawMessage{}
	}
	return &v, nil
}

// loadView returns a conversation of the Company, or nil.
func loadView(ctx context.Context, q db.Executor, companyID int64, id string) (*ConversationView, error) {
	if !validID(id) {
		return nil, nil
	}
	return scanView(q.QueryRow(ctx, `SELECT `+viewColumns+` FROM conversations WHERE company_id = $1 AND id = $2`,
		companyID, id))
}

// CompanyGet returns a conversation of the Company, or nil.
func (s *Store) CompanyGet(ctx context.Context, companyID int64, id string) (*ConversationView, error) {
	return loadView(ctx, s.pool, companyID, id)
}

// ListFilter selects conversations for the Company API and the staff
// console's search.
type ListFilter struct {
	// Status, when set, keeps conversations with that status.
	Status string
	// ClientID, when set, keeps the conversations of that Personal
	// Agent (its client_id).
	ClientID string
	// From and To, when set, keep conversations created at or after From
	// and before To.
	From, To time.Time
	// Before, when set, lists conversations created before that one.
	Before string
	Limit  int
}

// CompanyList lists the Company's conversations, newest first.
func (s *Store) CompanyList(ctx context.Context, companyID int64, f ListFilter) ([]*ConversationView, error) {
	// One statement per filter, each a range scan of an index
	// (conversations_company_created, conversations_company_status_created)
	// whose plan does not depend on the filter's value.
	sql := `SELECT ` + viewColumns + ` FROM conversations WHERE company_id = $1`
	args := []any{companyID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Status != "" {
		sql += ` AND status = ` + arg(f.Status)
	}
	// The Personal Agent and the dates narrow the range scan; none has an
	// index of its own, which every message's update would pay for
	// (docs/decisions.md, "The console's conversation search").
	if f.ClientID != "" {
		sql += ` AND client_id = ` + arg(f.ClientID)
	}
	if !f.From.IsZero() {
		sql += ` AND created_at >= ` + arg(f.From)
	}
	if !f.To.IsZero() {
		sql += ` AND created_at < ` + arg(f.To)
	}
	if f.Before != "" {
		before, err := loadView(ctx, s.pool, companyID, f.Before)
		if err != nil {
			return nil, err
		}
		if before == nil {
			return nil, invalid("before is not a conversation of the Company")
		}
		sql += ` AND (created_at, id) < (` + arg(before.CreatedAt) + `, ` + arg(before.ID) + `)`
	}
	rows, err := s.pool.Query(ctx, sql+` ORDER BY created_at DESC, id DESC LIMIT `+arg(f.Limit), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*ConversationView{}
	for rows.Next() {
		v, err := scanView(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// asOrigin marks the events tx adds as origin's (the column's default
// reads this setting), for the rest of tx.
func asOrigin(ctx context.Context, tx pgx.Tx, origin string) error {
	_, err := tx.Exec(ctx, `SELECT set_config('poppyhost.event_origin', $1, true)`, origin)
	return err
}

// companyTx runs f on the Company's conversation id, locked and not
// closed, in a transaction whose events are the Company's; f's answer is
// the answer.
func (s *Store) companyTx(ctx context.Context, companyID int64, id string, f func(tx pgx.Tx, c *Conversation) (*Posted, error)) (*Posted, error) {
	var out *Posted
	err := s.onConversation(ctx, companyID, id, true, func(tx pgx.Tx, c *Conversation) error {
		switch {
		case c == nil:
			return notFound()
		case c.Status == StatusClosed:
			return closedError()
		}
		// The setting holds for the rest of tx, so for every event f adds.
		if err := asOrigin(ctx, tx, originCompany); err != nil {
			return err
		}
		var err error
		out, err = f(tx, c)
		return err
	})
	return out, err
}

// post appends events to c, with status and responder after them, and
// answers with the state and the first event's ID (none without events).
func (s *Store) post(ctx context.Context, tx pgx.Tx, c *Conversation, status, responder string, events ...newEvent) (*Posted, error) {
	var seq int64
	if len(events) > 0 {
		seq = c.LastSeq + 1
	}
	if err := s.appendEvents(ctx, tx, c, status, responder, events...); err != nil {
		return nil, err
	}
	return postedOf(c, seq), nil
}

// agentExtensions returns the extensions the Personal Agent declared on
// its latest verified request in the conversation or its parent, name to
// version, or nil when none is known.
func agentExtensions(ctx context.Context, tx pgx.Tx, c *Conversation) (map[string]string, error) {
	var v *verified.Facts
	err := tx.QueryRow(ctx, `SELECT verified FROM conversation_events
		WHERE company_id = $1 AND conversation_id IN ($2, $3) AND verified IS NOT NULL
		ORDER BY created_at DESC, seq DESC LIMIT 1`, c.CompanyID, c.ID, c.ParentID).Scan(&v)
	if db.IsNotFound(err) || v == nil {
		return nil, nil
	}
	return v.Extensions, err
}

// findCompanyMessage returns the seq and message of the Company's message
// id in the conversation, or 0.
func findCompanyMessage(ctx context.Context, tx pgx.Tx, c *Conversation, id string) (int64, map[string]any, error) {
	var (
		seq  int64
		body map[string]any
	)
	err := tx.QueryRow(ctx, `SELECT seq, body->'message' FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2 AND type = 'message'
			AND body->'message'->>'role' = 'company' AND body->'message'->>'id' = $3
		ORDER BY seq LIMIT 1`, c.CompanyID, c.ID, id).Scan(&seq, &body)
	if db.IsNotFound(err) {
		return 0, nil, nil
	}
	return seq, body, err
}

// CompanyPost adds a Company message (spec 8.4, 8.7). status, when set,
// is the status after it. A message ID the Company already used in the
// conversation with the same content returns the first post; with other
// content, message_id_conflict.
func (s *Store) CompanyPost(ctx context.Context, co *tenant.Company, id string, cm *CompanyMessage, status string) (*Posted, error) {
	m, err := cm.check(co)
	if err != nil {
		return nil, err
	}
	if status != "" {
		if err := checkCompanyStatus(status); err != nil {
			return nil, err
		}
	}
	ops, err := takeCompanyOps(ctx, co, m, cm.ID != "", s.ops)
	if err != nil {
		return nil, err
	}
	posted, err := s.companyTx(ctx, co.ID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		declared, err := agentExtensions(ctx, tx, c)
		if err != nil {
			return nil, err
		}
		dropUndeclared(m, co, declared)
		if ops != nil {
			if err := requireDeclared(declared); err != nil {
				return nil, err
			}
			if replay, err := replayOps(ctx, tx, c, m, ops); err != nil || replay != nil {
				return replay, err
			}
			if err := s.attachOps(ctx, tx, co, c, m, ops); err != nil {
				return nil, err
			}
		}
		if m.Text == nil && len(m.Data) == 0 && m.Extensions == nil {
			return nil, invalid("the Personal Agent lists none of the message's extensions with the Company's version, and " +
				"a message needs text, data or extensions (spec 8.4)")
		}
		if cm.ID != "" {
			seq, stored, err := findCompanyMessage(ctx, tx, c, m.ID)
			switch {
			case err != nil:
				return nil, err
			case seq > 0 && !sameMessage(stored, m):
				return nil, httpx.Errorf(httpx.CodeMessageIDConflict, "this message ID was already used in the conversation with other content")
			case seq > 0:
				out := postedOf(c, seq).with(m)
				out.replayed = true
				return out, nil
			}
		}
		next, responder := status, c.Responder
		if next == "" {
			next = statusAfterMessage(c, m)
		}
		if m.Author.Type == ResponderHuman {
			responder = ResponderHuman
		}
		out, err := s.post(ctx, tx, c, next, responder, messageEvent(m))
		if err != nil {
			return nil, err
		}
		return out.with(m), nil
	})
	if err == nil && !posted.replayed {
		s.metrics.message(m.Author.Type)
	}
	return posted, err
}

// CompanyStatus sets the status (spec 8.7): working while the Company
// Agent prepares a reply, idle, or queued when it hands off to a person on
// its own (8.9).
func (s *Store) CompanyStatus(ctx context.Context, companyID int64, id, status string) (*Posted, error) {
	if err := checkCompanyStatus(status); err != nil {
		return nil, err
	}
	return s.companyTx(ctx, companyID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		return s.post(ctx, tx, c, status, c.Responder)
	})
}

// CompanyJoin makes a person the responder (spec 8.7, 8.9): idle with
// responder human, ending a pending handoff. text, when set, is their
// first message, by author.
func (s *Store) CompanyJoin(ctx context.Context, companyID int64, id string, author *Author, text *string) (*Posted, error) {
	a := Author{Type: ResponderHuman}
	if author != nil {
		if author.Type != "" && author.Type != ResponderHuman {
			return nil, invalid("author.type of a person who joins is human (spec 8.8)")
		}
		a = *author
		a.Type = ResponderHuman
	}
	if err := checkAuthor(&a); err != nil {
		return nil, err
	}
	var m *Message
	if text != nil {
		if *text == "" || !utf8.ValidString(*text) || len(*text) > maxMessageBytes {
			return nil, invalid("text must be UTF-8 text of 1 to %d bytes", maxMessageBytes)
		}
		if msg := httpx.DisguiseProblem(*text); msg != "" {
			return nil, invalid("text %s", msg)
		}
		m = &Message{ID: newID(companyMessagePrefix), Role: "company", Author: a, Text: text}
	}
	posted, err := s.companyTx(ctx, companyID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		out, err := s.post(ctx, tx, c, StatusIdle, ResponderHuman)
		if err != nil || m == nil {
			return out, err
		}
		// The message follows the state event that says a person answers.
		if out, err = s.post(ctx, tx, c, StatusIdle, ResponderHuman, messageEvent(m)); err != nil {
			return nil, err
		}
		return out.with(m), nil
	})
	if err == nil && m != nil {
		s.metrics.message(ResponderHuman)
	}
	return posted, err
}

// endHandoff moves a queued conversation back to idle with the Company
// Agent, which says why in a message (spec 8.9).
func (s *Store) endHandoff(ctx context.Context, tx pgx.Tx, c *Conversation, text string) (int64, *Message, error) {
	m := &Message{ID: newID(companyMessagePrefix), Role: "company", Author: Author{Type: ResponderAgent}, Text: &text}
	seq := c.LastSeq + 1
	return seq, m, s.appendEvents(ctx, tx, c, StatusIdle, ResponderAgent, messageEvent(m))
}

// CompanyHandoffUnavailable ends a pending handoff that found nobody
// (spec 8.9): idle with responder agent, and a message from the Company
// Agent saying so, text or the Company's configured message.
func (s *Store) CompanyHandoffUnavailable(ctx context.Context, co *tenant.Company, id, text string) (*Posted, error) {
	if text == "" {
		text = handoffUnavailableText(&co.Settings.Conversations)
	}
	if err := checkText("text", text, maxReasonLen); err != nil {
		return nil, err
	}
	posted, err := s.companyTx(ctx, co.ID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		if c.Status != StatusQueued {
			return nil, httpx.Errorf(httpx.CodeConflict, "the conversation is %s, not queued: there is no handoff to end", c.Status)
		}
		seq, m, err := s.endHandoff(ctx, tx, c, text)
		if err != nil {
			return nil, err
		}
		return postedOf(c, seq).with(m), nil
	})
	if err == nil {
		s.metrics.message(ResponderAgent)
	}
	return posted, err
}

// CompanyHandBack gives a conversation a person answers back to the
// Company Agent (spec 8.7, 8.9): idle with responder agent, a state event
// the Personal Agent reads. The Company Agent answers the Personal
// Agent's next message, which makes it working again when the Company has
// an agent webhook. A conversation the Company Agent already answers is a
// conflict; a pending handoff ends with CompanyHandoffUnavailable.
func (s *Store) CompanyHandBack(ctx context.Context, companyID int64, id string) (*Posted, error) {
	return s.companyTx(ctx, companyID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		if c.Responder != ResponderHuman {
			return nil, httpx.Errorf(httpx.CodeConflict,
				"no person answers this conversation (responder agent): there is nothing to hand back; a pending handoff ends with handoff-unavailable")
		}
		return s.post(ctx, tx, c, StatusIdle, ResponderAgent)
	})
}

// CompanyUserRequested asks to talk with the User (spec 8.10): a
// user_requested event with reason, which changes neither status nor
// responder. A Direct Conversation cannot have one: its User is already
// there, and it cannot be a parent.
func (s *Store) CompanyUserRequested(ctx context.Context, companyID int64, id, reason string) (*Posted, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, invalid("reason is required (spec 8.10)")
	}
	if err := checkText("reason", reason, maxReasonLen); err != nil {
		return nil, err
	}
	return s.companyTx(ctx, companyID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		if c.ParentID != "" {
			return nil, invalid("this is a Direct Conversation: the User is already in it (spec 8.10)")
		}
		return s.post(ctx, tx, c, c.Status, c.Responder,
			newEvent{Type: EventUserRequested, Body: map[string]any{"reason": reason}})
	})
}

// CompanyAuthorization says the Company Agent needs the User's account
// with scopes (spec 8.11): an authorization event. Each scope must be one
// the Company's issuer offers.
func (s *Store) CompanyAuthorization(ctx context.Context, co *tenant.Company, id, scope string) (*Posted, error) {
	if !co.Settings.Auth.Issuer {
		return nil, invalid("the Company has no issuer, so a Personal Agent cannot sign in (spec 3.2)")
	}
	scopes := strings.Fields(scope)
	if len(scopes) == 0 {
		return nil, invalid("scope is required: the scopes needed, separated by spaces (spec 8.11)")
	}
	seen := map[string]bool{}
	for _, sc := range scopes {
		if _, ok := co.Settings.Auth.Scopes[sc]; !ok {
			return nil, invalid("scope %q is not one of the Company's scopes (auth.scopes)", sc)
		}
		if seen[sc] {
			return nil, invalid("scope %q is listed twice", sc)
		}
		seen[sc] = true
	}
	return s.companyTx(ctx, co.ID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		return s.post(ctx, tx, c, c.Status, c.Responder, newEvent{Type: EventAuthorization,
			Body: map[string]any{"error": "insufficient_scope", "scope": strings.Join(scopes, " ")}})
	})
}

// CompanyClose closes a conversation (spec 8.12), with its open Direct
// Conversation, as the Personal Agent's close does. Closing a closed
// conversation changes nothing.
func (s *Store) CompanyClose(ctx context.Context, companyID int64, id string) (*Posted, error) {
	if !validID(id) {
		return nil, notFound()
	}
	var out *Conversation
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if err := asOrigin(ctx, tx, originCompany); err != nil {
			return err
		}
		// close locks a parent before its child, so nothing is locked here.
		c, err := s.close(ctx, tx, companyID, id)
		if err == nil && c == nil {
			err = notFound()
		}
		out = c
		return err
	})
	if err != nil {
		return nil, err
	}
	return postedOf(out, 0), nil
}

// CompanyDelta sends a piece of the text of a Company message being
// written (spec 8.6) to the conversation's readers. It is not stored; the
// complete message follows with the same message ID.
func (s *Store) CompanyDelta(ctx context.Context, companyID int64, id, messageID, text string) error {
	if !validID(messageID) {
		return invalid("message_id must be 1 to 256 URL-safe base64 characters: the ID the message will be posted with")
	}
	if text == "" || !utf8.ValidString(text) || len(text) > maxDeltaBytes {
		return invalid("text must be UTF-8 text of 1 to %d bytes; send longer text in several deltas", maxDeltaBytes)
	}
	if msg := httpx.DisguiseProblem(text); msg != "" {
		return invalid("text %s", msg)
	}
	c, err := s.Get(ctx, companyID, id)
	switch {
	case err != nil:
		return err
	case c == nil:
		return notFound()
	case c.Status == StatusClosed:
		return closedError()
	}
	return PublishDelta(ctx, s.pool, Delta{CompanyID: companyID, ConversationID: c.ID, MessageID: messageID, Text: text})
}
