package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Inbox and Conversations pages (docs/console.md, "Inbox" and
// "Conversations"): the conversations waiting for a person, the search,
// the transcript, and what staff do there (take, reply, hand back,
// close). Every change is a call of the store method the Company API's
// handler calls (conversations.Store.Company*), so it follows the same
// rules and fails with the same errors.

// Who reads conversations, and who acts on them (docs/console.md,
// "Roles"): owners always; agents act; admins and auditors read.
var (
	inboxReaders        = []Role{RoleAdmin, RoleAgent}
	conversationReaders = []Role{RoleAdmin, RoleAgent, RoleAuditor}
	conversationActors  = []Role{RoleAgent}
)

// conversationRoutes adds the Inbox and Conversations pages; their feeds
// are feedRoutes (feeds.go).
func (c *Console) conversationRoutes(r chi.Router) {
	if c.opts.Conversations == nil || c.opts.Hub == nil {
		return
	}
	r.Group(func(r chi.Router) {
		r.Use(c.allow(inboxReaders...))
		r.Get("/inbox", c.inbox)
	})
	r.Group(func(r chi.Router) {
		r.Use(c.allow(conversationReaders...))
		r.Get("/conversations", c.searchConversations)
		r.Get("/conversations/{id}", c.transcript)
	})
	r.Group(func(r chi.Router) {
		// A conversation's traffic is kept in the conversation, not in the
		// audit log, as the Company API's is.
		r.Use(c.allow(conversationActors...), audit.Exempt)
		r.Post("/conversations/{id}/take", c.take)
		r.Post("/conversations/{id}/reply", c.reply)
		r.Post("/conversations/{id}/hand-back", c.handBack)
		r.Post("/conversations/{id}/close", c.closeConversation)
	})
}

// canAct reports whether the request's member may change conversations.
func canAct(r *http.Request) bool {
	m := memberFrom(r.Context())
	return m.Role == RoleOwner || m.Role == RoleAgent
}

// fragment renders the template name of page's file with the data a page
// gets, for a feed: the same markup the page shows in that place.
func (c *Console) fragment(r *http.Request, page, name string, data any) ([]byte, error) {
	t, ok := c.pages.byName[page]
	if !ok {
		return nil, fmt.Errorf("console: no template %q", page)
	}
	d := layoutData{Member: memberFrom(r.Context()), Company: tenant.FromContext(r.Context()),
		CSRF: csrfFrom(r.Context()), Page: data}
	if d.Company != nil {
		d.Base = c.base(d.Company.Slug)
	}
	var buf bytes.Buffer
	err := t.ExecuteTemplate(&buf, name, d)
	return buf.Bytes(), err
}

// feedOptions: a feed renders at most once a second.
var feedOptions = conversations.FeedOptions{Event: "update", Every: time.Second}

// inboxPage is the Inbox's data.
type inboxPage struct {
	Rows []inboxRow
	// More: more conversations wait than are shown.
	More   bool
	CanAct bool
	// Now is when the page was rendered, for the ages.
	Now time.Time
}

// inboxRow is one waiting conversation.
type inboxRow struct {
	ID       string
	Reason   string
	Agent    string
	Status   string
	Since    time.Time
	Age      string
	IsDirect bool
}

// loadInbox reads the Company's inbox.
func (c *Console) loadInbox(ctx context.Context, co *tenant.Company) (*inboxPage, error) {
	ws, more, err := c.opts.Conversations.Inbox(ctx, co.ID, conversations.MaxInbox)
	if err != nil {
		return nil, err
	}
	now := c.now()
	p := &inboxPage{More: more, Now: now}
	for _, w := range ws {
		reason := "Handed off"
		if w.Reason == conversations.WaitUserRequested {
			reason = "User came to talk"
		}
		p.Rows = append(p.Rows, inboxRow{ID: w.ID, Reason: reason, Agent: w.Owner.ClientID, Status: w.Status,
			Since: w.Since.UTC(), Age: age(now.Sub(w.Since)), IsDirect: w.ParentID != ""})
	}
	return p, nil
}

// age says how long d is, for people: "just now", "4 min", "2 h 5 min",
// "3 d 4 h".
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%d d %d h", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func (c *Console) inbox(w http.ResponseWriter, r *http.Request) {
	p, err := c.loadInbox(r.Context(), tenant.FromContext(r.Context()))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	p.CanAct = canAct(r)
	c.render(w, r, http.StatusOK, "inbox", p)
}

// inboxFeed sends the inbox's list again whenever it changes (live.js
// puts it in place).
func (c *Console) inboxFeed(w http.ResponseWriter, r *http.Request) {
	co := tenant.FromContext(r.Context())
	watch := c.opts.Hub.WatchCompany(co.ID)
	c.opts.Hub.ServeFeed(w, r, watch, feedOptions, func(ctx context.Context) ([]byte, error) {
		act, err := c.stillAllowed(ctx, r, inboxReaders)
		if err != nil {
			return nil, err
		}
		p, err := c.loadInbox(ctx, co)
		if err != nil {
			return nil, err
		}
		p.CanAct = act
		return c.fragment(r, "inbox", "inbox-list", p)
	})
}

// searchPage is the Conversations page's data: the search form's values,
// their errors, and what it found.
type searchPage struct {
	Status, Agent, From, To string
	Statuses                []string
	Errors                  map[string]string
	Results                 []*conversations.ConversationView
	// Older is the URL of the next page, "" on the last.
	Older string
}

// searchLimit is a page of the search.
const searchLimit = 50

// maxAgentLen bounds the Personal Agent searched for (a client_id URL).
const maxAgentLen = 2048

func (c *Console) searchConversations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &searchPage{Status: q.Get("status"), Agent: strings.TrimSpace(q.Get("agent")), From: q.Get("from"), To: q.Get("to"),
		Statuses: []string{conversations.StatusQueued, conversations.StatusWorking, conversations.StatusIdle, conversations.StatusClosed},
		Errors:   map[string]string{}}
	f := conversations.ListFilter{Status: p.Status, ClientID: p.Agent, Before: q.Get("before"), Limit: searchLimit}
	switch p.Status {
	case "", conversations.StatusWorking, conversations.StatusIdle, conversations.StatusQueued, conversations.StatusClosed:
	default:
		p.Errors["status"] = "Choose one of the states listed."
	}
	if len(p.Agent) > maxAgentLen || httpx.TextProblem(p.Agent, false, maxAgentLen, false) != "" {
		p.Errors["agent"] = "Enter a Personal Agent's client_id (a URL)."
	}
	day := func(field, v string) time.Time {
		if v == "" {
			return time.Time{}
		}
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			p.Errors[field] = "Enter a date as YYYY-MM-DD."
		}
		return d
	}
	f.From = day("from", p.From)
	if to := day("to", p.To); !to.IsZero() {
		// Through the end of that day (UTC).
		f.To = to.AddDate(0, 0, 1)
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		p.Errors["to"] = "The last day cannot be before the first."
	}
	if len(p.Errors) > 0 {
		c.render(w, r, http.StatusBadRequest, "conversations", p)
		return
	}
	views, err := c.opts.Conversations.CompanyList(r.Context(), tenant.FromContext(r.Context()).ID, f)
	var he *httpx.Error
	switch {
	case errors.As(err, &he) && he.Status() < 500:
		// A before that is not the Company's conversation.
		p.Errors["before"] = "This page of results is no longer available; search again."
		c.render(w, r, http.StatusBadRequest, "conversations", p)
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	p.Results = views
	if len(views) == searchLimit {
		next := url.Values{}
		for k, v := range map[string]string{"status": p.Status, "agent": p.Agent, "from": p.From, "to": p.To} {
			if v != "" {
				next.Set(k, v)
			}
		}
		next.Set("before", views[len(views)-1].ID)
		p.Older = c.base(tenant.FromContext(r.Context()).Slug) + "/conversations?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "conversations", p)
}

// transcriptPage is a conversation's page.
type transcriptPage struct {
	Conv   *conversations.ConversationView
	Events []eventView
	// Truncated: the conversation has more events than are shown.
	Truncated bool
	// What the member may do now.
	CanAct, CanTake, CanHandBack, CanClose bool
	// Error is why the last change was refused, and Reply the text it
	// carried, kept for another try.
	Error string
	Reply string
}

// maxTranscriptEvents bounds the events a transcript shows.
const maxTranscriptEvents = 1000

// loadTranscript reads conversation id of the Company with its events;
// nil when the Company has no such conversation.
func (c *Console) loadTranscript(ctx context.Context, co *tenant.Company, id string, act bool) (*transcriptPage, error) {
	v, err := c.opts.Conversations.CompanyGet(ctx, co.ID, id)
	if err != nil || v == nil {
		return nil, err
	}
	p := &transcriptPage{Conv: v, CanAct: act}
	var after int64
	for {
		evs, more, err := c.opts.Conversations.Events(ctx, co.ID, v.ID, after, 100)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			p.Events = append(p.Events, viewEvent(e))
			after = e.Seq
		}
		if !more {
			break
		}
		if len(p.Events) >= maxTranscriptEvents {
			p.Truncated = true
			break
		}
	}
	open := v.Status != conversations.StatusClosed
	p.CanTake = act && open && v.Responder == conversations.ResponderAgent
	p.CanHandBack = act && open && (v.Responder == conversations.ResponderHuman || v.Status == conversations.StatusQueued)
	p.CanClose = act && open
	return p, nil
}

func (c *Console) transcript(w http.ResponseWriter, r *http.Request) {
	c.showTranscript(w, r, http.StatusOK, "", "")
}

// showTranscript renders the conversation of the URL with status, and
// errMsg and reply when a change was refused; another Company's or no
// conversation is the 404 page.
func (c *Console) showTranscript(w http.ResponseWriter, r *http.Request, status int, errMsg, reply string) {
	p, err := c.loadTranscript(r.Context(), tenant.FromContext(r.Context()), chi.URLParam(r, "id"), canAct(r))
	switch {
	case err != nil:
		c.fail(w, r, err)
	case p == nil:
		c.renderError(w, r, http.StatusNotFound, "There is no such conversation.")
	default:
		p.Error, p.Reply = errMsg, reply
		c.render(w, r, status, "conversation", p)
	}
}

// transcriptFeed sends the transcript's live part again whenever the
// conversation changes.
func (c *Console) transcriptFeed(w http.ResponseWriter, r *http.Request) {
	co := tenant.FromContext(r.Context())
	id := chi.URLParam(r, "id")
	p, err := c.loadTranscript(r.Context(), co, id, false)
	switch {
	case err != nil:
		c.fail(w, r, err)
		return
	case p == nil:
		c.renderError(w, r, http.StatusNotFound, "There is no such conversation.")
		return
	}
	watch := c.opts.Hub.Watch(co.ID, p.Conv.ID)
	c.opts.Hub.ServeFeed(w, r, watch, feedOptions, func(ctx context.Context) ([]byte, error) {
		act, err := c.stillAllowed(ctx, r, conversationReaders)
		if err != nil {
			return nil, err
		}
		p, err := c.loadTranscript(ctx, co, id, act)
		if err == nil && p == nil {
			err = errors.New("console: the conversation is gone")
		}
		if err != nil {
			return nil, err
		}
		return c.fragment(r, "conversation", "transcript-live", p)
	})
}

// staffAuthor is the member as the author of a Company message (spec
// 8.4, 8.8): a person, with a stable ID of theirs and their name. The ID
// is derived from the member's random WebAuthn user handle, not their row
// ID, which would tell Personal Agents how many staff members the
// platform has made.
func (c *Console) staffAuthor(ctx context.Context, m Member) (conversations.Author, error) {
	var handle []byte
	err := c.opts.Pool.QueryRow(ctx, `SELECT user_handle FROM staff WHERE id = $1 AND company_id = $2`,
		m.ID, m.CompanyID).Scan(&handle)
	if err != nil {
		return conversations.Author{}, err
	}
	sum := sha256.Sum256(append([]byte("poppyhost console author\x00"), handle...))
	return conversations.Author{Type: conversations.ResponderHuman,
		ID: "staff_" + base64.RawURLEncoding.EncodeToString(sum[:12]), Name: m.Name}, nil
}

// change answers a change of the conversation of the URL: back to its
// page, or the page again with why it was refused, as the Company API
// would refuse it (same error, same status).
func (c *Console) change(w http.ResponseWriter, r *http.Request, reply string,
	do func(ctx context.Context, co *tenant.Company, id string) error) {
	co := tenant.FromContext(r.Context())
	id := chi.URLParam(r, "id")
	err := do(r.Context(), co, id)
	var he *httpx.Error
	switch {
	case err == nil:
		http.Redirect(w, r, c.base(co.Slug)+"/conversations/"+url.PathEscape(id), http.StatusSeeOther)
	case errors.As(err, &he) && he.Code == httpx.CodeConversationNotFound:
		c.renderError(w, r, http.StatusNotFound, "There is no such conversation.")
	case errors.As(err, &he) && he.Status() < 500:
		c.showTranscript(w, r, he.Status(), he.Description, reply)
	default:
		c.fail(w, r, err)
	}
}

// take makes the member the conversation's responder (Company API join).
func (c *Console) take(w http.ResponseWriter, r *http.Request) {
	c.change(w, r, "", func(ctx context.Context, co *tenant.Company, id string) error {
		author, err := c.staffAuthor(ctx, memberFrom(ctx))
		if err != nil {
			return err
		}
		_, err = c.opts.Conversations.CompanyJoin(ctx, co.ID, id, &author, nil)
		return err
	})
}

// reply posts the member's message (Company API messages).
func (c *Console) reply(w http.ResponseWriter, r *http.Request) {
	// The csrf middleware has read the form, within maxForm bytes.
	// Browsers send a textarea's line breaks as CRLF; a message's are
	// newlines.
	text := strings.ReplaceAll(r.PostForm.Get("text"), "\r\n", "\n")
	c.change(w, r, text, func(ctx context.Context, co *tenant.Company, id string) error {
		if strings.TrimSpace(text) == "" {
			return httpx.Errorf(httpx.CodeInvalidRequest, "Write a message first.")
		}
		author, err := c.staffAuthor(ctx, memberFrom(ctx))
		if err != nil {
			return err
		}
		_, err = c.opts.Conversations.CompanyPost(ctx, co, id, &conversations.CompanyMessage{Author: author, Text: &text}, "")
		return err
	})
}

// handBack gives the conversation back to the Company Agent: a pending
// handoff ends as nobody can take it (Company API handoff-unavailable),
// a conversation a person answers is handed back (Company API
// hand-back).
func (c *Console) handBack(w http.ResponseWriter, r *http.Request) {
	c.change(w, r, "", func(ctx context.Context, co *tenant.Company, id string) error {
		v, err := c.opts.Conversations.CompanyGet(ctx, co.ID, id)
		switch {
		case err != nil:
			return err
		case v != nil && v.Status == conversations.StatusQueued:
			_, err = c.opts.Conversations.CompanyHandoffUnavailable(ctx, co, id, "")
		default:
			_, err = c.opts.Conversations.CompanyHandBack(ctx, co.ID, id)
		}
		return err
	})
}

// closeConversation closes the conversation (Company API close).
func (c *Console) closeConversation(w http.ResponseWriter, r *http.Request) {
	c.change(w, r, "", func(ctx context.Context, co *tenant.Company, id string) error {
		_, err := c.opts.Conversations.CompanyClose(ctx, co.ID, id)
		return err
	})
}
