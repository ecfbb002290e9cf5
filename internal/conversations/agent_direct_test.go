package conversations_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
)

// TestAgentDirectConversations checks spec 8.10.
func TestAgentDirectConversations(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	parent := a.start(t, paMsg("m1", "the user wants to exchange a jacket"), paReq{})
	invite := a.companyEvents(t, parent, "", "", conversations.TestEvent{Type: conversations.EventUserRequested,
		Body: map[string]any{"reason": "A specialist needs to confirm the exchange with the customer."}})
	startDirect := func(body map[string]any, o paReq) *map[string]any {
		t.Helper()
		resp := a.call(t, http.MethodPost, "", body, o)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		m := resp.JSON(t)
		return &m
	}
	accept := map[string]any{"parent_conversation_id": parent, "user_requested_event_id": invite}

	// Accepting the invitation without a message: the Company speaks first.
	before := a.counts(t)
	d1 := (*startDirect(accept, paReq{}))["conversation_id"].(string)
	require.NotEqual(t, parent, d1)
	rd := a.read(t, d1, "", paReq{})
	require.Equal(t, []string{"state"}, rd.types(), "no message from the Personal Agent")
	// The parent got direct_opened with the Direct Conversation's ID.
	rd = a.read(t, parent, "cursor="+invite, paReq{})
	require.Equal(t, []string{"direct_opened"}, rd.types())
	require.Equal(t, d1, rd.Events[0]["conversation_id"])
	after := a.counts(t)
	require.Equal(t, before.Conversations+1, after.Conversations)

	// Repeating parent and event returns the same Direct Conversation and
	// adds nothing, also with a message and from another Session.
	require.Equal(t, d1, (*startDirect(accept, paReq{SID: "other"}))["conversation_id"])
	require.Equal(t, d1, (*startDirect(map[string]any{"parent_conversation_id": parent, "user_requested_event_id": invite,
		"message": paMsg("m-hi", "hi")}, paReq{}))["conversation_id"])
	require.Equal(t, after, a.counts(t))

	// While it is open the parent can be read, but takes no message or
	// handoff, and no second Direct Conversation.
	a.read(t, parent, "", paReq{})
	for _, r := range []struct {
		path string
		body any
	}{
		{"/" + parent + "/messages", map[string]any{"message": paMsg("m2", "hello?")}},
		{"/" + parent + "/handoff", "{}"},
		{"", map[string]any{"parent_conversation_id": parent, "message": paMsg("m3", "me again")}},
	} {
		body := requireError(t, a.call(t, http.MethodPost, r.path, r.body, paReq{}), http.StatusConflict, "direct_conversation_open")
		require.Equal(t, d1, body["conversation_id"])
	}
	require.Equal(t, after, a.counts(t))

	// The Direct Conversation itself is no parent, and another User's
	// parent is not found.
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{"parent_conversation_id": d1, "message": paMsg("m4", "x")}, paReq{}),
		http.StatusNotFound, "conversation_not_found")
	requireError(t, a.call(t, http.MethodPost, "", accept, paReq{Sub: "usr_other"}), http.StatusNotFound, "conversation_not_found")
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{"parent_conversation_id": parent, "message": paMsg("m4", "x")},
		paReq{Sub: "usr_other"}), http.StatusNotFound, "conversation_not_found")
	// The event must name a user_requested event of that parent.
	for _, ev := range []string{"evt_1", "evt_2", "evt_999", "nope"} {
		requireError(t, a.call(t, http.MethodPost, "", map[string]any{"parent_conversation_id": parent, "user_requested_event_id": ev}, paReq{}),
			http.StatusBadRequest, "invalid_request")
	}
	other := a.start(t, paMsg("m5", "another"), paReq{})
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{"parent_conversation_id": other, "user_requested_event_id": invite}, paReq{}),
		http.StatusBadRequest, "invalid_request")
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{"user_requested_event_id": invite}, paReq{}),
		http.StatusBadRequest, "invalid_request")
	require.Equal(t, after.Conversations+1, a.counts(t).Conversations)

	// The User talks in the Direct Conversation.
	resp := a.send(t, d1, map[string]any{"id": "m6", "author": map[string]any{"type": "human"}, "text": "Medium, please."}, paReq{})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)

	// Closing it adds direct_closed to the parent, which takes messages
	// again.
	resp = a.call(t, http.MethodPost, "/"+d1+"/close", "{}", paReq{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "closed", resp.JSON(t)["status"])
	rd = a.read(t, parent, "cursor="+invite, paReq{})
	require.Equal(t, []string{"direct_opened", "direct_closed"}, rd.types())
	require.Equal(t, d1, rd.Events[1]["conversation_id"])
	require.Equal(t, http.StatusAccepted, a.send(t, parent, paMsg("m7", "the user confirmed"), paReq{}).Status)
	require.Equal(t, http.StatusAccepted, a.call(t, http.MethodPost, "/"+parent+"/handoff", "{}", paReq{}).Status)
	// Closing it again adds nothing to either.
	n := a.eventCount(t, parent)
	require.Equal(t, http.StatusOK, a.call(t, http.MethodPost, "/"+d1+"/close", "{}", paReq{}).Status)
	require.Equal(t, n, a.eventCount(t, parent))

	// The accepted invitation still returns the closed Direct
	// Conversation.
	got := *startDirect(accept, paReq{})
	require.Equal(t, map[string]any{"conversation_id": d1, "status": "closed", "responder": "agent"}, got)

	// A Direct Conversation started by the Personal Agent, with a message.
	d2 := (*startDirect(map[string]any{"parent_conversation_id": parent,
		"message": map[string]any{"id": "m8", "author": map[string]any{"type": "human"}, "text": "Hi, I have a question."}}, paReq{}))["conversation_id"].(string)
	rd = a.read(t, d2, "", paReq{})
	require.Equal(t, []string{"message", "state"}, rd.types())
	// A retried first message of it returns it.
	require.Equal(t, d2, (*startDirect(map[string]any{"parent_conversation_id": parent,
		"message": map[string]any{"id": "m8", "author": map[string]any{"type": "human"}, "text": "Hi, I have a question."}}, paReq{}))["conversation_id"])
	// The same message ID without the parent is other content.
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{
		"message": map[string]any{"id": "m8", "author": map[string]any{"type": "human"}, "text": "Hi, I have a question."}}, paReq{}),
		http.StatusConflict, "message_id_conflict")

	// Closing the parent closes its open Direct Conversation.
	resp = a.call(t, http.MethodPost, "/"+parent+"/close", "{}", paReq{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	rd = a.read(t, d2, "", paReq{})
	require.Equal(t, "closed", rd.Status)
	require.Equal(t, "closed", rd.last()["status"])
	rd = a.read(t, parent, "", paReq{})
	types := rd.types()
	require.Equal(t, []string{"direct_opened", "direct_closed", "state"}, types[len(types)-3:])
	require.Equal(t, d2, rd.Events[len(types)-2]["conversation_id"])
	require.Equal(t, "closed", rd.last()["status"])
	requireError(t, a.send(t, d2, paMsg("m9", "hello?"), paReq{}), http.StatusConflict, "conversation_closed")

	// A closed parent takes no new Direct Conversation, but an accepted
	// invitation still returns its own.
	requireError(t, a.call(t, http.MethodPost, "", map[string]any{"parent_conversation_id": parent, "message": paMsg("m10", "x")}, paReq{}),
		http.StatusConflict, "conversation_closed")
	require.Equal(t, d1, (*startDirect(accept, paReq{}))["conversation_id"])
}

// TestDirectConversationUnderAccountParent: the Direct Conversation checks
// the parent's ownership, account included (spec 8.10, 8.2).
func TestAgentDirectConversationUnderAccountParent(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	ada, bob := a.signIn(t, "ada"), a.signIn(t, "bob")
	parent := a.start(t, paMsg("m1", "hello"), paReq{Token: ada})
	invite := a.companyEvents(t, parent, "", "", conversations.TestEvent{Type: conversations.EventUserRequested,
		Body: map[string]any{"reason": "Please join."}})
	accept := map[string]any{"parent_conversation_id": parent, "user_requested_event_id": invite}

	resp := a.call(t, http.MethodPost, "", accept, paReq{})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
	requireError(t, a.call(t, http.MethodPost, "", accept, paReq{Token: bob}), http.StatusNotFound, "conversation_not_found")

	resp = a.call(t, http.MethodPost, "", accept, paReq{Token: ada})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	direct := resp.JSON(t)["conversation_id"].(string)
	// The Direct Conversation uses the account too.
	resp = a.call(t, http.MethodGet, "/"+direct+"/events", nil, paReq{})
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	a.read(t, direct, "", paReq{Token: ada})
}
