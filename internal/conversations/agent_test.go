package conversations_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The Personal Agent side of the conversation endpoint (spec 8), over
// HTTPS with the test Personal Agent.

const (
	paSlug     = "shop"
	paPassword = "correct horse battery staple"
)

// agentSide is a rig with Company shop (an issuer, two
// accounts: ada and bob) and a test Personal Agent.
type agentSide struct {
	env       *rig
	agent     *peers.Agent
	companyID int64
	// endpoint is the poppy protocol entry's endpoint (spec 8.1).
	endpoint string
}

func newAgentSide(t testing.TB) *agentSide {
	t.Helper()
	return newAgentSideOn(t, newRig(t))
}

// newAgentSideOn is newAgentSide on env.
func newAgentSideOn(t testing.TB, env *rig) *agentSide {
	t.Helper()
	env.CreateCompany(t, map[string]any{
		"slug":         paSlug,
		"organization": map[string]any{"name": "Shop", "domain": "shop.example"},
		"auth": map[string]any{"scopes": map[string]any{
			"orders:read":  "See your orders",
			"orders:write": "Change your orders",
		}},
	})
	for _, user := range []string{"ada", "bob"} {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+paSlug+"/accounts",
			map[string]any{"username": user, "password": paPassword})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	a := &agentSide{env: env, agent: env.StartAgent(t, "agent.test"),
		endpoint: env.PublicURL("/t/" + paSlug + "/poppy/conversations")}
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, paSlug).Scan(&a.companyID))
	return a
}

// paReq shapes a request. Zero values send a signed request as User
// usr_test of the test agent, signed out, in a new Session.
type paReq struct {
	Agent   *peers.Agent // [the test agent]
	Sub     string       // User ID ["usr_test"]
	SID     string       // [new Session]
	AgentID string
	Token   string // access token
	Query   string // without "?"
	// Header holds name, value pairs; "Content-Type" replaces
	// application/json.
	Header []string
}

// request builds a signed request; body is as for peers.NewRequest: nil,
// a string or []byte (sent as is), or a value sent as JSON.
func (a *agentSide) request(t testing.TB, ctx context.Context, method, path string, body any, o paReq) *http.Request {
	t.Helper()
	u := a.endpoint + path
	if o.Query != "" {
		u += "?" + o.Query
	}
	req := peers.NewRequest(t, method, u, body).WithContext(ctx)
	for i := 0; i+1 < len(o.Header); i += 2 {
		req.Header.Set(o.Header[i], o.Header[i+1])
	}
	agent := o.Agent
	if agent == nil {
		agent = a.agent
	}
	agent.Sign(t, req, peers.SessionClaims{Aud: a.env.PublicURL("/t/" + paSlug), Sub: o.Sub, SID: o.SID,
		AgentID: o.AgentID, AccessToken: o.Token}, peers.SessionOptions{})
	return req
}

// call sends a request to {endpoint}{path} and reads the response.
func (a *agentSide) call(t testing.TB, method, path string, body any, o paReq) *peers.Response {
	t.Helper()
	return a.callVia(t, a.env.Client, method, path, body, o)
}

func (a *agentSide) callVia(t testing.TB, client *http.Client, method, path string, body any, o paReq) *peers.Response {
	t.Helper()
	return peers.Send(t, client, a.request(t, context.Background(), method, path, body, o))
}

// paMsg is a Personal Agent message with text.
func paMsg(id, text string) map[string]any {
	return map[string]any{"id": id, "author": map[string]any{"type": "agent"}, "text": text}
}

// start starts a conversation and returns its ID.
func (a *agentSide) start(t testing.TB, msg map[string]any, o paReq) string {
	t.Helper()
	resp := a.call(t, http.MethodPost, "", map[string]any{"message": msg}, o)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	id, _ := resp.JSON(t)["conversation_id"].(string)
	require.NotEmpty(t, id)
	return id
}

func (a *agentSide) send(t *testing.T, id string, msg map[string]any, o paReq) *peers.Response {
	t.Helper()
	return a.call(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": msg}, o)
}

// read reads a conversation's events and requires a 200.
func (a *agentSide) read(t *testing.T, id, query string, o paReq) *paRead {
	t.Helper()
	o.Query = query
	resp := a.call(t, http.MethodGet, "/"+id+"/events", nil, o)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	return decodeRead(t, resp.Body)
}

// paRead is a read (spec 8.5), decoded strictly enough to check every
// member is present.
type paRead struct {
	ConversationID *string          `json:"conversation_id"`
	Events         []map[string]any `json:"events"`
	Cursor         *string          `json:"cursor"`
	HasMore        *bool            `json:"has_more"`
	Status         string           `json:"status"`
	Responder      string           `json:"responder"`
}

func decodeRead(t *testing.T, raw []byte) *paRead {
	t.Helper()
	var rd paRead
	require.NoError(t, json.Unmarshal(raw, &rd), "%s", raw)
	require.NotNil(t, rd.ConversationID, "%s", raw)
	require.NotNil(t, rd.Events, "events is [] when empty: %s", raw)
	require.NotNil(t, rd.Cursor, "%s", raw)
	require.NotNil(t, rd.HasMore, "%s", raw)
	require.NotEmpty(t, rd.Status, "%s", raw)
	require.NotEmpty(t, rd.Responder, "%s", raw)
	for _, e := range rd.Events {
		require.NotEmpty(t, e["id"])
		require.NotEmpty(t, e["type"])
		_, err := time.Parse(time.RFC3339, e["created_at"].(string))
		require.NoError(t, err)
	}
	return &rd
}

// types lists the events' types.
func (rd *paRead) types() []string {
	out := make([]string, len(rd.Events))
	for i, e := range rd.Events {
		out[i] = e["type"].(string)
	}
	return out
}

// last is the last event.
func (rd *paRead) last() map[string]any { return rd.Events[len(rd.Events)-1] }

// companyEvents adds Company-side events (and the state change to status
// and responder, "" keeping them) and returns the last event's ID. It goes
// through the store until the Company API can be used instead.
func (a *agentSide) companyEvents(t *testing.T, id, status, responder string, events ...conversations.TestEvent) string {
	t.Helper()
	last, err := conversations.AppendTestEvents(context.Background(), a.env.Pool, a.companyID, id, status, responder, events...)
	require.NoError(t, err)
	return last
}

// later adds Company events after d, from another goroutine; the test
// checks the outcome when it ends.
func (a *agentSide) later(t *testing.T, d time.Duration, id string, events ...conversations.TestEvent) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		time.Sleep(d)
		_, err := conversations.AppendTestEvents(context.Background(), a.env.Pool, a.companyID, id, "", "", events...)
		done <- err
	}()
	t.Cleanup(func() { require.NoError(t, <-done) })
}

// companyMessage is a Company message event.
func companyMessage(id, text string) conversations.TestEvent {
	return conversations.TestEvent{Type: conversations.EventMessage, Body: map[string]any{"message": map[string]any{
		"id": id, "role": "company", "author": map[string]any{"type": "agent"}, "text": text,
	}}}
}

// paCounts are the rows the endpoint writes.
type paCounts struct{ Conversations, Events, MessageIDs int }

func (a *agentSide) counts(t *testing.T) paCounts {
	t.Helper()
	var c paCounts
	require.NoError(t, a.env.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM conversations), (SELECT count(*) FROM conversation_events),
		(SELECT count(*) FROM conversation_message_ids)`).Scan(&c.Conversations, &c.Events, &c.MessageIDs))
	return c
}

// eventCount is how many events a conversation has.
func (a *agentSide) eventCount(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, a.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM conversation_events WHERE company_id = $1 AND conversation_id = $2`, a.companyID, id).Scan(&n))
	return n
}

// signIn signs username in with Direct Sign-In through the pages and
// returns an orders:read access token for the test agent.
func (a *agentSide) signIn(t *testing.T, username string) string {
	t.Helper()
	return a.env.SignIn(t, a.agent, a.env.PublicURL("/t/"+paSlug), username, paPassword, []string{"orders:read"}, "").AccessToken
}

// requireError checks a spec 8.13 error body.
func requireError(t *testing.T, resp *peers.Response, status int, code string) map[string]any {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	require.Equal(t, code, body["error"], "%s", resp.Body)
	return body
}

func TestAgentStartSendRead(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)

	// spec 8.3: 201 with conversation_id, status and responder.
	resp := a.call(t, http.MethodPost, "", map[string]any{"message": map[string]any{
		"id": "msg_Yq3v8LrT0aWc5NkE", "author": map[string]any{"type": "agent"},
		"text":    "The jacket from order #1042 isn't warm enough.",
		"data":    map[string]any{"order": 1042, "big": json.Number("12345678901234567890")},
		"context": map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true},
	}}, paReq{})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	body := resp.JSON(t)
	id := body["conversation_id"].(string)
	require.Regexp(t, `^[A-Za-z0-9_-]{1,256}$`, id)
	// Without a Company Agent webhook nobody prepares a reply: idle.
	require.Equal(t, map[string]any{"conversation_id": id, "status": "idle", "responder": "agent"}, body)

	// spec 8.5: a read from the start.
	rd := a.read(t, id, "", paReq{})
	require.Equal(t, id, *rd.ConversationID)
	require.Equal(t, []string{"message", "state"}, rd.types())
	msg := rd.Events[0]["message"].(map[string]any)
	require.Equal(t, "msg_Yq3v8LrT0aWc5NkE", msg["id"])
	require.Equal(t, map[string]any{"type": "agent"}, msg["author"])
	require.NotContains(t, msg, "role")
	require.Equal(t, "The jacket from order #1042 isn't warm enough.", msg["text"])
	require.Contains(t, string(a.call(t, http.MethodGet, "/"+id+"/events", nil, paReq{}).Body),
		`"big":12345678901234567890`, "data numbers are kept as sent")
	require.Equal(t, map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true}, msg["context"])
	require.Equal(t, "idle", rd.Events[1]["status"])
	require.Equal(t, "agent", rd.Events[1]["responder"])
	require.Equal(t, rd.Events[1]["id"], *rd.Cursor, "cursor is the last event returned")
	require.False(t, *rd.HasMore)
	require.Equal(t, "idle", rd.Status)
	require.Equal(t, "agent", rd.Responder)
	first, cursor := rd.Events[0]["id"].(string), *rd.Cursor

	// spec 8.3: later messages get 202 with the same fields.
	resp = a.send(t, id, map[string]any{"id": "msg_Hc72PwZn4eKs1QxB", "author": map[string]any{"type": "human"},
		"text": "Medium, please."}, paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"conversation_id": id, "status": "idle", "responder": "agent"}, resp.JSON(t))

	// Reading from a cursor returns what came after it.
	rd = a.read(t, id, "cursor="+cursor, paReq{})
	require.Equal(t, []string{"message"}, rd.types())
	msg = rd.last()["message"].(map[string]any)
	require.Equal(t, "msg_Hc72PwZn4eKs1QxB", msg["id"])
	require.Equal(t, "human", msg["author"].(map[string]any)["type"])
	rd2 := a.read(t, id, "cursor="+first, paReq{})
	require.Len(t, rd2.Events, 2)

	// Nothing new: an empty list, and the request's cursor back.
	rd = a.read(t, id, "cursor="+*rd.Cursor, paReq{})
	require.Empty(t, rd.Events)
	require.Equal(t, rd2.last()["id"], *rd.Cursor)
	require.False(t, *rd.HasMore)

	// A Company reply arrives as a message event with role company.
	last := a.companyEvents(t, id, "", "", companyMessage("msg_r2Kq", "I can do that."))
	rd = a.read(t, id, "cursor="+*rd.Cursor, paReq{})
	require.Equal(t, last, *rd.Cursor)
	require.Equal(t, "company", rd.last()["message"].(map[string]any)["role"])
}

func TestAgentPostWithWaitAnswersWithARead(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)

	// spec 8.3: with wait, a POST answers as a read, its status kept.
	resp := a.call(t, http.MethodPost, "", map[string]any{"message": paMsg("m1", "hello")}, paReq{Query: "wait=1"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	rd := decodeRead(t, resp.Body)
	id := *rd.ConversationID
	require.Equal(t, []string{"message", "state"}, rd.types(), "without a cursor, from the start")
	require.Equal(t, "idle", rd.Status)

	began := time.Now()
	resp = a.send(t, id, paMsg("m2", "anyone?"), paReq{Query: "cursor=" + *rd.Cursor + "&wait=10"})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	rd = decodeRead(t, resp.Body)
	require.Equal(t, id, *rd.ConversationID)
	require.Equal(t, "message", rd.Events[0]["type"])
	require.Equal(t, "m2", rd.Events[0]["message"].(map[string]any)["id"])
	// The accepted message itself is an event after the cursor, so the
	// POST need not wait for the reply.
	require.Less(t, time.Since(began), 5*time.Second)

	// wait=0 answers with a read right away.
	resp = a.send(t, id, paMsg("m3", "again"), paReq{Query: "wait=0&cursor=" + *rd.Cursor})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	rd = decodeRead(t, resp.Body)
	require.NotEmpty(t, rd.Events)
	require.Equal(t, "m3", rd.last()["message"].(map[string]any)["id"])

	// A cursor without wait changes nothing: the plain reply.
	resp = a.send(t, id, paMsg("m4", "more"), paReq{Query: "cursor=" + *rd.Cursor})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"conversation_id": id, "status": "idle", "responder": "agent"}, resp.JSON(t))
}

func TestAgentLongPoll(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})
	cursor := a.read(t, id, "", paReq{}).Cursor

	// An event that arrives while the read waits ends the wait.
	a.later(t, 300*time.Millisecond, id, companyMessage("r1", "Hi!"))
	began := time.Now()
	rd := a.read(t, id, "wait=20&cursor="+*cursor, paReq{})
	require.Less(t, time.Since(began), 10*time.Second)
	require.Equal(t, []string{"message"}, rd.types())
	require.Equal(t, "r1", rd.Events[0]["message"].(map[string]any)["id"])

	// A read that times out returns an empty list and the request's cursor.
	began = time.Now()
	rd2 := a.read(t, id, "wait=1&cursor="+*rd.Cursor, paReq{})
	require.GreaterOrEqual(t, time.Since(began), 900*time.Millisecond)
	require.Empty(t, rd2.Events)
	require.Equal(t, *rd.Cursor, *rd2.Cursor)
	require.False(t, *rd2.HasMore)
	require.Equal(t, "idle", rd2.Status)

	// A wait beyond the cap is held for the cap, not refused (spec 8.5):
	// with events to return it answers at once.
	began = time.Now()
	rd = a.read(t, id, "wait=99999999999999999999", paReq{})
	require.Less(t, time.Since(began), 5*time.Second)
	require.Len(t, rd.Events, 3)
	// A POST's wait likewise.
	resp := a.send(t, id, paMsg("m2", "again"), paReq{Query: "wait=4294967296&cursor=" + *rd.Cursor})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Len(t, decodeRead(t, resp.Body).Events, 1)
	require.Equal(t, 30*time.Second, conversations.WaitCap)
}

func TestAgentReadPagesBeyondAHundredEvents(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})
	events := make([]conversations.TestEvent, 248)
	for i := range events {
		events[i] = companyMessage("r"+strings.Repeat("x", i%5)+string(rune('a'+i%26)), "part")
	}
	last := a.companyEvents(t, id, "", "", events...)
	require.Equal(t, "evt_250", last)

	var seen []string
	cursor := ""
	for reads := 0; ; reads++ {
		require.Less(t, reads, 5)
		q := ""
		if cursor != "" {
			q = "cursor=" + cursor
		}
		rd := a.read(t, id, q, paReq{})
		for _, e := range rd.Events {
			seen = append(seen, e["id"].(string))
		}
		cursor = *rd.Cursor
		if !*rd.HasMore {
			require.Len(t, rd.Events, 50)
			break
		}
		require.Len(t, rd.Events, 100, "a full page before has_more")
	}
	require.Len(t, seen, 250)
	require.Equal(t, "evt_1", seen[0])
	require.Equal(t, "evt_250", seen[249])
	require.Equal(t, "evt_250", cursor)

	// A wait read with more than a page answers at once, has_more set.
	rd := a.read(t, id, "wait=5&cursor=evt_100", paReq{})
	require.Len(t, rd.Events, 100)
	require.True(t, *rd.HasMore)
}
