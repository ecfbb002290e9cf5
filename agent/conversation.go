package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Author says who wrote a message (spec 8.4, 8.8).
type Author struct {
	Type  string `json:"type"`
	ID    string `json:"id,omitempty"`
	Name  string `json:"name,omitempty"`
	Image string `json:"image,omitempty"`
}

// Message is a conversation message (spec 8.4).
type Message struct {
	ID         string                     `json:"id,omitempty"`
	Role       string                     `json:"role,omitempty"`
	Author     Author                     `json:"author"`
	Text       string                     `json:"text,omitempty"`
	Data       json.RawMessage            `json:"data,omitempty"`
	Context    map[string]any             `json:"context,omitempty"`
	Extensions map[string]json.RawMessage `json:"extensions,omitempty"`
}

// Operation returns the operation a Company message carries in
// extensions.operations.operation, or nil.
func (m *Message) Operation() *Operation {
	var ext struct {
		Operation *Operation `json:"operation"`
	}
	if m == nil || json.Unmarshal(m.Extensions["operations"], &ext) != nil {
		return nil
	}
	return ext.Operation
}

// Declined returns the decline a Company message carries, or nil.
func (m *Message) Declined() *Declined {
	var ext struct {
		Declined *Declined `json:"declined"`
	}
	if m == nil || json.Unmarshal(m.Extensions["operations"], &ext) != nil {
		return nil
	}
	return ext.Declined
}

// Event is a conversation event (spec 8.5); fields by type.
type Event struct {
	ID             string   `json:"id"`
	Type           string   `json:"type"`
	CreatedAt      string   `json:"created_at"`
	Message        *Message `json:"message,omitempty"`
	Status         string   `json:"status,omitempty"`
	Responder      string   `json:"responder,omitempty"`
	Reason         string   `json:"reason,omitempty"`
	Error          string   `json:"error,omitempty"`
	Scope          string   `json:"scope,omitempty"`
	ConversationID string   `json:"conversation_id,omitempty"`
}

// ConversationError is an error answer of the conversation endpoint.
type ConversationError struct {
	Status         int
	Code           string `json:"error"`
	Description    string `json:"error_description"`
	ConversationID string `json:"conversation_id"`
	// Challenge is the WWW-Authenticate error, when the answer is a token
	// challenge (spec 7).
	Challenge string
	Scope     string
}

func (e *ConversationError) Error() string {
	return fmt.Sprintf("conversation: %d %s%s %s", e.Status, e.Code, e.Challenge, e.Description)
}

// Conversation is one conversation (spec 8), with its saved cursor.
type Conversation struct {
	ID        string
	Status    string
	Responder string
	s         *Session
	endpoint  string
	cursor    string
	seen      map[string]bool
}

// read is a read of events, or a POST answered like one (spec 8.5).
type read struct {
	ConversationID string  `json:"conversation_id"`
	Events         []Event `json:"events"`
	Cursor         string  `json:"cursor"`
	HasMore        bool    `json:"has_more"`
	Status         string  `json:"status"`
	Responder      string  `json:"responder"`
}

// StartConversation starts a conversation with its first message (spec
// 8.3), waiting up to wait seconds for replies, which it returns.
func (s *Session) StartConversation(ctx context.Context, msg Message, wait int) (*Conversation, []Event, error) {
	return s.startConversation(ctx, map[string]any{"message": agentMessage(msg)}, wait)
}

func (s *Session) startConversation(ctx context.Context, body map[string]any, wait int) (*Conversation, []Event, error) {
	endpoint := s.Company.ConversationEndpoint()
	if endpoint == "" {
		return nil, nil, errors.New("agent: the Company lists no poppy conversation protocol")
	}
	c := &Conversation{s: s, endpoint: endpoint, seen: map[string]bool{}}
	events, err := c.post(ctx, endpoint, body, wait, http.StatusCreated)
	if err != nil {
		return nil, nil, err
	}
	s.agent.Recorder.Note("Conversation %s started", c.ID)
	return c, events, nil
}

// agentMessage fills a message's ID and author type.
func agentMessage(m Message) Message {
	if m.ID == "" {
		m.ID = "msg_" + randomID(12)
	}
	if m.Author.Type == "" {
		m.Author.Type = "agent"
	}
	return m
}

// Send sends a message (spec 8.3) and returns replies within wait seconds.
func (c *Conversation) Send(ctx context.Context, msg Message, wait int) ([]Event, error) {
	return c.post(ctx, c.url("/messages"), map[string]any{"message": agentMessage(msg)}, wait, http.StatusAccepted)
}

// Handoff asks for a person (spec 8.9).
func (c *Conversation) Handoff(ctx context.Context) error {
	_, err := c.post(ctx, c.url("/handoff"), map[string]any{}, -1, http.StatusAccepted)
	return err
}

// Close closes the conversation (spec 8.12).
func (c *Conversation) Close(ctx context.Context) error {
	_, err := c.post(ctx, c.url("/close"), map[string]any{}, -1, http.StatusOK)
	return err
}

// AcceptUserRequested starts the Direct Conversation a user_requested
// event asks for (spec 8.10), once the User agreed, without a message so
// the Company speaks first.
func (c *Conversation) AcceptUserRequested(ctx context.Context, ev Event, wait int) (*Conversation, []Event, error) {
	if ev.Type != "user_requested" {
		return nil, nil, errors.New("agent: not a user_requested event")
	}
	return c.s.startConversation(ctx, map[string]any{
		"parent_conversation_id":  c.ID,
		"user_requested_event_id": ev.ID,
	}, wait)
}

func (c *Conversation) url(suffix string) string {
	return c.endpoint + "/" + url.PathEscape(c.ID) + suffix
}

// post sends a POST and reads it as spec 8.3 says; wait < 0 sends none.
func (c *Conversation) post(ctx context.Context, target string, body any, wait, want int) ([]Event, error) {
	if wait >= 0 {
		q := url.Values{"wait": {strconv.Itoa(wait)}}
		if c.cursor != "" {
			q.Set("cursor", c.cursor)
		}
		target += "?" + q.Encode()
	}
	resp, err := c.s.Do(ctx, Request{Method: http.MethodPost, URL: target, JSON: body})
	if err != nil {
		return nil, err
	}
	if resp.Status != want {
		return nil, conversationError(resp)
	}
	var r read
	if err := resp.Decode(&r); err != nil {
		return nil, err
	}
	if c.ID == "" {
		c.ID = r.ConversationID
	}
	return c.handle(&r), nil
}

// Events reads events after the saved cursor, holding up to wait seconds
// (spec 8.5), reading again while has_more.
func (c *Conversation) Events(ctx context.Context, wait int) ([]Event, error) {
	var out []Event
	for {
		q := url.Values{"wait": {strconv.Itoa(wait)}}
		if c.cursor != "" {
			q.Set("cursor", c.cursor)
		}
		resp, err := c.s.Do(ctx, Request{Method: http.MethodGet, URL: c.url("/events") + "?" + q.Encode()})
		if err != nil {
			return out, err
		}
		if resp.Status != http.StatusOK {
			if resp.Error() == "cursor_expired" && c.cursor != "" {
				c.cursor = "" // spec 8.5: read from the beginning
				continue
			}
			return out, conversationError(resp)
		}
		var r read
		if err := resp.Decode(&r); err != nil {
			return out, err
		}
		out = append(out, c.handle(&r)...)
		if !r.HasMore {
			return out, nil
		}
		wait = 0
	}
}

// handle takes a read's state and its events not handled before.
func (c *Conversation) handle(r *read) []Event {
	if r.Status != "" {
		c.Status, c.Responder = r.Status, r.Responder
	}
	var fresh []Event
	for _, e := range r.Events {
		if c.seen[e.ID] {
			continue
		}
		c.seen[e.ID] = true
		fresh = append(fresh, e)
	}
	if r.Cursor != "" {
		c.cursor = r.Cursor
	}
	return fresh
}

// Stream reads events over SSE (spec 8.6), calling handle for each new
// event until it returns false or ctx ends. When the Company closes the
// stream it reconnects with Last-Event-ID; a Company that answers JSON is
// read as a long poll.
func (c *Conversation) Stream(ctx context.Context, handle func(Event) bool) error {
	for reconnects := 0; reconnects < 20; reconnects++ {
		h := http.Header{"Accept": {"text/event-stream"}}
		target := c.url("/events")
		if c.cursor != "" {
			h.Set("Last-Event-ID", c.cursor)
		}
		resp, err := c.s.Open(ctx, Request{Method: http.MethodGet, URL: target, Header: h})
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return &ConversationError{Status: resp.StatusCode}
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body.Close()
			events, err := c.Events(ctx, 10)
			if err != nil {
				return err
			}
			for _, e := range events {
				if !handle(e) {
					return nil
				}
			}
			continue
		}
		stop, err := c.readStream(resp, handle)
		resp.Body.Close()
		if stop || ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.s.agent.Recorder.Note("stream ended (%v): reconnecting with Last-Event-ID", err)
		}
	}
	return errors.New("agent: the stream kept closing")
}

// readStream parses SSE; text-delta events are skipped (the complete
// message event replaces them).
func (c *Conversation) readStream(resp *http.Response, handle func(Event) bool) (bool, error) {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, typ string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 && typ != "text-delta" {
				var e Event
				if json.Unmarshal([]byte(data.String()), &e) == nil && !c.seen[e.ID] {
					c.seen[e.ID] = true
					if e.Type == "state" {
						c.Status, c.Responder = e.Status, e.Responder
					}
					if id != "" {
						c.cursor = id
					}
					if !handle(e) {
						return true, nil
					}
				}
			}
			id, typ = "", ""
			data.Reset()
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(line[5:], " "))
		}
	}
	return false, sc.Err()
}

// conversationError reads an error answer.
func conversationError(resp *Response) error {
	e := &ConversationError{Status: resp.Status}
	_ = json.Unmarshal(resp.Body, e)
	e.Challenge = bearerError(resp.Header)
	e.Scope = challengeParam(resp.Header, "scope")
	return e
}

// ApproveOperation approves the operation a Company message proposed in
// this conversation (extension 4, 6): approver decides, the approval goes
// in extensions.operations.approval of a message, and the Company's next
// message says how it went: a decline, a new revision (asked again), or
// anything else, whose text is returned in Reply (what the Company says,
// not a proof that it performed the operation). A message that fails
// with a 5xx or a transport error is sent again, the same message with
// the same approval (extension 7). op is the operation from the
// Company's message.
func (c *Conversation) ApproveOperation(ctx context.Context, op *Operation, expected map[string]any, approver Approver, wait int) (*OperationResult, []Event, error) {
	var all []Event
	var msg Message      // the message carrying the approval, sent again as is
	var msgFor *Approval // the approval msg carries
	res, err := c.s.approveLoop(ctx, "conversation", expected, approver, func(ctx context.Context, ap *Approval) (answer, error) {
		if ap == nil {
			return answer{op: op}, nil
		}
		if msgFor != ap {
			msgFor = ap
			ext, _ := json.Marshal(map[string]any{"approval": ap})
			text := "The user approved the operation."
			if ap.Approver == "agent" {
				text = "I approve the operation on the user's instruction."
			}
			msg = agentMessage(Message{Text: text, Extensions: map[string]json.RawMessage{"operations": ext}})
		}
		events, err := c.Send(ctx, msg, wait)
		var ce *ConversationError
		switch {
		case errors.As(err, &ce) && ce.Status < 500:
			return answer{}, err
		case err != nil:
			return failedAttempt(ap, err)
		}
		all = append(all, events...)
		for range 10 {
			for _, e := range events {
				if e.Type != "message" || e.Message == nil || e.Message.Role != "company" {
					continue
				}
				if d := e.Message.Declined(); d != nil {
					return answer{declined: d}, nil
				}
				if o := e.Message.Operation(); o != nil {
					return answer{op: o}, nil
				}
				return answer{done: true, reply: e.Message.Text}, nil
			}
			if events, err = c.Events(ctx, wait); err != nil {
				return answer{}, err
			}
			all = append(all, events...)
		}
		return answer{}, errors.New("agent: no answer to the approval in the conversation")
	})
	return res, all, err
}
