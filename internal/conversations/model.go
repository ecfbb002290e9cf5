package conversations

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sessions"
)

// Status and responder values (spec 8.7).
const (
	StatusWorking = "working"
	StatusIdle    = "idle"
	StatusQueued  = "queued"
	StatusClosed  = "closed"

	ResponderAgent = "agent"
	ResponderHuman = "human"
)

// Event types (spec 8.5).
const (
	EventMessage       = "message"
	EventState         = "state"
	EventAuthorization = "authorization"
	EventUserRequested = "user_requested"
	EventDirectOpened  = "direct_opened"
	EventDirectClosed  = "direct_closed"
)

const (
	maxMessageBytes        = 32 << 10
	maxBodyBytes           = 64 << 10
	eventPrefix            = "evt_"
	conversationPrefix     = "cnv_"
	companyMessagePrefix   = "msg_"
	maxEventsPerRead       = 100
	maxReasonLen           = 1000
	maxContextKeys         = 50
	defaultWaitCap         = 30 * time.Second
	maxConversationIDBytes = 256
)

func notFound() error {
	return httpx.Errorf(httpx.CodeConversationNotFound, "no such conversation")
}

func invalid(format string, a ...any) error {
	return httpx.Errorf(httpx.CodeInvalidRequest, format, a...)
}

// newID returns a fresh ID with prefix, in the URL-safe base64 alphabet.
func newID(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}

// validID reports whether s is a spec 8.2 ID: 1 to 256 URL-safe base64
// characters.
func validID(s string) bool { return sessions.ValidID(s) }

// eventID is the ID of a conversation's seq-th event.
func eventID(seq int64) string { return eventPrefix + strconv.FormatInt(seq, 10) }

// parseEventID returns the seq of an event ID of ours.
func parseEventID(s string) (int64, bool) {
	n, ok := strings.CutPrefix(s, eventPrefix)
	if !ok || n == "" || len(n) > 18 || (len(n) > 1 && n[0] == '0') {
		return 0, false
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	return seq, err == nil && seq > 0
}

// Author says who wrote a message (spec 8.4, 8.8).
type Author struct {
	Type  string `json:"type"`
	ID    string `json:"id,omitempty"`
	Name  string `json:"name,omitempty"`
	Image string `json:"image,omitempty"`
}

// Message is a message of either side (spec 8.4).
type Message struct {
	ID         string                     `json:"id"`
	Role       string                     `json:"role,omitempty"`
	Author     Author                     `json:"author"`
	Text       *string                    `json:"text,omitempty"`
	Data       json.RawMessage            `json:"data,omitempty"`
	Context    map[string]json.RawMessage `json:"context,omitempty"`
	Extensions map[string]json.RawMessage `json:"extensions,omitempty"`
}

// checkAgentMessage validates a Personal Agent's message and drops what
// only Company messages carry and extension content the Company does not
// list (spec 3.3, 8.4). known says which extensions the Company lists.
func checkAgentMessage(m *Message, known func(name string) bool) error {
	if !validID(m.ID) {
		return invalid("message.id must be 1 to 256 URL-safe base64 characters (spec 8.2)")
	}
	if m.Author.Type != ResponderAgent && m.Author.Type != ResponderHuman {
		return invalid("message.author.type must be agent or human (spec 8.8)")
	}
	m.Role = ""
	m.Author = Author{Type: m.Author.Type}
	if bytes.Equal(m.Data, []byte("null")) {
		// null is absent, as for text.
		m.Data = nil
	}
	if m.empty() {
		return invalid("a message needs at least one of text, data, context or extensions (spec 8.4)")
	}
	if m.Text != nil {
		if msg := httpx.DisguiseProblem(*m.Text); msg != "" {
			return invalid("message.text %s", msg)
		}
	}
	if len(m.Data) > 0 && m.Data[0] != '{' && m.Data[0] != '[' {
		return invalid("message.data must be a JSON object or array")
	}
	if len(m.Context) > maxContextKeys {
		return invalid("message.context has more than %d fields", maxContextKeys)
	}
	if err := checkContext(m.Context); err != nil {
		return err
	}
	var dropped []string
	for name, v := range m.Extensions {
		if len(v) == 0 || v[0] != '{' {
			return invalid("message.extensions.%s must be a JSON object (spec 8.4)", name)
		}
		// operations is the platform's: the store keeps it when the
		// Company has it on (takeApproval).
		if !known(name) && name != operations.Name {
			delete(m.Extensions, name)
			dropped = append(dropped, name)
		}
	}
	if len(m.Extensions) == 0 {
		m.Extensions = nil
	}
	return emptyAfterDrop(m, dropped)
}

// empty reports whether m has none of the members spec 8.4 requires one
// of.
func (m *Message) empty() bool {
	return m.Text == nil && len(m.Data) == 0 && m.Context == nil && m.Extensions == nil
}

// emptyAfterDrop refuses a message left with no content once the
// extension content named in dropped, which the Company ignores (spec
// 3.3), is gone: such a message would break spec 8.4 for every reader of
// the conversation, so it is invalid_request and nothing is stored
// (docs/decisions.md, issue 18).
func emptyAfterDrop(m *Message, dropped []string) error {
	if len(dropped) == 0 || !m.empty() {
		return nil
	}
	slices.Sort(dropped)
	return invalid("the message's only content is extensions this Company does not list in poppy.json (%s), "+
		"which it ignores (spec 3.3); a message needs at least one of text, data, context or extensions it supports (spec 8.4)",
		strings.Join(dropped, ", "))
}

// checkContext applies the formats spec 8.4 defines for locale, time_zone
// and user_available.
//
// Every string in the context, under any member, is free text the
// Company's people and its Company Agent read: one that can read otherwise
// than it is (httpx.Disguising) is refused.
func checkContext(ctx map[string]json.RawMessage) error {
	for key, v := range ctx {
		if r, ok := httpx.Disguising(key); ok {
			return invalid("message.context member names must not contain U+%04X", r)
		}
		if r, ok := httpx.DisguisingJSON(v); ok {
			return invalid("message.context.%s %s", key, httpx.DisguiseProblem(string(r)))
		}
		switch key {
		case "locale", "time_zone":
			var s string
			if httpx.Unmarshal(v, &s, httpx.DecodeOptions{}) != nil || s == "" || len(s) > 100 {
				return invalid("message.context.%s must be a string (spec 8.4)", key)
			}
			if key == "time_zone" {
				if _, err := time.LoadLocation(s); err != nil || s == "Local" {
					return invalid("message.context.time_zone must be an IANA time zone name such as America/Los_Angeles")
				}
			}
		case "user_available":
			// json.Unmarshal would take null as false.
			if s := string(v); s != "true" && s != "false" {
				return invalid("message.context.user_available must be true or false (spec 8.4)")
			}
		}
	}
	return nil
}

// contentHash identifies a message's content for idempotent retries, with
// the parent and accepted event of a Direct Conversation's first message.
// The content is hashed in a canonical form (object keys sorted, numbers
// as written), so a retry that serializes the same JSON differently is
// still the same message (spec 8.3).
func contentHash(m *Message, extra ...string) []byte {
	return hashContent(canonicalMessage(m), extra...)
}

// canonicalMessage is m as JSON in contentHash's canonical form, which is
// also the text of a message event's "message" (messageEvent).
func canonicalMessage(m *Message) []byte {
	raw, _ := json.Marshal(m)
	if v, err := decodeNumbers(raw); err == nil {
		raw, _ = json.Marshal(v)
	}
	return raw
}

// hashContent is contentHash of a message in canonical form.
func hashContent(canon []byte, extra ...string) []byte {
	h := sha256.New()
	h.Write(canon)
	for _, e := range extra {
		fmt.Fprintf(h, "\x00%s", e)
	}
	return h.Sum(nil)
}

// decodeNumbers decodes JSON keeping numbers as written (json.Number), so
// that large or precise numbers in data survive a round trip.
func decodeNumbers(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// Event is one entry of a conversation (spec 8.5).
type Event struct {
	Seq       int64
	Type      string
	Body      map[string]any
	CreatedAt time.Time
	// encoded is the event as MarshalJSON writes it, when it was written
	// once for every reader of a notification (carriedEvents); nothing
	// changes such an event.
	encoded []byte
}

// ID is the event's ID (spec 8.5), also a cursor.
func (e Event) ID() string { return eventID(e.Seq) }

// MarshalJSON writes the event as spec 8.5 shows it: id, type, created_at
// and the type's fields.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.encoded != nil {
		return e.encoded, nil
	}
	return appendEvent(nil, &e)
}
