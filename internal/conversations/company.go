package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The Company side of conversations: the routes under
// /company/v1/conversations that the Company Agent, or a person on the
// Company's staff, acts through with a Company API key
// (docs/company-agent.md). Every change goes through appendEvents in a
// transaction marked as the Company's, so its events are not sent back to
// the Company's own webhook.

// Event origins (conversation_events.origin).
const (
	originCompany  = "company"
	originPlatform = "platform"
)

// Limits of the Company API.
const (
	maxAuthorIDLen   = 256
	maxAuthorNameLen = 200
	maxImageURLLen   = 2048
	maxDeltaBytes    = 6000
	defaultListLimit = 50
	maxListLimit     = 100
)

// OwnerView is whom a conversation belongs to (spec 8.2): the Personal
// Agent's client_id, the User ID, and the account once the conversation
// used one (its id in decimal, as an access token's sub), else "".
type OwnerView struct {
	ClientID string `json:"client_id"`
	UserID   string `json:"user_id"`
	Account  string `json:"account"`
}

// ConversationView is a conversation as the Company sees it.
type ConversationView struct {
	ID                   string                     `json:"id"`
	ParentID             string                     `json:"parent_conversation_id,omitempty"`
	UserRequestedEventID string                     `json:"user_requested_event_id,omitempty"`
	DirectID             string                     `json:"direct_conversation_id,omitempty"`
	Status               string                     `json:"status"`
	Responder            string                     `json:"responder"`
	Context              map[string]json.RawMessage `json:"context"`
	Owner                OwnerView                  `json:"owner"`
	// Cursor is the newest event's ID, "" before the first.
	Cursor         string     `json:"cursor"`
	CreatedAt      time.Time  `json:"created_at"`
	LastActivityAt time.Time  `json:"last_activity_at"`
	QueuedAt       *time.Time `json:"queued_at,omitempty"`
	ClosedAt       *time.Time `json:"closed_at,omitempty"`

	lastSeq, deliveredSeq int64
}

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
	if errors.Is(err, pgx.ErrNoRows) {
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
func loadView(ctx context.Context, q querier, companyID int64, id string) (*ConversationView, error) {
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

// ListFilter selects conversations for the Company API.
type ListFilter struct {
	// Status, when set, keeps conversations with that status.
	Status string
	// Before, when set, lists conversations created before that one.
	Before string
	Limit  int
}

// CompanyList lists the Company's conversations, newest first.
func (s *Store) CompanyList(ctx context.Context, companyID int64, f ListFilter) ([]*ConversationView, error) {
	sql := `SELECT ` + viewColumns + ` FROM conversations WHERE company_id = $1 AND ($2 = '' OR status = $2)`
	args := []any{companyID, f.Status, f.Limit}
	if f.Before != "" {
		before, err := loadView(ctx, s.pool, companyID, f.Before)
		if err != nil {
			return nil, err
		}
		if before == nil {
			return nil, invalid("before is not a conversation of the Company")
		}
		sql += ` AND (created_at, id) < ($4, $5)`
		args = append(args, before.CreatedAt, before.ID)
	}
	rows, err := s.pool.Query(ctx, sql+` ORDER BY created_at DESC, id DESC LIMIT $3`, args...)
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

// with returns p with the message it added.
func (p *Posted) with(m *Message) *Posted {
	p.Message = m
	return p
}

func closedError() error {
	return httpx.Errorf(httpx.CodeConversationClosed, "the conversation is closed")
}

// CompanyMessage is a message the Company posts (spec 8.4): the Company
// chooses its ID (or we do), and it has no context.
type CompanyMessage struct {
	ID         string                     `json:"id"`
	Author     Author                     `json:"author"`
	Text       *string                    `json:"text"`
	Data       json.RawMessage            `json:"data"`
	Extensions map[string]json.RawMessage `json:"extensions"`
	// Context is refused: only the Personal Agent sends it (spec 8.4).
	Context json.RawMessage `json:"context"`
}

// Posted is the answer to a Company change: the conversation's state, and
// the event the change added, if one.
type Posted struct {
	ConversationID string   `json:"conversation_id"`
	Status         string   `json:"status"`
	Responder      string   `json:"responder"`
	EventID        string   `json:"event_id,omitempty"`
	Message        *Message `json:"message,omitempty"`
	// replayed: a retry of a message already posted, which added nothing.
	replayed bool
}

func postedOf(c *Conversation, seq int64) *Posted {
	p := &Posted{ConversationID: c.ID, Status: c.Status, Responder: c.Responder}
	if seq > 0 {
		p.EventID = eventID(seq)
	}
	return p
}

// checkText applies the rules of short text: at most max characters of
// UTF-8 without control characters other than newline and tab.
func checkText(field, s string, max int) error {
	if msg := httpx.TextProblem(s, false, max, true); msg != "" {
		return invalid("%s %s", field, msg)
	}
	return nil
}

// checkAuthor validates a Company message's author (spec 8.4, 8.8).
func checkAuthor(a *Author) error {
	if a.Type != ResponderAgent && a.Type != ResponderHuman {
		return invalid("message.author.type must be agent or human (spec 8.8)")
	}
	if a.ID != "" {
		if err := checkText("message.author.id", a.ID, maxAuthorIDLen); err != nil {
			return err
		}
	}
	if err := checkText("message.author.name", a.Name, maxAuthorNameLen); err != nil {
		return err
	}
	if a.Image != "" {
		u, err := url.Parse(a.Image)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || len(a.Image) > maxImageURLLen {
			return invalid("message.author.image must be an https URL of at most %d characters (spec 3)", maxImageURLLen)
		}
	}
	return nil
}

// check validates m against the Company's settings and returns it as the
// message to store.
func (m *CompanyMessage) check(co *tenant.Company) (*Message, error) {
	if m.Context != nil {
		return nil, invalid("message.context is for the Personal Agent only (spec 8.4)")
	}
	if m.ID != "" && !validID(m.ID) {
		return nil, invalid("message.id must be 1 to 256 URL-safe base64 characters (spec 8.2)")
	}
	if err := checkAuthor(&m.Author); err != nil {
		return nil, err
	}
	if m.Text == nil && len(m.Data) == 0 && len(m.Extensions) == 0 {
		return nil, invalid("a message needs at least one of text, data or extensions (spec 8.4)")
	}
	if m.Text != nil && !utf8.ValidString(*m.Text) {
		return nil, invalid("message.text must be UTF-8 text")
	}
	if len(m.Data) > 0 && m.Data[0] != '{' && m.Data[0] != '[' {
		return nil, invalid("message.data must be a JSON object or array")
	}
	for name, v := range m.Extensions {
		if len(v) == 0 || v[0] != '{' {
			return nil, invalid("message.extensions.%s must be a JSON object (spec 8.4)", name)
		}
		if _, ok := co.Settings.Extensions[name]; !ok && name != operations.Name {
			return nil, invalid("message.extensions.%s: the Company does not list this extension in its settings (spec 3.3)", name)
		}
	}
	out := &Message{ID: m.ID, Role: "company", Author: m.Author, Text: m.Text, Data: m.Data, Extensions: m.Extensions}
	if out.ID == "" {
		out.ID = newID(companyMessagePrefix)
	}
	if raw, _ := json.Marshal(out); len(raw) > maxMessageBytes {
		return nil, invalid("the message is larger than %d bytes", maxMessageBytes)
	}
	return out, nil
}

// agentExtensions returns the extensions the Personal Agent declared on
// its latest verified request in the conversation or its parent, name to
// version, or nil when none is known.
func agentExtensions(ctx context.Context, tx pgx.Tx, c *Conversation) (map[string]string, error) {
	var v *verified.Facts
	err := tx.QueryRow(ctx, `SELECT verified FROM conversation_events
		WHERE company_id = $1 AND conversation_id IN ($2, $3) AND verified IS NOT NULL
		ORDER BY created_at DESC, seq DESC LIMIT 1`, c.CompanyID, c.ID, c.ParentID).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) || v == nil {
		return nil, nil
	}
	return v.Extensions, err
}

// dropUndeclared removes extension content the Personal Agent does not
// list with the Company's version: a side must not send it (spec 8.4).
func dropUndeclared(m *Message, co *tenant.Company, declared map[string]string) {
	for name := range m.Extensions {
		version, _ := co.Settings.Extensions[name]["version"].(string)
		if declared[name] == "" || declared[name] != version {
			delete(m.Extensions, name)
		}
	}
	if len(m.Extensions) == 0 {
		m.Extensions = nil
	}
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
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, nil
	}
	return seq, body, err
}

func sameMessage(stored map[string]any, m *Message) bool {
	raw, _ := json.Marshal(m)
	var fresh map[string]any
	_ = json.Unmarshal(raw, &fresh)
	return reflect.DeepEqual(stored, fresh)
}

// statusAfterMessage is the status after a Company message that names
// none: a person's message means a person is answering; the Company
// Agent's leaves a pending handoff pending and otherwise waits for the
// Personal Agent.
func statusAfterMessage(c *Conversation, m *Message) string {
	if c.Status == StatusQueued && m.Author.Type == ResponderAgent {
		return StatusQueued
	}
	return StatusIdle
}

// checkCompanyStatus accepts the statuses the Company may set.
func checkCompanyStatus(status string) error {
	switch status {
	case StatusWorking, StatusIdle, StatusQueued:
		return nil
	}
	return invalid("status must be working, idle or queued (spec 8.7); close with /close")
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
	return s.companyTx(ctx, co.ID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
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
		m = &Message{ID: newID(companyMessagePrefix), Role: "company", Author: a, Text: text}
	}
	return s.companyTx(ctx, companyID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
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
}

// defaultHandoffUnavailable is said when a handoff finds nobody and the
// Company configured no message of its own.
const defaultHandoffUnavailable = "No one is available to take this conversation right now. I can keep helping here, or you can ask for a person again later."

func handoffUnavailableText(co *tenant.Company) string {
	if t := co.Settings.Conversations.HandoffUnavailableMessage; t != "" {
		return t
	}
	return defaultHandoffUnavailable
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
		text = handoffUnavailableText(co)
	}
	if err := checkText("text", text, maxReasonLen); err != nil {
		return nil, err
	}
	return s.companyTx(ctx, co.ID, id, func(tx pgx.Tx, c *Conversation) (*Posted, error) {
		if c.Status != StatusQueued {
			return nil, httpx.Errorf(httpx.CodeConflict, "the conversation is %s, not queued: there is no handoff to end", c.Status)
		}
		seq, m, err := s.endHandoff(ctx, tx, c, text)
		if err != nil {
			return nil, err
		}
		return postedOf(c, seq).with(m), nil
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
	err := s.inTx(ctx, func(tx pgx.Tx) error {
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

// CompanyHandler serves the Company API's conversation routes.
type CompanyHandler struct {
	store    *Store
	reads    *Handler
	delivery *Delivery
}

// NewCompanyHandler returns the Company API handler. delivery rotates the
// webhook secret; nil leaves that route out.
func NewCompanyHandler(store *Store, hub *Hub, delivery *Delivery) *CompanyHandler {
	// Reads are the Personal Agent side's (cursor, wait, SSE); they need
	// no access tokens.
	return &CompanyHandler{store: store, reads: NewHandler(store, hub, nil), delivery: delivery}
}

// Mount mounts the routes on r, which requires a Company API key
// (tenant.RequireAPIKey) and is mounted at /company/v1.
func (h *CompanyHandler) Mount(r chi.Router) {
	r.Route("/conversations", func(r chi.Router) {
		r.Get("/", h.list)
		if h.delivery != nil {
			r.Post("/webhook-secret", h.rotateSecret)
		}
		r.Route("/{id}", func(r chi.Router) {
			r.Get("/", h.get)
			r.Get("/events", h.events)
			r.Post("/messages", h.message)
			r.Post("/deltas", h.delta)
			r.Post("/status", h.status)
			r.Post("/join", h.join)
			r.Post("/handoff-unavailable", h.handoffUnavailable)
			r.Post("/user-requested", h.userRequested)
			r.Post("/authorization", h.authorization)
			r.Post("/close", h.close)
		})
	})
}

func companyOf(r *http.Request) *tenant.Company { return tenant.FromContext(r.Context()) }

// found is a lookup's error, or not_found when it found nothing.
func found[T any](v *T, err error) error {
	if err == nil && v == nil {
		return notFound()
	}
	return err
}

// companyAction is what a Company API change does to the conversation
// in the path, once its body is read.
type companyAction func(ctx context.Context, co *tenant.Company, id string) (*Posted, error)

// act answers a Company API change: it reads the body into req (an empty
// body is accepted when optional), runs do and answers with status. A
// retry that added nothing answers 200; an action with nothing to say,
// 204.
func (h *CompanyHandler) act(w http.ResponseWriter, r *http.Request, req any, optional bool, status int, do companyAction) {
	if err := decodeBody(w, r, req, true, optional); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	p, err := do(r.Context(), companyOf(r), chi.URLParam(r, "id"))
	switch {
	case err != nil:
		httpx.WriteError(w, r, err)
	case p == nil:
		w.WriteHeader(http.StatusNoContent)
	case p.replayed:
		httpx.WriteJSON(w, http.StatusOK, p)
	default:
		httpx.WriteJSON(w, status, p)
	}
}

func (h *CompanyHandler) list(w http.ResponseWriter, r *http.Request) {
	limit, err := httpx.QueryInt(r, "limit", defaultListLimit, 1, maxListLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	f := ListFilter{Status: r.URL.Query().Get("status"), Before: r.URL.Query().Get("before"), Limit: int(limit)}
	switch f.Status {
	case "", StatusWorking, StatusIdle, StatusQueued, StatusClosed:
	default:
		httpx.WriteError(w, r, invalid("status must be working, idle, queued or closed"))
		return
	}
	views, err := h.store.CompanyList(r.Context(), companyOf(r).ID, f)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := struct {
		Conversations []*ConversationView `json:"conversations"`
		Next          string              `json:"next,omitempty"`
	}{Conversations: views}
	if len(views) == f.Limit {
		out.Next = views[len(views)-1].ID
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

func (h *CompanyHandler) get(w http.ResponseWriter, r *http.Request) {
	v, err := h.store.CompanyGet(r.Context(), companyOf(r).ID, chi.URLParam(r, "id"))
	if err = found(v, err); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// events reads events as the Personal Agent does (spec 8.5, 8.6): cursor,
// wait, Last-Event-ID and server-sent events with text deltas.
func (h *CompanyHandler) events(w http.ResponseWriter, r *http.Request) {
	c, err := h.store.Get(r.Context(), companyOf(r).ID, chi.URLParam(r, "id"))
	if err = found(c, err); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	h.reads.serveEvents(w, r, c, httpx.WriteError, func(w http.ResponseWriter, _ *http.Request, status int, rd *Read) {
		httpx.WriteJSON(w, status, rd)
	})
}

func (h *CompanyHandler) message(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Message *CompanyMessage `json:"message"`
		Status  string          `json:"status"`
	}
	h.act(w, r, &req, false, http.StatusCreated, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		if req.Message == nil {
			return nil, invalid("message is required")
		}
		return h.store.CompanyPost(ctx, co, id, req.Message, req.Status)
	})
}

func (h *CompanyHandler) delta(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MessageID string `json:"message_id"`
		Text      string `json:"text"`
	}
	h.act(w, r, &req, false, http.StatusNoContent, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return nil, h.store.CompanyDelta(ctx, co.ID, id, req.MessageID, req.Text)
	})
}

func (h *CompanyHandler) status(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Status string `json:"status"`
	}
	h.act(w, r, &req, false, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyStatus(ctx, co.ID, id, req.Status)
	})
}

func (h *CompanyHandler) join(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Author *Author `json:"author"`
		Text   *string `json:"text"`
	}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyJoin(ctx, co.ID, id, req.Author, req.Text)
	})
}

func (h *CompanyHandler) handoffUnavailable(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Text string `json:"text"`
	}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyHandoffUnavailable(ctx, co, id, req.Text)
	})
}

func (h *CompanyHandler) userRequested(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Reason string `json:"reason"`
	}
	h.act(w, r, &req, false, http.StatusCreated, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyUserRequested(ctx, co.ID, id, req.Reason)
	})
}

func (h *CompanyHandler) authorization(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Scope string `json:"scope"`
	}
	h.act(w, r, &req, false, http.StatusCreated, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyAuthorization(ctx, co, id, req.Scope)
	})
}

func (h *CompanyHandler) close(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	h.act(w, r, &req, true, http.StatusOK, func(ctx context.Context, co *tenant.Company, id string) (*Posted, error) {
		return h.store.CompanyClose(ctx, co.ID, id)
	})
}

func (h *CompanyHandler) rotateSecret(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decodeBody(w, r, &req, true, true); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	secret, createdAt, err := h.delivery.RotateSecret(r.Context(), companyOf(r).ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusCreated, map[string]any{
		"secret": secret, "created_at": createdAt.UTC(),
		"previous_valid_until": createdAt.Add(previousSecretGrace).UTC(),
	})
}
