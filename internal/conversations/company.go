package conversations

import (
	"encoding/json"
	"net/url"
	"reflect"
	"unicode/utf8"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Company side's rules: what a Company message, author, status or
// short text may be (spec 8.4, 8.7, 8.8), checked before the store
// changes anything (store_company.go).

// Limits of the Company API.
const (
	maxAuthorIDLen   = 256
	maxAuthorNameLen = 200
	maxImageURLLen   = 2048
	maxDeltaBytes    = 6000
)

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
	if m.Text != nil {
		if msg := httpx.DisguiseProblem(*m.Text); msg != "" {
			return nil, invalid("message.text %s", msg)
		}
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

// defaultHandoffUnavailable is said when a handoff finds nobody and the
// Company configured no message of its own.
const defaultHandoffUnavailable = "No one is available to take this conversation right now. I can keep helping here, or you can ask for a person again later."

func handoffUnavailableText(cv *tenant.Conversations) string {
	if t := cv.HandoffUnavailableMessage; t != "" {
		return t
	}
	return defaultHandoffUnavailable
}
