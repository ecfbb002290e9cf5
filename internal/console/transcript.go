package console

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/operations"
)

// How a transcript shows each event (spec 8.5): who said what, state
// changes, sign-in requests (8.11), the Company's requests for the User
// (8.10), Direct Conversations, and operations (the operations
// extension's content of a message) each as what they are. Every string
// here is data that html/template escapes: nothing a Personal Agent or the
// Company wrote is ever markup.

// eventView is one event of a transcript.
type eventView struct {
	ID   string
	At   time.Time
	Kind string // message, state, authorization, user_requested, direct_opened, direct_closed, other
	// Side is "company" or "agent" for a message: whose side wrote it.
	Side string
	// Who wrote a message, for people.
	Who string
	// Staff: a person of the Company wrote it.
	Staff bool
	// HasText: the message has text (Text may be empty).
	HasText bool
	Text    string
	// Data, Context are the message's data and context as indented JSON.
	Data, Context string
	// Operations are the operations extension's content of the message.
	Operations []opContent
	// Extensions are the other extensions' content, by name, as JSON.
	Extensions []extensionView
	// State: status and responder after a state event.
	Status, Responder string
	// Scope an authorization event asks for.
	Scope string
	// Reason of a user_requested event.
	Reason string
	// Conversation a direct_opened or direct_closed event names.
	Conversation string
	// Raw is an event of a type the console does not know, as JSON.
	Raw string
}

// opContent is an operation in a message (operations extension 4,
// 6): proposed by the Company, approved by the Personal Agent, or the
// approval declined.
type opContent struct {
	// Kind is "proposed", "approval" or "declined".
	Kind        string
	OperationID string
	Revision    string
	Summary     string
	Reason      string
	ExpiresAt   string
	// Approver of an approval (user or agent).
	Approver string
	// Terms, as indented JSON.
	Terms string
	// Raw is the whole content, as indented JSON.
	Raw string
}

// extensionView is an extension's content in a message.
type extensionView struct {
	Name, JSON string
}

// viewEvent makes e's view.
func viewEvent(e conversations.Event) eventView {
	v := eventView{ID: e.ID(), At: e.CreatedAt.UTC(), Kind: e.Type}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	switch e.Type {
	case conversations.EventMessage:
		m, _ := e.Body["message"].(map[string]any)
		viewMessage(&v, m)
	case conversations.EventState:
		v.Status, v.Responder = str(e.Body, "status"), str(e.Body, "responder")
	case conversations.EventAuthorization:
		v.Scope = str(e.Body, "scope")
	case conversations.EventUserRequested:
		v.Reason = str(e.Body, "reason")
	case conversations.EventDirectOpened, conversations.EventDirectClosed:
		v.Conversation = str(e.Body, "conversation_id")
	default:
		v.Kind, v.Raw = "other", indented(e.Body)
	}
	return v
}

// viewMessage fills v from a message (spec 8.4).
func viewMessage(v *eventView, m map[string]any) {
	author, _ := m["author"].(map[string]any)
	authorType, _ := author["type"].(string)
	name, _ := author["name"].(string)
	if role, _ := m["role"].(string); role == "company" {
		v.Side = "company"
		switch {
		case authorType == conversations.ResponderHuman && name != "":
			v.Who, v.Staff = name, true
		case authorType == conversations.ResponderHuman:
			v.Who, v.Staff = "A person of the Company", true
		case name != "":
			v.Who = name + " (Company Agent)"
		default:
			v.Who = "Company Agent"
		}
	} else {
		v.Side = "agent"
		v.Who = "Personal Agent"
		if authorType == conversations.ResponderHuman {
			v.Who = "The User (their own words)"
		}
	}
	if t, ok := m["text"].(string); ok {
		v.HasText, v.Text = true, t
	}
	if d, ok := m["data"]; ok {
		v.Data = indented(d)
	}
	if c, ok := m["context"]; ok {
		v.Context = indented(c)
	}
	ext, _ := m["extensions"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(ext)) {
		content, _ := ext[name].(map[string]any)
		if name == operations.Name && content != nil {
			v.Operations = viewOperations(content)
			continue
		}
		v.Extensions = append(v.Extensions, extensionView{Name: name, JSON: indented(ext[name])})
	}
}

// viewOperations reads the operations extension's content of a message:
// operation (a proposal), approval or declined.
func viewOperations(content map[string]any) []opContent {
	var out []opContent
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	for _, kind := range []struct{ member, label string }{
		{"operation", "proposed"}, {"approval", "approval"}, {"declined", "declined"},
	} {
		m, ok := content[kind.member].(map[string]any)
		if !ok {
			continue
		}
		op := opContent{Kind: kind.label, OperationID: str(m, "operation_id"), Revision: str(m, "revision"),
			Summary: str(m, "summary"), Reason: str(m, "reason"), ExpiresAt: str(m, "expires_at"),
			Approver: str(m, "approver"), Raw: indented(m)}
		if terms, ok := m["terms"]; ok {
			op.Terms = indented(terms)
		}
		out = append(out, op)
	}
	if len(out) == 0 {
		out = append(out, opContent{Kind: "other", Raw: indented(content)})
	}
	return out
}

// indented is v as indented JSON, for reading: <, > and & as they are,
// since html/template escapes the page.
func indented(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if enc.Encode(v) != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}
