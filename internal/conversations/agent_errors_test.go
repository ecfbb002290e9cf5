package conversations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAgentErrors sends every spec 8.13 error a Personal Agent request can get
// and checks that each refusal changed nothing.
func TestAgentErrors(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	open := a.start(t, paMsg("m-open", "hello"), paReq{})
	other := a.start(t, paMsg("m-other", "another"), paReq{})
	require.Equal(t, http.StatusAccepted, a.send(t, open, paMsg("m-later", "later"), paReq{}).Status)
	closed := a.start(t, paMsg("m-closed", "bye"), paReq{})
	require.Equal(t, http.StatusOK, a.call(t, http.MethodPost, "/"+closed+"/close", "{}", paReq{}).Status)
	parent := a.start(t, paMsg("m-parent", "parent"), paReq{})
	resp := a.call(t, http.MethodPost, "", map[string]any{"parent_conversation_id": parent,
		"message": paMsg("m-direct", "hi")}, paReq{})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	direct := resp.JSON(t)["conversation_id"].(string)
	// A conversation whose first two events were pruned (spec 8.5).
	pruned := a.start(t, paMsg("m-pruned", "old"), paReq{})
	a.companyEvents(t, pruned, "", "", companyMessage("r1", "one"), companyMessage("r2", "two"))
	_, err := a.env.Pool.Exec(context.Background(), `DELETE FROM conversation_events WHERE conversation_id = $1 AND seq < 3`, pruned)
	require.NoError(t, err)
	_, err = a.env.Pool.Exec(context.Background(), `UPDATE conversations SET first_seq = 3 WHERE id = $1`, pruned)
	require.NoError(t, err)

	msg := func(mutate func(m map[string]any)) map[string]any {
		m := paMsg("m-new", "text")
		if mutate != nil {
			mutate(m)
		}
		return map[string]any{"message": m}
	}
	big := strings.Repeat("x", 70<<10)
	long := strings.Repeat("x", 33<<10)
	const (
		invalid = "invalid_request"
		missing = "conversation_not_found"
	)
	type tc struct {
		name   string
		method string
		path   string
		query  string
		body   any
		header []string
		status int
		code   string
		convID string // conversation_id member of direct_conversation_open
	}
	post := func(name, path, query string, body any, status int, code string) tc {
		return tc{name: name, method: http.MethodPost, path: path, query: query, body: body, status: status, code: code}
	}
	get := func(name, path, query string, status int, code string, header ...string) tc {
		return tc{name: name, method: http.MethodGet, path: path, query: query, status: status, code: code, header: header}
	}
	var cases []tc
	// Bodies, on every POST.
	for _, p := range []string{"", "/" + open + "/messages", "/" + open + "/handoff", "/" + open + "/close"} {
		cases = append(cases,
			post("malformed JSON "+p, p, "", `{"message":`, 400, invalid),
			post("trailing data "+p, p, "", `{} {}`, 400, invalid),
			post("empty body "+p, p, "", "", 400, invalid),
			post("not an object "+p, p, "", `[]`, 400, invalid),
			post("over 64 KiB "+p, p, "", msg(func(m map[string]any) { m["text"] = big }), 400, invalid),
			tc{name: "text/plain " + p, method: http.MethodPost, path: p, body: "{}", header: []string{"Content-Type", "text/plain"},
				status: 400, code: invalid},
		)
	}
	// Messages, on start and send.
	for _, p := range []string{"", "/" + open + "/messages"} {
		cases = append(cases,
			post("message over 32 KiB "+p, p, "", msg(func(m map[string]any) { m["text"] = long }), 400, invalid),
			post("no message "+p, p, "", `{}`, 400, invalid),
			post("message null "+p, p, "", `{"message":null}`, 400, invalid),
			post("message not an object "+p, p, "", `{"message":"hi"}`, 400, invalid),
			post("no content "+p, p, "", msg(func(m map[string]any) { delete(m, "text") }), 400, invalid),
			post("bidi override in text "+p, p, "", msg(func(m map[string]any) { m["text"] = "pay \u202e001$" }), 400, invalid),
			post("tag characters in text "+p, p, "", msg(func(m map[string]any) { m["text"] = "hi\U000E0049\U000E0047" }), 400, invalid),
			post("null content "+p, p, "", msg(func(m map[string]any) { m["text"], m["data"] = nil, nil }), 400, invalid),
			post("no ID "+p, p, "", msg(func(m map[string]any) { delete(m, "id") }), 400, invalid),
			post("bad ID "+p, p, "", msg(func(m map[string]any) { m["id"] = "msg 1" }), 400, invalid),
			post("bad ID dot "+p, p, "", msg(func(m map[string]any) { m["id"] = "msg.1" }), 400, invalid),
			post("ID of 257 "+p, p, "", msg(func(m map[string]any) { m["id"] = strings.Repeat("a", 257) }), 400, invalid),
			post("ID a number "+p, p, "", msg(func(m map[string]any) { m["id"] = 7 }), 400, invalid),
			post("no author "+p, p, "", msg(func(m map[string]any) { delete(m, "author") }), 400, invalid),
			post("author bot "+p, p, "", msg(func(m map[string]any) { m["author"] = map[string]any{"type": "bot"} }), 400, invalid),
			post("author company "+p, p, "", msg(func(m map[string]any) { m["author"] = map[string]any{"type": "company"} }), 400, invalid),
			post("data a string "+p, p, "", msg(func(m map[string]any) { m["data"] = "order 1042" }), 400, invalid),
			post("data a number "+p, p, "", msg(func(m map[string]any) { m["data"] = 1042 }), 400, invalid),
			post("text a number "+p, p, "", msg(func(m map[string]any) { m["text"] = 1042 }), 400, invalid),
			post("time_zone "+p, p, "", msg(func(m map[string]any) { m["context"] = map[string]any{"time_zone": "Pacific Time"} }), 400, invalid),
			post("time_zone Local "+p, p, "", msg(func(m map[string]any) { m["context"] = map[string]any{"time_zone": "Local"} }), 400, invalid),
			post("user_available string "+p, p, "", msg(func(m map[string]any) { m["context"] = map[string]any{"user_available": "yes"} }), 400, invalid),
			post("context not an object "+p, p, "", msg(func(m map[string]any) { m["context"] = "en-US" }), 400, invalid),
			post("extension not an object "+p, p, "", msg(func(m map[string]any) {
				m["extensions"] = map[string]any{"example.com/x": []any{1}}
			}), 400, invalid),
		)
		for _, w := range []string{"-1", "abc", "1.5", "", "1e3", "+1"} {
			cases = append(cases, post("wait="+w+" "+p, p, "wait="+w, msg(nil), 400, invalid))
		}
		cases = append(cases,
			post("cursor not an event ID "+p, p, "wait=0&cursor=nope", msg(nil), 400, invalid),
			post("cursor evt_0 "+p, p, "wait=0&cursor=evt_0", msg(nil), 400, invalid),
			post("two waits "+p, p, "wait=1&wait=2", msg(nil), 400, invalid),
		)
	}
	cases = append(cases,
		// A new conversation has no events for a cursor to name: refused
		// before it starts.
		post("start: cursor with wait", "", "wait=0&cursor=evt_1", msg(nil), 400, invalid),
		post("send: cursor beyond the last event", "/"+open+"/messages", "wait=1&cursor=evt_999", msg(nil), 400, invalid),
		post("send: pruned cursor", "/"+pruned+"/messages", "wait=1&cursor=evt_1", msg(nil), 410, "cursor_expired"),
		post("start: user_requested_event_id without parent", "", "",
			map[string]any{"user_requested_event_id": "evt_1", "message": paMsg("m-new", "x")}, 400, invalid),
		post("start: bad user_requested_event_id", "", "",
			map[string]any{"parent_conversation_id": open, "user_requested_event_id": "evt 1"}, 400, invalid),
		post("start: event that is not user_requested", "", "",
			map[string]any{"parent_conversation_id": open, "user_requested_event_id": "evt_1"}, 400, invalid),
		post("start: parent without message or event", "", "", map[string]any{"parent_conversation_id": open}, 400, invalid),
		post("start: unknown parent", "", "", map[string]any{"parent_conversation_id": "cnv_nope", "message": paMsg("m-new", "x")}, 404, missing),
		post("start: malformed parent", "", "", map[string]any{"parent_conversation_id": "cnv.nope", "message": paMsg("m-new", "x")}, 404, missing),
		post("start: Direct Conversation as parent", "", "", map[string]any{"parent_conversation_id": direct, "message": paMsg("m-new", "x")}, 404, missing),
		post("start: closed parent", "", "", map[string]any{"parent_conversation_id": closed, "message": paMsg("m-new", "x")}, 409, "conversation_closed"),
		tc{name: "start: second Direct Conversation", method: http.MethodPost, body: map[string]any{"parent_conversation_id": parent,
			"message": paMsg("m-new", "x")}, status: 409, code: "direct_conversation_open", convID: direct},
		post("start: message ID conflict", "", "", map[string]any{"message": paMsg("m-open", "other text")}, 409, "message_id_conflict"),
		post("start: message ID of a later message", "", "", map[string]any{"message": paMsg("m-later", "later")}, 409, "message_id_conflict"),
		post("send: message ID conflict", "/"+open+"/messages", "", map[string]any{"message": paMsg("m-open", "other text")}, 409, "message_id_conflict"),
		// The ID is the User's, not the conversation's (spec 8.3).
		post("send: message ID of another conversation", "/"+open+"/messages", "", map[string]any{"message": paMsg("m-other", "another")}, 409, "message_id_conflict"),
		post("send: first message ID of another conversation", "/"+other+"/messages", "", map[string]any{"message": paMsg("m-open", "hello")}, 409, "message_id_conflict"),
		post("send: closed", "/"+closed+"/messages", "", msg(nil), 409, "conversation_closed"),
		tc{name: "send: parent of an open Direct Conversation", method: http.MethodPost, path: "/" + parent + "/messages", body: msg(nil),
			status: 409, code: "direct_conversation_open", convID: direct},
		tc{name: "handoff: parent of an open Direct Conversation", method: http.MethodPost, path: "/" + parent + "/handoff", body: "{}",
			status: 409, code: "direct_conversation_open", convID: direct},
		post("handoff: closed", "/"+closed+"/handoff", "", "{}", 409, "conversation_closed"),
	)
	for _, bad := range []string{"cnv_nope", "cnv.nope", "cnv~nope", strings.Repeat("a", 257)} {
		cases = append(cases,
			post("send: not found "+bad[:8], "/"+bad+"/messages", "", msg(nil), 404, missing),
			post("handoff: not found "+bad[:8], "/"+bad+"/handoff", "", "{}", 404, missing),
			post("close: not found "+bad[:8], "/"+bad+"/close", "", "{}", 404, missing),
			get("events: not found "+bad[:8], "/"+bad+"/events", "", 404, missing),
		)
	}
	for _, w := range []string{"-1", "abc", "1.5", "", "1e3"} {
		cases = append(cases, get("events: wait="+w, "/"+open+"/events", "wait="+w, 400, invalid))
	}
	for _, c := range []string{"nope", "evt_0", "evt_01", "evt_999", "evt_-1", "cnv_1"} {
		cases = append(cases, get("events: cursor="+c, "/"+open+"/events", "cursor="+c, 400, invalid))
		cases = append(cases, get("events: Last-Event-ID "+c, "/"+open+"/events", "", 400, invalid, "Last-Event-ID", c))
	}
	cases = append(cases,
		get("events: pruned cursor", "/"+pruned+"/events", "cursor=evt_1", 410, "cursor_expired"),
		get("events: pruned Last-Event-ID", "/"+pruned+"/events", "", 410, "cursor_expired", "Last-Event-ID", "evt_1"),
		get("events: pruned cursor, stream", "/"+pruned+"/events", "cursor=evt_1", 410, "cursor_expired", "Accept", "text/event-stream"),
	)

	before := a.counts(t)
	for _, c := range cases {
		resp := a.call(t, c.method, c.path, c.body, paReq{Query: c.query, Header: c.header})
		require.Equal(t, c.status, resp.Status, "%s: %s", c.name, resp.Body)
		body := requireError(t, resp, c.status, c.code)
		if c.convID != "" {
			require.Equal(t, c.convID, body["conversation_id"], c.name)
		} else {
			require.NotContains(t, body, "conversation_id", c.name)
		}
		require.Equal(t, before, a.counts(t), "%s changed something", c.name)
	}

	// The kept events of the pruned conversation are still readable, from
	// the start or from the cursor just before them.
	rd := a.read(t, pruned, "", paReq{})
	require.Equal(t, "evt_3", rd.Events[0]["id"])
	rd = a.read(t, pruned, "cursor=evt_2", paReq{})
	require.Equal(t, "evt_3", rd.Events[0]["id"])
}

// TestAgentOwnership walks the ownership table of spec 8.2.
func TestAgentOwnership(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	stranger := a.env.StartAgent(t, "stranger.test")
	ada, bob := a.signIn(t, "ada"), a.signIn(t, "bob")

	plain := a.start(t, paMsg("m-plain", "signed out"), paReq{SID: "sid-one", AgentID: "agt_one"})
	bound := a.start(t, paMsg("m-bound", "signed in"), paReq{Token: ada})
	var account *int64
	require.NoError(t, a.env.Pool.QueryRow(context.Background(), `SELECT account_id FROM conversations WHERE id = $1`, bound).Scan(&account))
	require.NotNil(t, account, "a conversation started with an access token uses the account")

	// Every route, for a request that must look like no conversation.
	n := 0
	refused := func(who paReq, id string) {
		t.Helper()
		before := a.counts(t)
		n++
		for _, r := range []struct {
			method, path string
			body         any
		}{
			{http.MethodGet, "/" + id + "/events", nil},
			{http.MethodPost, "/" + id + "/messages", map[string]any{"message": paMsg("m-refused-"+string(rune('a'+n)), "hi")}},
			{http.MethodPost, "/" + id + "/handoff", "{}"},
			{http.MethodPost, "/" + id + "/close", "{}"},
			{http.MethodPost, "", map[string]any{"parent_conversation_id": id, "message": paMsg("m-refused-p"+string(rune('a'+n)), "hi")}},
		} {
			resp := a.call(t, r.method, r.path, r.body, who)
			requireError(t, resp, http.StatusNotFound, "conversation_not_found")
			require.Empty(t, resp.Header.Get("WWW-Authenticate"))
		}
		require.Equal(t, before, a.counts(t))
	}
	// Another Personal Agent (client_id), even with the same User ID.
	refused(paReq{Agent: stranger}, plain)
	refused(paReq{Agent: stranger}, bound)
	// Another User of the same Personal Agent.
	refused(paReq{Sub: "usr_other"}, plain)
	refused(paReq{Sub: "usr_other", Token: ada}, bound)
	refused(paReq{Sub: "usr_other"}, bound)
	// The same User with another account's token.
	refused(paReq{Token: bob}, bound)

	// The same User signed out, on a conversation that used the account:
	// a challenge (spec 8.11), nothing changed.
	before := a.counts(t)
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/" + bound + "/events", nil},
		{http.MethodPost, "/" + bound + "/messages", map[string]any{"message": paMsg("m-401", "hi")}},
		{http.MethodPost, "/" + bound + "/handoff", "{}"},
		{http.MethodPost, "/" + bound + "/close", "{}"},
		{http.MethodPost, "", map[string]any{"parent_conversation_id": bound, "message": paMsg("m-401p", "hi")}},
	} {
		resp := a.call(t, r.method, r.path, r.body, paReq{})
		require.Equal(t, http.StatusUnauthorized, resp.Status, "%s %s: %s", r.method, r.path, resp.Body)
		challenge := resp.Header.Get("WWW-Authenticate")
		require.True(t, strings.HasPrefix(challenge, "Bearer "), challenge)
		require.NotContains(t, challenge, "error=", "RFC 6750 §3.1: no error code without a token")
		require.Contains(t, challenge, `resource_metadata="https://shop.example/.well-known/oauth-protected-resource"`)
	}
	require.Equal(t, before, a.counts(t))

	// Agent ID and Session are not part of ownership: another Session and
	// Agent ID of the same User continue either conversation.
	for i, who := range []paReq{{SID: "sid-two"}, {SID: "sid-three", AgentID: "agt_two"}, {}} {
		resp := a.send(t, plain, paMsg("m-plain-"+string(rune('a'+i)), "more"), who)
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		a.read(t, plain, "", who)
		who.Token = ada
		resp = a.send(t, bound, paMsg("m-bound-"+string(rune('a'+i)), "more"), who)
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	}

	// A signed-out conversation continued with a token uses that account
	// from then on.
	resp := a.send(t, plain, paMsg("m-plain-signed-in", "signed in now"), paReq{Token: ada})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	resp = a.call(t, http.MethodGet, "/"+plain+"/events", nil, paReq{})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	refused(paReq{Token: bob}, plain)

	// Reading, closing and a challenge never bind an account.
	reader := a.start(t, paMsg("m-reader", "hello"), paReq{})
	a.read(t, reader, "", paReq{Token: ada})
	require.Equal(t, http.StatusOK, a.call(t, http.MethodPost, "/"+reader+"/close", "{}", paReq{Token: ada}).Status)
	a.read(t, reader, "", paReq{})
}

// TestAgentMessageIDRetries checks spec 8.3: a retry with the same content
// gets the original response and adds nothing; other content gets
// message_id_conflict; IDs are the User's, across conversations.
func TestAgentMessageIDRetries(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)

	first := map[string]any{"message": map[string]any{"id": "m1", "author": map[string]any{"type": "agent"}, "text": "hi",
		"data": map[string]any{"a": 1, "b": []any{1, 2}}}}
	resp := a.call(t, http.MethodPost, "", first, paReq{})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	original := resp.JSON(t)
	id := original["conversation_id"].(string)
	before := a.counts(t)

	// A retried first message returns the conversation it started, even
	// from another Session and with its JSON written differently.
	retry := `{"message":{"text":"hi","data":{"b":[1, 2],"a":1},"author":{"type":"agent"},"id":"m1"},"unknown":1}`
	resp = a.call(t, http.MethodPost, "", retry, paReq{SID: "another-session"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, original, resp.JSON(t))
	require.Equal(t, before, a.counts(t))
	// Other content is a conflict.
	resp = a.call(t, http.MethodPost, "", map[string]any{"message": paMsg("m1", "hello")}, paReq{})
	requireError(t, resp, http.StatusConflict, "message_id_conflict")

	// A later message, retried.
	resp = a.send(t, id, paMsg("m2", "second"), paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	sent := resp.JSON(t)
	before = a.counts(t)
	resp = a.send(t, id, paMsg("m2", "second"), paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, sent, resp.JSON(t))
	require.Equal(t, before, a.counts(t))
	requireError(t, a.send(t, id, paMsg("m2", "second!"), paReq{}), http.StatusConflict, "message_id_conflict")
	requireError(t, a.send(t, id, map[string]any{"id": "m2", "author": map[string]any{"type": "human"}, "text": "second"}, paReq{}),
		http.StatusConflict, "message_id_conflict")

	// The original response, not the current state: after a handoff the
	// retries still answer idle (spec 8.3).
	resp = a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, "queued", resp.JSON(t)["status"])
	resp = a.send(t, id, paMsg("m2", "second"), paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, sent, resp.JSON(t))
	resp = a.call(t, http.MethodPost, "", first, paReq{})
	require.Equal(t, original, resp.JSON(t))
	// A retry with wait reads the current state.
	resp = a.send(t, id, paMsg("m2", "second"), paReq{Query: "wait=0"})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, "queued", decodeRead(t, resp.Body).Status)

	// A retry after the conversation closed still gets the original
	// response rather than conversation_closed.
	require.Equal(t, http.StatusOK, a.call(t, http.MethodPost, "/"+id+"/close", "{}", paReq{}).Status)
	resp = a.send(t, id, paMsg("m2", "second"), paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, sent, resp.JSON(t))

	// IDs are unique per User across conversations.
	id2 := a.start(t, paMsg("m3", "third"), paReq{})
	requireError(t, a.send(t, id2, paMsg("m2", "second"), paReq{}), http.StatusConflict, "message_id_conflict")
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{"message": paMsg("m2", "second")}, paReq{}),
		http.StatusConflict, "message_id_conflict")
	// Another User has IDs of their own.
	resp = a.call(t, http.MethodPost, "", first, paReq{Sub: "usr_other"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.NotEqual(t, id, resp.JSON(t)["conversation_id"])
	// ... and so does the same User ID of another Personal Agent.
	resp = a.call(t, http.MethodPost, "", first, paReq{Agent: a.env.StartAgent(t, "stranger.test")})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

	// A retried first message of another User's conversation is not found
	// as theirs: each User's IDs are separate, so usr_other's m1 is new.
	var n int
	require.NoError(t, a.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM conversation_message_ids WHERE message_id = 'm1'`).Scan(&n))
	require.Equal(t, 3, n)
}

// TestAgentConcurrentFirstMessages races copies of one first message: they
// start one conversation.
func TestAgentConcurrentFirstMessages(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	const copies = 8
	ids := make(chan string, copies)
	errs := make(chan error, copies)
	for range copies {
		req := a.request(t, context.Background(), http.MethodPost, "", map[string]any{"message": paMsg("m1", "hi")}, paReq{})
		go func() {
			resp, err := a.env.Client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var body map[string]any
			if resp.StatusCode != http.StatusCreated {
				errs <- fmt.Errorf("status %d", resp.StatusCode)
				return
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				errs <- err
				return
			}
			ids <- body["conversation_id"].(string)
		}()
	}
	var first string
	for range copies {
		select {
		case err := <-errs:
			t.Fatal(err)
		case id := <-ids:
			if first == "" {
				first = id
			}
			require.Equal(t, first, id)
		}
	}
	require.Equal(t, 1, a.counts(t).Conversations)
	require.Equal(t, 2, a.eventCount(t, first))
}

// TestAgentUnknownFieldsAndExtensions checks spec 3.3 and 8.4: unknown members
// are ignored, and extension content the Company does not list is dropped.
func TestAgentUnknownFieldsAndExtensions(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	resp := a.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+paSlug,
		map[string]any{"extensions": map[string]any{"shop.example/links": map[string]any{"version": "1"}}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	body := map[string]any{
		"future_member": map[string]any{"x": 1},
		"message": map[string]any{
			"id": "m1", "role": "company", "future": true,
			"author": map[string]any{"type": "agent", "name": "Impostor", "id": "aut_x", "image": "https://x.example/a.png"},
			"text":   "hi",
			"extensions": map[string]any{
				"shop.example/links":   map[string]any{"items": []any{map[string]any{"url": "https://shop.example/help"}}},
				"other.example/emoji":  map[string]any{"face": "smile"},
				"mediated-sign-in-ish": map[string]any{},
			},
		},
	}
	resp = a.call(t, http.MethodPost, "", body, paReq{})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	id := resp.JSON(t)["conversation_id"].(string)
	msg := a.read(t, id, "", paReq{}).Events[0]["message"].(map[string]any)
	require.Equal(t, map[string]any{
		"id": "m1", "author": map[string]any{"type": "agent"}, "text": "hi",
		"extensions": map[string]any{
			"shop.example/links": map[string]any{"items": []any{map[string]any{"url": "https://shop.example/help"}}},
		},
	}, msg)

	// Spec 8.4: "A message MUST have at least one of text, data, context,
	// or extensions." Spec 3.3: "Personal Agents and Companies MUST
	// ignore extensions they don't support". A message whose only content
	// is extensions the Company does not list has nothing left once they
	// are ignored: it is refused as invalid_request, naming them, and
	// nothing is stored (docs/decisions.md). The operations extension,
	// off at this Company, is ignored the same way.
	for _, ext := range []map[string]any{
		{"other.example/emoji": map[string]any{"face": "wink"}},
		{"operations": map[string]any{"approval": map[string]any{"operation_id": "op_x"}}},
	} {
		resp = a.send(t, id, map[string]any{"id": "m2", "author": map[string]any{"type": "agent"}, "extensions": ext}, paReq{})
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
		require.Equal(t, "invalid_request", resp.JSON(t)["error"])
		for name := range ext {
			require.Contains(t, resp.JSON(t)["error_description"], name)
		}
		require.Equal(t, 2, a.eventCount(t, id), "nothing stored")
	}
	// With content the Company supports beside it, the message is stored
	// without the unknown extension.
	resp = a.send(t, id, map[string]any{"id": "m2", "author": map[string]any{"type": "agent"}, "text": "wink",
		"extensions": map[string]any{"other.example/emoji": map[string]any{"face": "wink"}}}, paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	msg = a.read(t, id, "cursor=evt_2", paReq{}).Events[0]["message"].(map[string]any)
	require.Equal(t, map[string]any{"id": "m2", "author": map[string]any{"type": "agent"}, "text": "wink"}, msg)

	// Unknown members of handoff and close bodies are ignored too.
	resp = a.call(t, http.MethodPost, "/"+id+"/handoff", `{"reason":"later versions"}`, paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	resp = a.call(t, http.MethodPost, "/"+id+"/close", `{"reason":"later versions"}`, paReq{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// TestAgentContext checks spec 8.4: fields a message leaves out keep their
// values.
func TestAgentContext(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	stored := func(id string) map[string]any {
		t.Helper()
		var ctx map[string]any
		require.NoError(t, a.env.Pool.QueryRow(context.Background(), `SELECT context FROM conversations WHERE id = $1`, id).Scan(&ctx))
		return ctx
	}
	m := paMsg("m1", "hello")
	m["context"] = map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true, "units": "metric"}
	id := a.start(t, m, paReq{})
	require.Equal(t, map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true, "units": "metric"}, stored(id))

	// A message with only context updates it (the 8.4 example).
	resp := a.send(t, id, map[string]any{"id": "m2", "author": map[string]any{"type": "agent"},
		"context": map[string]any{"user_available": false}}, paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": false, "units": "metric"}, stored(id))
	rd := a.read(t, id, "cursor=evt_2", paReq{})
	require.Equal(t, map[string]any{"user_available": false}, rd.Events[0]["message"].(map[string]any)["context"])

	m = paMsg("m3", "later")
	m["context"] = map[string]any{"time_zone": "Europe/Paris", "locale": "fr-FR"}
	require.Equal(t, http.StatusAccepted, a.send(t, id, m, paReq{}).Status)
	require.Equal(t, map[string]any{"locale": "fr-FR", "time_zone": "Europe/Paris", "user_available": false, "units": "metric"}, stored(id))

	// A message without context changes nothing.
	require.Equal(t, http.StatusAccepted, a.send(t, id, paMsg("m4", "no context"), paReq{}).Status)
	require.Equal(t, "Europe/Paris", stored(id)["time_zone"])

	// time_zone must be an IANA name and user_available a boolean.
	for _, bad := range []map[string]any{
		{"time_zone": "PST"}, {"time_zone": "America/Nowhere"}, {"time_zone": ""}, {"time_zone": 5},
		{"user_available": "true"}, {"user_available": 1}, {"user_available": nil}, {"locale": ""},
	} {
		m := paMsg("m5", "bad")
		m["context"] = bad
		requireError(t, a.send(t, id, m, paReq{}), http.StatusBadRequest, "invalid_request")
	}
	require.Equal(t, "Europe/Paris", stored(id)["time_zone"])
	// The merged context keeps the limit of 50 fields.
	many := func(prefix string, n int) map[string]any {
		out := map[string]any{}
		for i := range n {
			out[fmt.Sprintf("%s%d", prefix, i)] = i
		}
		return out
	}
	m = paMsg("m-many-a", "many")
	m["context"] = many("a", 40)
	require.Equal(t, http.StatusAccepted, a.send(t, id, m, paReq{}).Status)
	m = paMsg("m-many-b", "more")
	m["context"] = many("b", 40)
	requireError(t, a.send(t, id, m, paReq{}), http.StatusBadRequest, "invalid_request")
	require.NotContains(t, stored(id), "b0")
	m["context"] = many("a", 46)
	require.Equal(t, http.StatusAccepted, a.send(t, id, m, paReq{}).Status, "replacing fields keeps the count")
	require.Len(t, stored(id), 50)
	for _, good := range []string{"UTC", "Asia/Kolkata", "America/Argentina/Buenos_Aires"} {
		m := paMsg("m-tz-"+strings.ReplaceAll(good, "/", "-"), "tz")
		m["context"] = map[string]any{"time_zone": good}
		require.Equal(t, http.StatusAccepted, a.send(t, id, m, paReq{}).Status, good)
	}
}

// TestAgentHandoff checks spec 8.9.
func TestAgentHandoff(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})

	resp := a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"status": "queued", "responder": "agent"}, resp.JSON(t))
	rd := a.read(t, id, "cursor=evt_2", paReq{})
	require.Equal(t, []string{"state"}, rd.types())
	require.Equal(t, "queued", rd.Events[0]["status"])
	require.Equal(t, "agent", rd.Events[0]["responder"], "responder stays agent while queued (spec 8.7)")

	// Again: the current state, nothing added.
	n := a.eventCount(t, id)
	resp = a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"status": "queued", "responder": "agent"}, resp.JSON(t))
	require.Equal(t, n, a.eventCount(t, id))

	// The Personal Agent can keep sending while it waits.
	resp = a.send(t, id, paMsg("m2", "the user wants a refund"), paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, "queued", resp.JSON(t)["status"])

	// A person joined: handoff changes nothing.
	a.companyEvents(t, id, "idle", "human")
	n = a.eventCount(t, id)
	resp = a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"status": "idle", "responder": "human"}, resp.JSON(t))
	require.Equal(t, n, a.eventCount(t, id))

	// Closed: conversation_closed.
	require.Equal(t, http.StatusOK, a.call(t, http.MethodPost, "/"+id+"/close", "{}", paReq{}).Status)
	requireError(t, a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{}), http.StatusConflict, "conversation_closed")
	require.Equal(t, n+1, a.eventCount(t, id))
}

// TestAgentClose checks spec 8.12.
func TestAgentClose(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})
	resp := a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)

	resp = a.call(t, http.MethodPost, "/"+id+"/close", "{}", paReq{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"status": "closed", "responder": "agent"}, resp.JSON(t))
	// The close cancelled the pending handoff.
	var queued, closedAt bool
	require.NoError(t, a.env.Pool.QueryRow(context.Background(),
		`SELECT queued_at IS NOT NULL, closed_at IS NOT NULL FROM conversations WHERE id = $1`, id).Scan(&queued, &closedAt))
	require.False(t, queued)
	require.True(t, closedAt)
	n := a.eventCount(t, id)

	// Idempotent: the same answer, no second event.
	resp = a.call(t, http.MethodPost, "/"+id+"/close", "{}", paReq{SID: "another"})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"status": "closed", "responder": "agent"}, resp.JSON(t))
	require.Equal(t, n, a.eventCount(t, id))

	// Events stay readable.
	rd := a.read(t, id, "", paReq{})
	require.Equal(t, []string{"message", "state", "state", "state"}, rd.types())
	require.Equal(t, "closed", rd.last()["status"])
	require.Equal(t, "closed", rd.Status)
	requireError(t, a.send(t, id, paMsg("m2", "hi"), paReq{}), http.StatusConflict, "conversation_closed")

	// In a closed conversation responder is whoever handled it last.
	id = a.start(t, paMsg("m3", "hello"), paReq{})
	a.companyEvents(t, id, "idle", "human")
	resp = a.call(t, http.MethodPost, "/"+id+"/close", "{}", paReq{})
	require.Equal(t, map[string]any{"status": "closed", "responder": "human"}, resp.JSON(t))
}

func TestAgentUnknownRoutesAndMethods(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})
	resp := a.call(t, http.MethodGet, "/"+id+"/messages", nil, paReq{})
	require.Equal(t, http.StatusMethodNotAllowed, resp.Status, "%s", resp.Body)
	resp = a.call(t, http.MethodPost, "/"+id+"/nothing", "{}", paReq{})
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
	// Without a Session header: invalid_session (spec 5.3).
	resp = a.env.Do(t, http.MethodGet, a.endpoint+"/"+id+"/events", nil)
	requireError(t, resp, http.StatusBadRequest, "invalid_session")
}
