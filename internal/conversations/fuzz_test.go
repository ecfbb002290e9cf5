package conversations_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// The fuzz targets of conversation message bodies, from both sides, sent
// through the HTTP API on a database of their own: whatever the body, the
// answer is never a 5xx, an error carries a code, and a refused request
// stores nothing. testdata/fuzz holds more seeds and every finding.

// messageSeeds are message bodies from the tests: valid ones of every
// member and hostile ones.
var messageSeeds = []string{
	`{"message": {"id": "m1", "author": {"type": "agent"}, "text": "Where is my order?"}}`,
	`{"message": {"id": "m1", "author": {"type": "human", "id": "a1", "name": "Alex", "image": "https://acme.example/a.png"}, "text": "Hello"}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "data": {"n": 9007199254740993, "list": [1, 2.50, -0]}, "context": {"locale": "en-US", "time_zone": "America/Los_Angeles", "user_available": true}}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "extensions": {"acme.example/gift-wrap": {"wrap": true}, "unknown.example/x": {}}}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "extensions": {"operations": {"approval": {"operation_id": "exc_1", "revision": "r1", "approver": "user"}}}}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "text": "a\u0000b"}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "data": {"a\u0000": 1}}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "data": {"n": 1e999999}}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "text": "Refund \u202e001$"}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "context": {"time_zone": "Local"}}}`,
	`{"message": {"id": "m1", "author": {"type": "agent"}, "context": {"time_zone": "../../etc/passwd"}}}`,
	`{"message": {"id": "m1", "author": {"type": 9}, "text": "x"}}`,
	`{"message": {"id": 1e400, "author": {"type": "agent"}, "text": "x"}}`,
	`{"message": "hi"}`,
	"{\"message\": {\"id\": \"m1\", \"author\": {\"type\": \"agent\"}, \"text\": \"a\xffb\"}}",
	`{"message": {"id": "m1", "author": {"type": "agent"}, "data": ` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`,
	`{"parent_id": "cnv_x", "user_requested_event_id": "evt_1", "message": {"id": "m1", "author": {"type": "agent"}, "text": "x"}}`,
	`{"status": "typing", "text": "x", "delta": "y", "author": {"type": "human", "name": "Alex"}, "scope": "orders:read", "reason": "r"}`,
	`[1, 2]`,
	``,
}

// eventCount counts the stored conversations and message events, which
// only requests add.
func eventCount(t testing.TB, a *agentSide) int {
	t.Helper()
	var n int
	if err := a.env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM conversation_events WHERE type = 'message') +
		(SELECT count(*) FROM conversations)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// FuzzAgentMessage feeds Personal Agent bodies to POST
// {endpoint} (start) and POST {endpoint}/{id}/messages (send).
func FuzzAgentMessage(f *testing.F) {
	for _, seed := range messageSeeds {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	a := newAgentSide(f)
	id := a.start(f, paMsg("m0", "hello"), paReq{})
	f.Fuzz(func(t *testing.T, body []byte, start bool) {
		path := "/" + id + "/messages"
		if start {
			path = ""
		}
		before := eventCount(t, a)
		resp := a.call(t, http.MethodPost, path, body, paReq{})
		if resp.Refused(t) {
			if after := eventCount(t, a); after != before {
				t.Fatalf("a refused %s stored %d events: %s", path, after-before, resp.Body)
			}
		}
	})
}

// companyRoutes are the Company API's POST routes of a conversation
// that read a body, but close, which would end the conversation the
// other bodies are sent to.
var companyRoutes = []string{"messages", "deltas", "status", "join", "handoff-unavailable", "user-requested",
	"authorization"}

// FuzzCompanyMessage feeds Company bodies to the Company API's POST
// routes of a conversation (route picks one).
func FuzzCompanyMessage(f *testing.F) {
	for _, seed := range messageSeeds {
		for i := range companyRoutes {
			f.Add([]byte(seed), uint8(i))
		}
	}
	a := newAgentSide(f)
	resp := a.env.Admin(f, http.MethodPost, "/admin/v1/companies/"+paSlug+"/api-keys", map[string]any{"name": "fuzz"})
	if resp.Status != http.StatusCreated {
		f.Fatalf("API key: %d %s", resp.Status, resp.Body)
	}
	key, _ := resp.JSON(f)["key"].(string)
	id := a.start(f, paMsg("m0", "hello"), paReq{})
	f.Fuzz(func(t *testing.T, body []byte, route uint8) {
		path := "/company/v1/conversations/" + id + "/" + companyRoutes[int(route)%len(companyRoutes)]
		before := eventCount(t, a)
		resp := a.env.Do(t, http.MethodPost, a.env.PublicURL(path), body, "Authorization", "Bearer "+key)
		if resp.Refused(t) {
			if after := eventCount(t, a); after != before {
				t.Fatalf("a refused %s stored %d events: %s", path, after-before, resp.Body)
			}
		}
	})
}
