package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractConversations drives conversations from both sides: the
// Personal Agent's and the Company's.
func contractConversations(t *testing.T, c *contract, f *fixture, acmeKey string) {
	env, issuer, agent, signIn := f.env, f.issuer, f.agent, f.signIn

	// pruned is a conversation of acme whose oldest events the
	// conversations test dropped, and a cursor among them.
	type pruneMark struct{ conversation, cursor string }
	var pruned pruneMark

	t.Run("conversations", func(t *testing.T) {
		// The Personal Agent side of spec 8 through the document: acme has
		// no agent webhook, so its conversations wait idle for its staff.
		ctx := context.Background()
		base := "/t/acme/poppy/conversations"
		// in signs as User usr_test in Session sid, signed in with token
		// when it is set.
		in := func(sid, token string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: sid, AccessToken: token}, peers.SessionOptions{})
			}
		}
		s := in("conversations", "")
		message := func(id, text string) map[string]any {
			return map[string]any{"id": id, "author": map[string]any{"type": "agent"}, "text": text}
		}
		send := func(id, text string) map[string]any { return map[string]any{"message": message(id, text)} }
		reply := func(id, status string) map[string]any {
			m := map[string]any{"status": status, "responder": "agent"}
			if id != "" {
				m["conversation_id"] = id
			}
			return m
		}

		// Start (spec 8.3). What only Company messages carry, extensions
		// acme does not list and unknown members are dropped.
		first := map[string]any{"colour": "red", "message": map[string]any{
			"id": "msg_first", "role": "user", "author": map[string]any{"type": "agent", "name": "Pat"},
			"text":       "The jacket from order 1042 isn't warm enough.",
			"context":    map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true},
			"extensions": map[string]any{"acme.example/gift-wrap": map[string]any{"wrap": true}, "other.example/x": map[string]any{}},
		}}
		r := c.do(t, call{method: post, path: base, session: s, body: first, want: 201})
		id := r.JSON(t)["conversation_id"].(string)
		assert.Equal(t, reply(id, "idle"), r.JSON(t))
		conv := base + "/" + id
		// A retried first message returns the conversation it started; its
		// ID with other content is a conflict, in any conversation: message
		// IDs are the User's.
		r = c.do(t, call{method: post, path: base, session: s, body: first, want: 201})
		assert.Equal(t, reply(id, "idle"), r.JSON(t))
		for _, path := range []string{base, conv + "/messages"} {
			r = c.do(t, call{method: post, path: path, session: s, body: send("msg_first", "Other words."), want: 409})
			assert.Equal(t, "message_id_conflict", r.JSON(t)["error"])
		}

		// Read (spec 8.5): the message as accepted, then the state.
		rd := decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events", session: s, want: 200}))
		assert.Equal(t, []string{"message", "state"}, rd.types())
		assert.Equal(t, conversationRead{ConversationID: id, Events: rd.Events, Cursor: rd.Events[1]["id"].(string), Status: "idle", Responder: "agent"}, rd)
		assert.Equal(t, map[string]any{"id": "msg_first", "author": map[string]any{"type": "agent"},
			"text":       "The jacket from order 1042 isn't warm enough.",
			"context":    map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true},
			"extensions": map[string]any{"acme.example/gift-wrap": map[string]any{"wrap": true}}}, rd.Events[0]["message"])
		oldest, cursor := rd.Events[0]["id"].(string), rd.Cursor
		// Another Session of the same User continues it (spec 8.2); a read
		// that times out has no events and keeps the cursor.
		rd = decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events?wait=1&cursor=" + cursor, session: in("conversations-2", ""), want: 200}))
		assert.Empty(t, rd.Events)
		assert.Equal(t, cursor, rd.Cursor)

		// Send (spec 8.3): 202 with the state, or with wait a read from the
		// cursor.
		r = c.do(t, call{method: post, path: conv + "/messages", session: s, body: send("msg_second", "Does it come in medium?"), want: 202})
		assert.Equal(t, reply(id, "idle"), r.JSON(t))
		rd = decode[conversationRead](t, c.do(t, call{method: post, path: conv + "/messages?wait=0&cursor=" + cursor, session: s, want: 202,
			body: map[string]any{"message": map[string]any{"id": "msg_away", "author": map[string]any{"type": "human"},
				"context": map[string]any{"user_available": false}}}}))
		assert.Equal(t, []string{"message", "message"}, rd.types())
		assert.Equal(t, "msg_away", rd.Events[1]["message"].(map[string]any)["id"])
		cursor = rd.Cursor

		// A Direct Conversation (spec 8.10): until it closes, the parent
		// takes no messages, handoff or second Direct Conversation.
		r = c.do(t, call{method: post, path: base, session: s, want: 201, body: map[string]any{"parent_conversation_id": id,
			"message": map[string]any{"id": "msg_direct", "author": map[string]any{"type": "human"}, "text": "Hi, it's me."}}})
		direct := r.JSON(t)["conversation_id"].(string)
		assert.Equal(t, reply(direct, "idle"), r.JSON(t))
		for _, k := range []call{
			{method: post, path: conv + "/messages", body: send("msg_blocked", "Hello?")},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: base, body: map[string]any{"parent_conversation_id": id, "message": message("msg_direct_2", "Hi again.")}},
		} {
			k.session, k.want = s, 409
			r = c.do(t, k)
			assert.Equal(t, "direct_conversation_open", r.JSON(t)["error"], k.path)
			assert.Equal(t, direct, r.JSON(t)["conversation_id"], k.path)
		}
		// A Direct Conversation is no parent, and an accepted event must be
		// a user_requested one.
		r = c.do(t, call{method: post, path: base, session: s, want: 404,
			body: map[string]any{"parent_conversation_id": direct, "message": message("msg_nested", "Hi.")}})
		assert.Equal(t, "conversation_not_found", r.JSON(t)["error"])
		r = c.do(t, call{method: post, path: base, session: s, want: 400,
			body: map[string]any{"parent_conversation_id": id, "user_requested_event_id": oldest}})
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])
		r = c.do(t, call{method: post, path: base + "/" + direct + "/close", session: s, body: `{}`, want: 200})
		assert.Equal(t, reply("", "closed"), r.JSON(t))

		// Handoff (spec 8.9), twice: the second changes nothing.
		for range 2 {
			r = c.do(t, call{method: post, path: conv + "/handoff", session: s, body: `{"ignored":true}`, want: 202})
			assert.Equal(t, reply("", "queued"), r.JSON(t))
		}
		// Close (spec 8.12), twice; then no more messages, handoff or
		// Direct Conversation, though a retried message is answered again.
		for range 2 {
			r = c.do(t, call{method: post, path: conv + "/close", session: s, body: `{}`, want: 200})
			assert.Equal(t, reply("", "closed"), r.JSON(t))
		}
		for _, k := range []call{
			{method: post, path: conv + "/messages", body: send("msg_late", "Hello?")},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: base, body: map[string]any{"parent_conversation_id": id, "message": message("msg_direct_3", "Hi.")}},
		} {
			k.session, k.want = s, 409
			r = c.do(t, k)
			assert.Equal(t, "conversation_closed", r.JSON(t)["error"], k.path)
			assert.NotContains(t, r.JSON(t), "conversation_id")
		}
		r = c.do(t, call{method: post, path: conv + "/messages", session: s, body: send("msg_second", "Does it come in medium?"), want: 202})
		assert.Equal(t, id, r.JSON(t)["conversation_id"])

		// The parent's events tell the story; a closed conversation stays
		// readable.
		rd = decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events?cursor=" + cursor, session: s, want: 200}))
		assert.Equal(t, []string{"direct_opened", "direct_closed", "state", "state"}, rd.types())
		assert.Equal(t, direct, rd.Events[0]["conversation_id"])
		assert.Equal(t, direct, rd.Events[1]["conversation_id"])
		assert.Equal(t, []any{"queued", "closed"}, []any{rd.Events[2]["status"], rd.Events[3]["status"]})
		assert.Equal(t, "closed", rd.Status)

		// Streaming (spec 8.6): each event with its ID as the SSE id;
		// Last-Event-ID wins over cursor.
		r = c.do(t, call{method: get, path: conv + "/events?cursor=" + oldest, session: s, frames: len(rd.Events), want: 200,
			header: map[string]string{"Accept": "text/event-stream", "Last-Event-ID": cursor}})
		assert.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
		var frames []string
		for _, f := range strings.Split(strings.TrimSuffix(string(r.Body), "\n\n"), "\n\n") {
			if !strings.HasPrefix(f, ":") {
				frames = append(frames, f)
			}
		}
		require.Len(t, frames, len(rd.Events))
		for i, f := range frames {
			idLine, data, _ := strings.Cut(f, "\n")
			assert.Equal(t, "id: "+rd.Events[i]["id"].(string), idLine)
			var e map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &e))
			assert.Equal(t, rd.Events[i], e)
		}
		// Signed in (spec 8.11): the conversation takes the account, and
		// then needs a token for it: a challenge, not a 404.
		token := signIn(t, "alice", "correct horse")
		r = c.do(t, call{method: post, path: base, session: in("conversations-account", token), body: send("msg_account", "Where is my order?"), want: 201})
		mine := base + "/" + r.JSON(t)["conversation_id"].(string)
		c.do(t, call{method: get, path: mine + "/events", session: in("conversations-account", token), want: 200})
		for _, k := range []call{
			{method: get, path: mine + "/events"},
			{method: post, path: mine + "/messages", body: send("msg_signed_out", "Hello?")},
		} {
			k.session, k.want = in("conversations-account", ""), 401
			r = c.do(t, k)
			assert.Equal(t, "unauthorized", r.JSON(t)["error"])
			assert.Equal(t, `Bearer realm="poppyhost", resource_metadata="https://acme.example/.well-known/oauth-protected-resource"`,
				r.Header.Get("WWW-Authenticate"))
		}

		// Every route: a token that is not valid is a challenge ...
		for _, k := range []call{
			{method: post, path: base, body: send("msg_bad_token", "Hi.")},
			{method: post, path: conv + "/messages", body: send("msg_bad_token", "Hi.")},
			{method: get, path: conv + "/events"},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: conv + "/close", body: `{}`},
		} {
			k.session, k.want = in("conversations-bad-token", bogus), 401
			r = c.do(t, k)
			assert.Equal(t, "invalid_token", r.JSON(t)["error"], k.path)
			assert.Contains(t, r.Header.Get("WWW-Authenticate"), `Bearer realm="poppyhost", error="invalid_token"`, k.path)
		}
		// ... and another User's conversation, or an unknown one, does not
		// exist (spec 8.2).
		someoneElse := func(req *http.Request) {
			agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: "conversations-other", Sub: "usr_other"}, peers.SessionOptions{})
		}
		for _, k := range []call{
			{method: post, path: base, body: map[string]any{"parent_conversation_id": id, "message": message("msg_other", "Hi.")}},
			{method: post, path: conv + "/messages", body: send("msg_other", "Hi.")},
			{method: get, path: conv + "/events"},
			{method: post, path: conv + "/handoff", body: `{}`},
			{method: post, path: conv + "/close", body: `{}`},
			{method: get, path: base + "/cnv_nosuch/events", session: s},
		} {
			if k.session == nil {
				k.session = someoneElse
			}
			k.want = 404
			r = c.do(t, k)
			assert.Equal(t, "conversation_not_found", r.JSON(t)["error"], k.path)
		}

		// Bad requests are invalid_request (spec 8.13), whatever is wrong
		// with the body.
		author := map[string]any{"type": "agent"}
		for _, k := range []call{
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg_empty", "author": author}}},
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg_bot", "author": map[string]any{"type": "bot"}, "text": "Hi."}}},
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg bad", "author": author, "text": "Hi."}}},
			{method: post, path: base, docRejects: true, body: map[string]any{"message": map[string]any{"id": "msg_data", "author": author, "data": "words"}}},
			{method: post, path: base, body: map[string]any{"message": map[string]any{"id": "msg_tz", "author": author, "context": map[string]any{"time_zone": "Mars/Olympus"}}}},
			{method: post, path: base, body: send("msg_long", strings.Repeat("x", 33<<10))},
			{method: post, path: base, body: padded(t, send("msg_padded", "Hi."), 64<<10)},
			{method: post, path: base, ctype: "text/plain", docRejects: true, body: send("msg_ctype", "Hi.")},
			{method: post, path: base, docRejects: true, body: `{}`},
			{method: post, path: base, docRejects: true, body: map[string]any{"user_requested_event_id": oldest, "message": message("msg_orphan", "Hi.")}},
			{method: post, path: base + "?wait=soon", docRejects: true, body: send("msg_wait", "Hi.")},
			{method: post, path: conv + "/messages", docRejects: true, body: `{"message":`},
			{method: post, path: conv + "/messages", docRejects: true, body: `{}`},
			{method: get, path: conv + "/events?cursor=nope"},
			{method: get, path: conv + "/events?wait=-1", docRejects: true},
			{method: post, path: conv + "/handoff", docRejects: true, body: `[]`},
			{method: post, path: conv + "/close", docRejects: true, body: ""},
		} {
			k.session, k.want = s, 400
			assert.Equal(t, "invalid_request", c.do(t, k).JSON(t)["error"], "%s %s", k.method, k.path)
		}
		r = c.do(t, call{method: get, path: conv + "/events", want: 400, docRejects: true})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"])

		// A cursor for events no longer kept (spec 8.5). The prune job
		// keeps events for at least a day (conversations.retention_days),
		// so the test drops the parent's oldest three as that job does.
		acmeCo, err := env.Platform.Tenants.Get(ctx, "acme")
		require.NoError(t, err)
		_, err = env.Pool.Exec(ctx, `DELETE FROM conversation_events WHERE company_id = $1 AND conversation_id = $2 AND seq < 4`, acmeCo.ID, id)
		require.NoError(t, err)
		_, err = env.Pool.Exec(ctx, `UPDATE conversations SET first_seq = 4 WHERE company_id = $1 AND id = $2`, acmeCo.ID, id)
		require.NoError(t, err)
		for _, k := range []call{
			{method: get, path: conv + "/events?cursor=" + oldest},
			{method: post, path: conv + "/messages?wait=0&cursor=" + oldest, body: send("msg_second", "Does it come in medium?")},
			{method: post, path: base + "?wait=0&cursor=" + oldest, body: first},
		} {
			k.session, k.want = s, 410
			assert.Equal(t, "cursor_expired", c.do(t, k).JSON(t)["error"], k.path)
		}
		rd = decode[conversationRead](t, c.do(t, call{method: get, path: conv + "/events", session: s, want: 200}))
		assert.NotEqual(t, oldest, rd.Events[0]["id"], "read again from the beginning")
		pruned = pruneMark{conversation: id, cursor: oldest}
	})

	t.Run("company conversations", func(t *testing.T) {
		// The Company side (its agent or staff, with an API key) of a
		// conversation a Personal Agent starts, through the document.
		base, paBase := "/company/v1/conversations", "/t/acme/poppy/conversations"
		s := func(req *http.Request) {
			agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: "company-conversations"}, peers.SessionOptions{})
		}
		type change struct {
			ConversationID string         `json:"conversation_id"`
			Status         string         `json:"status"`
			Responder      string         `json:"responder"`
			EventID        string         `json:"event_id"`
			Message        map[string]any `json:"message"`
		}
		type view struct {
			ID      string            `json:"id"`
			Status  string            `json:"status"`
			Context map[string]any    `json:"context"`
			Owner   map[string]string `json:"owner"`
			Cursor  string            `json:"cursor"`
		}
		type list struct {
			Conversations []view `json:"conversations"`
			Next          string `json:"next"`
		}
		do := func(method, path string, body any, want int) *peers.Response {
			t.Helper()
			return c.do(t, call{method: method, path: path, token: acmeKey, body: body, want: want})
		}
		sse := func(last string) map[string]string {
			return map[string]string{"Accept": "text/event-stream", "Last-Event-ID": last}
		}

		r := c.do(t, call{method: post, path: paBase, session: s, want: 201, body: map[string]any{"message": map[string]any{
			"id": "msg_company_1", "author": map[string]any{"type": "agent"}, "text": "Can the user exchange the jacket?",
			"context": map[string]any{"locale": "en-GB"}}}})
		id := r.JSON(t)["conversation_id"].(string)
		conv, pa := base+"/"+id, paBase+"/"+id

		// The Company finds it: newest first, by status, page by page.
		l := decode[list](t, do(get, base+"?status=idle&limit=1", nil, 200))
		require.Len(t, l.Conversations, 1)
		assert.Equal(t, id, l.Conversations[0].ID)
		assert.Equal(t, id, l.Next)
		l = decode[list](t, do(get, base+"?limit=100&before="+l.Next, nil, 200))
		assert.True(t, slices.ContainsFunc(l.Conversations, func(v view) bool { return v.ID == pruned.conversation }))
		assert.False(t, slices.ContainsFunc(l.Conversations, func(v view) bool { return v.ID == id }))
		v := decode[view](t, do(get, conv, nil, 200))
		assert.Equal(t, map[string]string{"client_id": agent.ClientID, "user_id": "usr_test", "account": ""}, v.Owner)
		assert.Equal(t, map[string]any{"locale": "en-GB"}, v.Context)

		// The Company Agent works on a reply, streamed to the Personal
		// Agent as text deltas without IDs (spec 8.6), then posts it.
		ch := decode[change](t, do(post, conv+"/status", `{"status":"working"}`, 200))
		assert.Equal(t, change{ConversationID: id, Status: "working", Responder: "agent"}, ch)
		cursor := decode[view](t, do(get, conv, nil, 200)).Cursor
		r = c.do(t, call{method: get, path: pa + "/events", session: s, frames: 1, want: 200, header: sse(cursor),
			opened: func() { do(post, conv+"/deltas", `{"message_id":"msg_reply","text":"I can do that. "}`, 204) }})
		assert.Equal(t, "event: text-delta\ndata: {\"message_id\":\"msg_reply\",\"text\":\"I can do that. \"}\n\n",
			strings.TrimPrefix(string(r.Body), ": keep-alive\n\n"))
		reply := map[string]any{"message": map[string]any{"id": "msg_reply", "text": "I can do that. Want the insulated one?",
			"author": map[string]any{"type": "agent", "id": "aut_stormy", "name": "Stormy", "image": "https://cdn.acme.example/stormy.png"},
			"data":   map[string]any{"replacement_sku": "stormline-insulated-m", "price_difference": 70}}}
		ch = decode[change](t, do(post, conv+"/messages", reply, 201))
		assert.Equal(t, "idle", ch.Status)
		assert.Equal(t, "company", ch.Message["role"])
		// A retry answers the first post; the ID with other content
		// conflicts.
		assert.Equal(t, ch, decode[change](t, do(post, conv+"/messages", reply, 200)))
		r = do(post, conv+"/messages", `{"message":{"id":"msg_reply","author":{"type":"agent"},"text":"Other words."}}`, 409)
		assert.Equal(t, "message_id_conflict", r.JSON(t)["error"])
		rd := decode[conversationRead](t, c.do(t, call{method: get, path: pa + "/events?cursor=" + cursor, session: s, want: 200}))
		assert.Equal(t, []string{"message", "state"}, rd.types())
		assert.Equal(t, ch.EventID, rd.Events[0]["id"])
		assert.Equal(t, ch.Message, rd.Events[0]["message"])

		// It needs the User's account (spec 8.11): an event, and the
		// challenge next to it on a read.
		ch = decode[change](t, do(post, conv+"/authorization", `{"scope":"orders:read orders:write"}`, 201))
		r = c.do(t, call{method: get, path: pa + "/events?cursor=" + rd.Cursor, session: s, want: 200})
		assert.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), `Bearer realm="poppyhost", error="insufficient_scope", scope="orders:read orders:write"`),
			r.Header.Get("WWW-Authenticate"))
		rd = decode[conversationRead](t, r)
		assert.Equal(t, []string{"authorization"}, rd.types())
		assert.Equal(t, ch.EventID, rd.Events[0]["id"])

		// It asks for the User (spec 8.10); the Personal Agent accepts
		// without a message, so the Company speaks first, in the Direct
		// Conversation; accepting again returns the same one.
		asked := decode[change](t, do(post, conv+"/user-requested", `{"reason":"A specialist needs to confirm the exchange."}`, 201)).EventID
		accept := map[string]any{"parent_conversation_id": id, "user_requested_event_id": asked}
		rd = decode[conversationRead](t, c.do(t, call{method: post, path: paBase + "?wait=0", session: s, body: accept, want: 201}))
		direct := rd.ConversationID
		assert.NotEqual(t, id, direct)
		assert.Equal(t, []string{"state"}, rd.types())
		r = c.do(t, call{method: post, path: paBase, session: s, body: accept, want: 201})
		assert.Equal(t, direct, r.JSON(t)["conversation_id"])
		ch = decode[change](t, do(post, base+"/"+direct+"/messages", `{"message":{"author":{"type":"human","name":"Alex"},"text":"Hi, I'm Alex."}}`, 201))
		assert.Equal(t, "human", ch.Responder)
		assert.NotEmpty(t, ch.Message["id"], "an ID is made for the message")
		r = do(post, base+"/"+direct+"/user-requested", `{"reason":"Again?"}`, 400)
		assert.Contains(t, r.JSON(t)["error_description"], "Direct Conversation")
		assert.Equal(t, "closed", decode[change](t, do(post, base+"/"+direct+"/close", nil, 200)).Status)
		assert.Equal(t, "closed", decode[change](t, do(post, base+"/"+direct+"/close", `{}`, 200)).Status)

		// Handoff (spec 8.9): nobody is free, with the Company's message;
		// then a person joins.
		c.do(t, call{method: post, path: pa + "/handoff", session: s, body: `{}`, want: 202})
		ch = decode[change](t, do(post, conv+"/handoff-unavailable", nil, 200))
		assert.Equal(t, []string{"idle", "agent", "Nobody is free right now."}, []string{ch.Status, ch.Responder, ch.Message["text"].(string)})
		r = do(post, conv+"/handoff-unavailable", `{"text":"Still nobody."}`, 409)
		assert.Equal(t, "conflict", r.JSON(t)["error"])
		c.do(t, call{method: post, path: pa + "/handoff", session: s, body: `{}`, want: 202})
		ch = decode[change](t, do(post, conv+"/join", `{"author":{"id":"aut_alex","name":"Alex"},"text":"Hi, I'm Alex."}`, 200))
		assert.Equal(t, []string{"idle", "human", "human"}, []string{ch.Status, ch.Responder, ch.Message["author"].(map[string]any)["type"].(string)})
		// The person hands it back to the Company Agent; again, there is
		// nothing to hand back.
		ch = decode[change](t, do(post, conv+"/hand-back", nil, 200))
		assert.Equal(t, []string{"idle", "agent"}, []string{ch.Status, ch.Responder})
		assert.Equal(t, "conflict", do(post, conv+"/hand-back", `{}`, 409).JSON(t)["error"])

		// The Company reads events as the Personal Agent does, streams
		// included.
		rd = decode[conversationRead](t, do(get, conv+"/events?cursor="+cursor, nil, 200))
		assert.Equal(t, []string{"message", "state", "authorization", "user_requested", "direct_opened", "direct_closed",
			"state", "message", "state", "state", "state", "message", "state"}, rd.types())
		last := rd.Events[len(rd.Events)-2]["id"].(string)
		r = c.do(t, call{method: get, path: conv + "/events", token: acmeKey, frames: 1, header: sse(last), want: 200})
		assert.True(t, strings.HasPrefix(string(r.Body), "id: "+rd.Cursor+"\n"), "%s", r.Body)
		c.do(t, call{method: get, path: base + "/" + pruned.conversation + "/events?cursor=" + pruned.cursor, token: acmeKey, want: 410})

		// The webhook secret, shown once and replaced at will.
		r = do(post, base+"/webhook-secret", nil, 201)
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		assert.NotEqual(t, r.JSON(t)["secret"], do(post, base+"/webhook-secret", `{}`, 201).JSON(t)["secret"])

		// Close, twice; then every change is refused.
		assert.Equal(t, "closed", decode[change](t, do(post, conv+"/close", `{}`, 200)).Status)
		assert.Equal(t, "closed", decode[change](t, do(post, conv+"/close", nil, 200)).Status)
		changes := map[string]any{
			"/messages":            `{"message":{"author":{"type":"agent"},"text":"Anything else?"}}`,
			"/deltas":              `{"message_id":"msg_late","text":"Any"}`,
			"/status":              `{"status":"working"}`,
			"/join":                nil,
			"/handoff-unavailable": nil,
			"/hand-back":           nil,
			"/user-requested":      `{"reason":"One more thing."}`,
			"/authorization":       `{"scope":"orders:read"}`,
		}
		for route, body := range changes {
			assert.Equal(t, "conversation_closed", do(post, conv+route, body, 409).JSON(t)["error"], route)
		}
		// Another Company's or no conversation.
		changes["/close"], changes[""], changes["/events"] = nil, nil, nil
		for route, body := range changes {
			method := post
			if route == "" || route == "/events" {
				method = get
			}
			assert.Equal(t, "conversation_not_found", do(method, base+"/cnv_nosuch"+route, body, 404).JSON(t)["error"], route)
		}

		// Bad requests.
		for _, k := range []call{
			{method: get, path: base + "?status=open", docRejects: true},
			{method: get, path: base + "?limit=101", docRejects: true},
			{method: get, path: base + "?before=cnv_nosuch"},
			{method: post, path: base + "/webhook-secret", body: `{"rotate":true}`, docRejects: true},
			{method: get, path: conv + "/events?cursor=nope"},
			{method: post, path: conv + "/messages", docRejects: true,
				body: `{"message":{"author":{"type":"agent"},"text":"Hi.","context":{"locale":"en-GB"}}}`},
			{method: post, path: conv + "/messages", docRejects: true, body: `{"message":{"author":{"type":"agent"},"text":"Hi."},"status":"closed"}`},
			{method: post, path: conv + "/messages", body: `{"message":{"author":{"type":"agent"},"extensions":{"other.example/x":{}}}}`},
			{method: post, path: conv + "/deltas", docRejects: true, body: `{"message_id":"msg_late","text":""}`},
			{method: post, path: conv + "/status", docRejects: true, body: `{"status":"closed"}`},
			{method: post, path: conv + "/join", docRejects: true, body: `{"author":{"type":"agent"}}`},
			{method: post, path: conv + "/handoff-unavailable", docRejects: true, body: map[string]string{"text": strings.Repeat("t", 1001)}},
			{method: post, path: conv + "/user-requested", docRejects: true, body: `{"reason":"  "}`},
			{method: post, path: conv + "/authorization", body: `{"scope":"orders:delete"}`},
			{method: post, path: conv + "/close", docRejects: true, body: `{"reason":"done"}`},
			{method: post, path: conv + "/hand-back", docRejects: true, body: `{"to":"agent"}`},
		} {
			k.token, k.want = acmeKey, 400
			assert.Equal(t, "invalid_request", c.do(t, k).JSON(t)["error"], "%s %s", k.method, k.path)
		}
		// Every route needs an API key; the bodies are JSON of at most
		// 64 KiB.
		for _, op := range operations {
			method, path, _ := strings.Cut(op, " ")
			if !strings.HasPrefix(path, base) {
				continue
			}
			path = strings.ReplaceAll(path, "{conversation_id}", id)
			r = c.do(t, call{method: method, path: path, want: 401, docRejects: true})
			assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
			if method == post {
				body, _ := changes[strings.TrimPrefix(path, conv)].(string)
				if body == "" {
					body = `{}`
				}
				c.do(t, call{method: method, path: path, token: acmeKey, body: padded(t, json.RawMessage(body), 64<<10), want: 413})
				c.do(t, call{method: method, path: path, token: acmeKey, body: body, ctype: "text/plain", want: 415, docRejects: true})
			}
		}
	})
}

// conversationRead is a read of a conversation's events (spec 8.5).
type conversationRead struct {
	ConversationID string           `json:"conversation_id"`
	Events         []map[string]any `json:"events"`
	Cursor         string           `json:"cursor"`
	HasMore        bool             `json:"has_more"`
	Status         string           `json:"status"`
	Responder      string           `json:"responder"`
}

// types lists the events' types.
func (rd conversationRead) types() []string {
	var out []string
	for _, e := range rd.Events {
		out = append(out, e["type"].(string))
	}
	return out
}
