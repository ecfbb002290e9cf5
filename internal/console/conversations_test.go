package console_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/conversations"
)

// The Inbox and Conversations pages over HTTP: who may read and act,
// another Company's conversations, CSRF on every form, and the Company
// API's rules under every change. The conversations are made through the
// store as the Personal Agent side leaves them (its own tests are the
// conversations package's); the Chromium test drives a real Personal
// Agent.

// convRig is a rig with the conversations store on its database.
type convRig struct {
	*rig
	store *conversations.Store
	owner conversations.Owner
	n     int
}

func newConvRig(t *testing.T) *convRig {
	t.Helper()
	r := newRig(t)
	return &convRig{rig: r, store: conversations.NewStore(r.env.Pool, conversations.StoreOptions{}),
		owner: conversations.Owner{ClientID: "https://agent.test/client.json", UserID: "usr_1"}}
}

// start starts a conversation of the Company companyID with a Personal
// Agent message of text.
func (r *convRig) start(t *testing.T, companyID int64, text string) string {
	t.Helper()
	r.n++
	c, err := r.store.Start(context.Background(), companyID, r.owner, conversations.StartRequest{Message: &conversations.Message{
		ID: "msg_" + strconv.Itoa(r.n), Author: conversations.Author{Type: conversations.ResponderAgent},
		Text: &text}}, conversations.Policy{})
	require.NoError(t, err)
	return c.ID
}

// handedOff starts a conversation of companyID that the Personal Agent
// handed off.
func (r *convRig) handedOff(t *testing.T, companyID int64, text string) string {
	t.Helper()
	id := r.start(t, companyID, text)
	_, err := r.store.Handoff(context.Background(), companyID, r.owner, id)
	require.NoError(t, err)
	return id
}

// state is a conversation's status, responder and number of events.
func (r *convRig) state(t *testing.T, companyID int64, id string) []any {
	t.Helper()
	c, err := r.store.Get(context.Background(), companyID, id)
	require.NoError(t, err)
	require.NotNil(t, c)
	return []any{c.Status, c.Responder, c.LastSeq}
}

// lastMessage is the newest message event of a conversation.
func (r *convRig) lastMessage(t *testing.T, companyID int64, id string) map[string]any {
	t.Helper()
	evs, _, err := r.store.Events(context.Background(), companyID, id, 0, 100)
	require.NoError(t, err)
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == conversations.EventMessage {
			return evs[i].Body["message"].(map[string]any)
		}
	}
	t.Fatal("no message")
	return nil
}

// actions are the forms of a conversation's page, with a valid body.
var actions = map[string]url.Values{
	"take":      {},
	"reply":     {"text": {"Hello from the team."}},
	"hand-back": {},
	"close":     {},
}

// TestConversationPagesRoles: agents and owners take, reply, hand back
// and close; admins read the inbox and conversations; auditors read
// conversations but not the inbox; a refused change changes nothing.
func TestConversationPagesRoles(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	id := r.handedOff(t, r.ID, "A person, please")
	before := r.state(t, r.ID, id)
	for role, want := range map[console.Role]struct{ inbox, read, act bool }{
		console.RoleAuditor: {false, true, false},
		console.RoleAdmin:   {true, true, false},
	} {
		c := r.signIn(t, role)
		resp, body := r.get(t, c, "/inbox")
		if want.inbox {
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s inbox", role)
			require.Contains(t, body, id)
			require.NotContains(t, body, "/take", "%s may not take", role)
		} else {
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s inbox", role)
			require.NotContains(t, body, id)
			resp, _ = r.get(t, c, "/inbox/feed")
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s inbox feed", role)
		}
		resp, body = r.get(t, c, "/conversations/"+id)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s transcript", role)
		require.Contains(t, body, "A person, please")
		require.NotContains(t, body, `action="/console/`+r.Slug+`/conversations/`+id+`/`, "%s gets no form", role)
		resp, body = r.get(t, c, "/conversations")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s search", role)
		require.Contains(t, body, id)
		for action, form := range actions {
			resp := r.post(t, c, "/conversations/"+id+"/"+action, form)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", role, action)
		}
	}
	require.Equal(t, before, r.state(t, r.ID, id), "nothing changed")

	for _, role := range []console.Role{console.RoleAgent, console.RoleOwner} {
		id := r.handedOff(t, r.ID, "A person, please")
		c := r.signIn(t, role)
		_, body := r.get(t, c, "/inbox")
		require.Contains(t, body, `action="/console/`+r.Slug+`/conversations/`+id+`/take"`)
		resp := r.post(t, c, "/conversations/"+id+"/take", nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%s take", role)
		require.Equal(t, "/console/"+r.Slug+"/conversations/"+id, resp.Header.Get("Location"))
		require.Equal(t, []any{"idle", "human"}, r.state(t, r.ID, id)[:2])
	}
}

// TestConversationPagesTenant: another Company's conversation is a 404
// on every page and form, and nothing of it is shown or changed.
func TestConversationPagesTenant(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	_, rivalID := r.company(t, "rival")
	theirs := r.handedOff(t, rivalID, "Rival secret text")
	before := r.state(t, rivalID, theirs)
	c := r.signIn(t, console.RoleOwner)
	for _, path := range []string{"/conversations/" + theirs, "/conversations/" + theirs + "/feed"} {
		resp, body := r.get(t, c, path)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.NotContains(t, body, "Rival secret text")
	}
	_, body := r.get(t, c, "/inbox")
	require.NotContains(t, body, theirs)
	_, body = r.get(t, c, "/conversations")
	require.NotContains(t, body, theirs)
	for action, form := range actions {
		resp := r.post(t, c, "/conversations/"+theirs+"/"+action, form)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, action)
	}
	require.Equal(t, before, r.state(t, rivalID, theirs))
	// The rival's staff signed in at their own console see it; at acme's
	// their session is nothing.
	m, password := r.memberOf(t, rivalID, console.RoleOwner)
	rc := r.client(t)
	resp, err := rc.PostForm(r.env.PublicURL("/console/rival/signin"), url.Values{"email": {m.Email}, "password": {password},
		"csrf": {rivalCSRF(t, r, rc)}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, err = rc.Get(r.env.PublicURL("/console/rival/conversations/" + theirs))
	require.NoError(t, err)
	require.Contains(t, readBody(t, resp), "Rival secret text")
	resp, err = rc.Get(r.url("/conversations/" + theirs))
	require.NoError(t, err)
	require.NotContains(t, readBody(t, resp), "Rival secret text")
}

// rivalCSRF is the CSRF token of the rival console's sign-in form.
func rivalCSRF(t *testing.T, r *convRig, c *http.Client) string {
	t.Helper()
	resp, err := c.Get(r.env.PublicURL("/console/rival/signin"))
	require.NoError(t, err)
	m := csrfField.FindStringSubmatch(readBody(t, resp))
	require.NotNil(t, m)
	return m[1]
}

// TestConversationFormsCSRF: each form without its token, or with
// another's, is refused with 403 and changes nothing.
func TestConversationFormsCSRF(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	id := r.handedOff(t, r.ID, "A person, please")
	c := r.signIn(t, console.RoleAgent)
	other := r.signIn(t, console.RoleAgent)
	before := r.state(t, r.ID, id)
	for action, form := range actions {
		for name, token := range map[string]string{"none": "", "wrong": "x" + r.csrf(t, c)[1:], "another session's": r.csrf(t, other)} {
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			if token != "" {
				f.Set("csrf", token)
			}
			resp := r.postRaw(t, c, "/conversations/"+id+"/"+action, f)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s with %s token", action, name)
		}
	}
	require.Equal(t, before, r.state(t, r.ID, id), "nothing changed")
}

// TestConversationChanges: take, reply, hand back and close do what the
// Company API does, the reply as a staff member's message (spec 8.4,
// 8.8), and are refused as it refuses them.
func TestConversationChanges(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	id := r.handedOff(t, r.ID, "A person, please")
	m, password := r.member(t, console.RoleAgent)
	c := r.client(t)
	resp := r.post(t, c, "/signin", url.Values{"email": {m.Email}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	do := func(action string, form url.Values, status int) string {
		t.Helper()
		if form == nil {
			form = url.Values{}
		}
		form.Set("csrf", r.csrf(t, c))
		resp, err := c.PostForm(r.url("/conversations/"+id+"/"+action), form)
		require.NoError(t, err)
		body := readBody(t, resp)
		require.Equal(t, status, resp.StatusCode, "%s: %s", action, body)
		return body
	}
	// Nobody answers yet: nothing to hand back but the handoff, which
	// ends with the Company's message that nobody is free.
	do("hand-back", nil, http.StatusSeeOther)
	require.Equal(t, []any{"idle", "agent"}, r.state(t, r.ID, id)[:2])
	require.Equal(t, "agent", r.lastMessage(t, r.ID, id)["author"].(map[string]any)["type"])
	body := do("hand-back", nil, http.StatusConflict)
	require.Contains(t, body, "there is nothing to hand back")

	do("take", nil, http.StatusSeeOther)
	require.Equal(t, []any{"idle", "human"}, r.state(t, r.ID, id)[:2])
	do("reply", url.Values{"text": {"Hi, I'm here to help.\r\nWhich size?"}}, http.StatusSeeOther)
	msg := r.lastMessage(t, r.ID, id)
	require.Equal(t, "Hi, I'm here to help.\nWhich size?", msg["text"], "a textarea's line breaks are newlines")
	require.Equal(t, "company", msg["role"])
	author := msg["author"].(map[string]any)
	require.Equal(t, []any{"human", m.Name}, []any{author["type"], author["name"]})
	// A stable ID of the member's that is not their row ID.
	require.Regexp(t, `^staff_[A-Za-z0-9_-]{16}$`, author["id"])
	require.NotEqual(t, "staff_"+strconv.FormatInt(m.ID, 10), author["id"])
	// The Company API's checks: text that reads otherwise than it is.
	body = do("reply", url.Values{"text": {strings.Repeat("long ", 7000)}}, http.StatusBadRequest)
	require.Contains(t, body, "larger than")
	body = do("reply", url.Values{"text": {"pay here\u202egnp.exe"}}, http.StatusBadRequest)
	require.Contains(t, body, "message.text")
	require.Contains(t, body, "pay here", "the text is kept for another try")
	do("reply", url.Values{"text": {"Still here."}}, http.StatusSeeOther)
	require.Equal(t, author, r.lastMessage(t, r.ID, id)["author"], "the same author again")
	do("hand-back", nil, http.StatusSeeOther)
	require.Equal(t, []any{"idle", "agent"}, r.state(t, r.ID, id)[:2])

	do("close", nil, http.StatusSeeOther)
	require.Equal(t, "closed", r.state(t, r.ID, id)[0])
	before := r.state(t, r.ID, id)
	for action, form := range map[string]url.Values{"reply": {"text": {"Anything else?"}}, "take": nil, "hand-back": nil} {
		body := do(action, form, http.StatusConflict)
		require.Contains(t, body, "the conversation is closed", action)
	}
	do("close", nil, http.StatusSeeOther)
	require.Equal(t, before, r.state(t, r.ID, id), "closing again changes nothing")
	_, body = r.get(t, c, "/conversations/"+id)
	require.NotContains(t, body, `name="text"`, "no reply form on a closed conversation")
}

// TestTranscriptShowsEventsAsData: message text, names and reasons are
// escaped, never markup; sign-in requests, the Company's requests for
// the User and operations are shown as what they are.
func TestTranscriptShowsEventsAsData(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	id := r.start(t, r.ID, `<script>alert("pa")</script><b>bold</b>`)
	ctx := context.Background()
	_, err := r.env.Pool.Exec(ctx, `WITH c AS (UPDATE conversations SET last_seq = last_seq + 3 WHERE company_id = $1 AND id = $2
			RETURNING last_seq)
		INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
		SELECT $1, $2, c.last_seq - 3 + e.n, e.type, e.body::jsonb, now() FROM c, (VALUES
			(1, 'authorization', '{"error":"insufficient_scope","scope":"orders:read"}'),
			(2, 'user_requested', '{"reason":"<i>A specialist</i> needs you"}'),
			(3, 'message', '{"message":{"id":"msg_op","role":"company","author":{"type":"agent","name":"<img src=x onerror=alert(1)>"},
				"text":"Shall I?","extensions":{"operations":{"operation":{"operation_id":"exc_1","revision":"rev_1",
				"summary":"Exchange <u>the jacket</u>","terms":{"sku":"<svg/onload=alert(1)>"},"expires_at":"2026-12-31T00:00:00Z"}}}}}')
		) AS e(n, type, body)`, r.ID, id)
	require.NoError(t, err)
	c := r.signIn(t, console.RoleAuditor)
	resp, body := r.get(t, c, "/conversations/"+id)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, raw := range []string{"<script>alert", "<b>bold", "<i>A specialist", "<img src=x", "<u>the jacket", "<svg/onload"} {
		require.NotContains(t, body, raw)
	}
	for _, shown := range []string{"&lt;script&gt;alert(&#34;pa&#34;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;",
		"Sign-in requested", "<code>orders:read</code>",
		"The Company asked to talk with the User", "&lt;i&gt;A specialist&lt;/i&gt; needs you",
		"Operation proposed", "<code>exc_1</code>", "Exchange &lt;u&gt;the jacket&lt;/u&gt;", "&lt;img src=x onerror=alert(1)&gt; (Company Agent)",
		"&lt;svg/onload=alert(1)&gt;"} {
		require.Contains(t, body, shown)
	}
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
}

// TestInboxAndSearch: the inbox lists what waits for a person, the
// longest waiting first, with its age; the search filters by state,
// Personal Agent and day, and says what is wrong with a bad field.
func TestInboxAndSearch(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	first := r.handedOff(t, r.ID, "first")
	idle := r.start(t, r.ID, "idle")
	second := r.handedOff(t, r.ID, "second")
	c := r.signIn(t, console.RoleAgent)
	_, body := r.get(t, c, "/inbox")
	require.Less(t, strings.Index(body, first), strings.Index(body, second), "the longest waiting first")
	require.NotContains(t, body, idle)
	require.Contains(t, body, "just now")
	require.Contains(t, body, "Handed off")

	_, body = r.get(t, c, "/conversations?status=idle")
	require.Contains(t, body, idle)
	require.NotContains(t, body, first)
	today := time.Now().UTC().Format(time.DateOnly)
	_, body = r.get(t, c, "/conversations?agent="+url.QueryEscape(r.owner.ClientID)+"&from="+today+"&to="+today)
	for _, id := range []string{first, idle, second} {
		require.Contains(t, body, id)
	}
	require.Contains(t, strings.ToLower(body), `href="/console/`+r.Slug+`/conversations?agent=https%3a%2f%2fagent.test%2fclient.json"`,
		"each Personal Agent links to its conversations")
	_, body = r.get(t, c, "/conversations?agent=https%3A%2F%2Fother.test%2F")
	require.Contains(t, body, "No conversation matches.")
	resp, body := r.get(t, c, "/conversations?status=open&from=yesterday")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `id="status-error"`)
	require.Contains(t, body, "Enter a date as YYYY-MM-DD.")
	require.Contains(t, body, `value="yesterday"`, "the value stays in its field")
	for query, field := range map[string]string{
		"agent=" + strings.Repeat("a", 3000): "agent-error",
		"from=2026-13-01":                    "from-error",
		"from=2026-02-02&to=2026-02-01":      "to-error",
	} {
		resp, body := r.get(t, c, "/conversations?"+query)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, query)
		require.Contains(t, body, `id="`+field+`"`, query)
	}
	// A NUL anywhere in the query is refused before the page (c.text).
	resp, body = r.get(t, c, "/conversations?agent=a%00b")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "The address is not valid.")
	resp, body = r.get(t, c, "/conversations?before=%3Cscript%3E")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "search again")
	require.NotContains(t, body, "<script>")
}

// TestInboxFeed: the inbox's feed sends the list as it is, then again
// when a conversation is handed off, without reloading; it is no use of
// the session (an open Inbox still reaches the idle timeout), and it
// stops once the member signs out; signed out, it answers 204, which
// stops the browser's EventSource.
func TestInboxFeed(t *testing.T) {
	t.Parallel()
	r := newConvRig(t)
	c := r.signIn(t, console.RoleAgent)
	lastSeen := func() time.Time {
		t.Helper()
		var at time.Time
		require.NoError(t, r.env.Pool.QueryRow(context.Background(),
			`SELECT max(last_seen_at) FROM console_sessions WHERE company_id = $1`, r.ID).Scan(&at))
		return at
	}
	seen := lastSeen()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url("/inbox/feed"), nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	rd := bufio.NewReader(resp.Body)
	next := func() (string, error) { return nextSSE(rd) }
	got, err := next()
	require.NoError(t, err)
	require.Contains(t, got, "Nobody is waiting for a person.")
	id := r.handedOff(t, r.ID, "A person, please")
	got, err = next()
	require.NoError(t, err)
	require.Contains(t, got, id)
	require.Contains(t, got, `/take"`)
	require.Equal(t, seen, lastSeen(), "the feed did not use the session")

	// Signed out, the next change ends the feed instead of showing it.
	resp2 := r.post(t, c, "/signout", nil)
	require.Equal(t, http.StatusSeeOther, resp2.StatusCode)
	later := r.handedOff(t, r.ID, "Me too")
	got, err = next()
	require.Error(t, err, "the feed sent %q after the sign-out", got)
	require.NotContains(t, got, later)
	resp3, _ := r.get(t, c, "/inbox/feed")
	require.Equal(t, http.StatusNoContent, resp3.StatusCode)
}
