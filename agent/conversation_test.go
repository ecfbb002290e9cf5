package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A fake conversation endpoint: events streamed over SSE two at a time,
// closing the stream after each pair, so the agent reconnects with
// Last-Event-ID.
func TestConversationStreamsAndReconnects(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	events := []Event{
		{ID: "e1", Type: "state", Status: "working", Responder: "agent"},
		{ID: "e2", Type: "message", Message: &Message{ID: "m1", Role: "company", Author: Author{Type: "agent"}, Text: "Hello"}},
		{ID: "e3", Type: "authorization", Error: "insufficient_scope", Scope: "orders:read"},
		{ID: "e4", Type: "state", Status: "idle", Responder: "human"},
	}
	var mu sync.Mutex
	var lastIDs []string
	f.mux.HandleFunc("POST /poppy/conversations", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Message Message `json:"message"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		require.Equal(t, "agent", body.Message.Author.Type)
		require.NotEmpty(t, body.Message.ID)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"conversation_id": "cnv_1", "events": []Event{}, "cursor": "", "has_more": false, "status": "working", "responder": "agent"})
	})
	f.mux.HandleFunc("GET /poppy/conversations/cnv_1/events", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "text/event-stream", r.Header.Get("Accept"))
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		start := 0
		for i, e := range events {
			if e.ID == r.Header.Get("Last-Event-ID") {
				start = i + 1
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: text-delta\ndata: {\"message_id\":\"m1\",\"text\":\"Hel\"}\n\n")
		for _, e := range events[start:min(start+2, len(events))] {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "id: %s\ndata: %s\n\n", e.ID, b)
		}
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	conv, _, err := c.NewSession().StartConversation(f.ctx, Message{Text: "My jacket isn't warm enough."}, 0)
	require.NoError(t, err)
	require.Equal(t, "cnv_1", conv.ID)

	var got []string
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	err = conv.Stream(ctx, func(e Event) bool {
		got = append(got, e.ID)
		return len(got) < 4
	})
	require.NoError(t, err)
	require.Equal(t, []string{"e1", "e2", "e3", "e4"}, got, "text-delta skipped, each event once")
	require.Equal(t, []string{"", "e2"}, lastIDs, "reconnected with the last handled event")
	require.Equal(t, "idle", conv.Status)
	require.Equal(t, "human", conv.Responder)
}

// An approval in a conversation goes in extensions.operations.approval,
// and a decline in the Company's answer is returned as *Declined.
func TestConversationApprovalAndDecline(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var sent []map[string]any
	f.mux.HandleFunc("POST /poppy/conversations/cnv_1/messages", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		sent = append(sent, body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]any{"conversation_id": "cnv_1", "cursor": "e9", "has_more": false, "status": "idle", "responder": "agent",
			"events": []any{map[string]any{"id": "e9", "type": "message", "message": map[string]any{"id": "m9", "role": "company", "author": map[string]any{"type": "agent"},
				"text": "Declined.", "extensions": map[string]any{"operations": map[string]any{"declined": map[string]any{"operation_id": "exc_5Rt2", "revision": "r1", "reason": "No."}}}}}}})
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	conv := &Conversation{ID: "cnv_1", s: c.NewSession(), endpoint: c.ConversationEndpoint(), seen: map[string]bool{}}
	var op Operation
	require.NoError(t, json.Unmarshal([]byte(jacketOp), &op))
	user := AsUser(func(context.Context, *Ask) (bool, string, error) { return true, "voice", nil })
	_, _, err = conv.ApproveOperation(f.ctx, &op, jacket, user, 0)
	var d *Declined
	require.ErrorAs(t, err, &d)
	require.Equal(t, "No.", d.Reason)
	require.Len(t, sent, 1, "a declined approval is not sent again")
	approval := sent[0]["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)["approval"].(map[string]any)
	require.Equal(t, "exc_5Rt2", approval["operation_id"])
	require.Equal(t, "r1", approval["revision"])
	require.Equal(t, "user", approval["approver"])
	require.Equal(t, "voice", approval["input_type"])
}

// The Company's answer to an approval in a conversation is returned as
// its text, not taken for a performed operation; a message that failed
// with a 5xx is sent again as the same message with the same approval
// (extension 7).
func TestConversationApprovalReplyAndRetry(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var mu sync.Mutex
	var sent []map[string]any
	f.mux.HandleFunc("POST /poppy/conversations/cnv_1/messages", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		mu.Lock()
		sent = append(sent, body["message"].(map[string]any))
		n := len(sent)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]any{"conversation_id": "cnv_1", "cursor": "e9", "status": "idle", "responder": "agent",
			"events": []any{map[string]any{"id": "e9", "type": "message", "message": map[string]any{"id": "m9", "role": "company",
				"author": map[string]any{"type": "agent"}, "text": "I couldn't make the exchange: the size is sold out."}}}})
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	conv := &Conversation{ID: "cnv_1", s: c.NewSession(), endpoint: c.ConversationEndpoint(), seen: map[string]bool{}}
	var op Operation
	require.NoError(t, json.Unmarshal([]byte(jacketOp), &op))
	var asks []*Ask
	res, _, err := conv.ApproveOperation(f.ctx, &op, map[string]any{"replacement_sku": "stormline-insulated-m"}, countingUser(&asks), 0)
	require.NoError(t, err)
	require.Equal(t, "I couldn't make the exchange: the size is sold out.", res.Reply)
	require.Len(t, asks, 1)
	require.Empty(t, asks[0].Differences)
	require.Len(t, sent, 2)
	require.Equal(t, sent[0], sent[1], "the same message, with the same approval, again")
}
