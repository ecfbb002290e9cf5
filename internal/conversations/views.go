package conversations

import (
	"encoding/json"
	"time"
)

// The JSON shapes of conversations as either side reads them: the
// Personal Agent's Reply and Read (spec 8.3, 8.5), the Company's
// ConversationView and Posted (docs/company-agent.md).

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

// with returns p with the message it added.
func (p *Posted) with(m *Message) *Posted {
	p.Message = m
	return p
}

// Read is a read of a conversation's events (spec 8.5).
type Read struct {
	ConversationID string  `json:"conversation_id"`
	Events         []Event `json:"events"`
	Cursor         string  `json:"cursor"`
	HasMore        bool    `json:"has_more"`
	Status         string  `json:"status"`
	Responder      string  `json:"responder"`
}

func readOf(c *Conversation, p readParams, events []Event, more bool) *Read {
	rd := &Read{ConversationID: c.ID, Events: events, Cursor: p.cursor, HasMore: more, Status: c.Status, Responder: c.Responder}
	if rd.Events == nil {
		rd.Events = []Event{}
	}
	if len(events) > 0 {
		rd.Cursor = eventID(events[len(events)-1].Seq)
	}
	return rd
}

// stateAfter is c with the status and responder of the last state event
// of events after c.LastSeq, if any: the state as of events.
func stateAfter(c *Conversation, events []Event) *Conversation {
	for i := len(events) - 1; i >= 0 && events[i].Seq > c.LastSeq; i-- {
		if events[i].Type != EventState {
			continue
		}
		status, _ := events[i].Body["status"].(string)
		responder, _ := events[i].Body["responder"].(string)
		if status == "" || responder == "" {
			break
		}
		out := *c
		out.Status, out.Responder = status, responder
		return &out
	}
	return c
}

// Reply is the answer to a POST: the conversation and its state.
type Reply struct {
	ConversationID string `json:"conversation_id,omitempty"`
	Status         string `json:"status"`
	Responder      string `json:"responder"`
}

func replyOf(c *Conversation) Reply {
	return Reply{ConversationID: c.ID, Status: c.Status, Responder: c.Responder}
}
