package conversations_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Hostile input on both sides of conversations: every bad body, ID,
// cursor or header is a 4xx with invalid_request or not_found, never a
// 500.

func TestHostileAgentInput(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m0", "hello"), paReq{})
	long := strings.Repeat("a", 257)
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	msg := func(inner string) string { return `{"message":` + inner + `}` }
	bodies := map[string]string{
		"text number":        msg(`{"id":"m1","author":{"type":"agent"},"text":12}`),
		"text array":         msg(`{"id":"m1","author":{"type":"agent"},"text":["a"]}`),
		"text object":        msg(`{"id":"m1","author":{"type":"agent"},"text":{"a":1}}`),
		"id number":          msg(`{"id":1e400,"author":{"type":"agent"},"text":"x"}`),
		"id array":           msg(`{"id":["m1"],"author":{"type":"agent"},"text":"x"}`),
		"id 257":             msg(`{"id":"` + long + `","author":{"type":"agent"},"text":"x"}`),
		"author string":      msg(`{"id":"m1","author":"agent","text":"x"}`),
		"author type number": msg(`{"id":"m1","author":{"type":9},"text":"x"}`),
		"message string":     msg(`"hi"`),
		"message array":      msg(`[]`),
		"body array":         `[1,2]`,
		"body number":        `99999999999999999999999999999`,
		"context string":     msg(`{"id":"m1","author":{"type":"agent"},"context":"x"}`),
		"context locale num": msg(`{"id":"m1","author":{"type":"agent"},"context":{"locale":1}}`),
		"extensions array":   msg(`{"id":"m1","author":{"type":"agent"},"extensions":[1]}`),
		"data string":        msg(`{"id":"m1","author":{"type":"agent"},"data":"x"}`),
		"data deep":          msg(`{"id":"m1","author":{"type":"agent"},"data":` + deep + `}`),
		"text NUL":           msg(`{"id":"m1","author":{"type":"agent"},"text":"a\u0000b"}`),
		"data NUL":           msg(`{"id":"m1","author":{"type":"agent"},"data":{"k":"a\u0000b"}}`),
		"data key NUL":       msg(`{"id":"m1","author":{"type":"agent"},"data":{"a\u0000":1}}`),
		"context NUL":        msg(`{"id":"m1","author":{"type":"agent"},"context":{"note":"\u0000"}}`),
		"context locale NUL": msg(`{"id":"m1","author":{"type":"agent"},"context":{"locale":"en\u0000"}}`),
		"data huge number":   msg(`{"id":"m1","author":{"type":"agent"},"data":{"n":1e999999}}`),
		"data tiny number":   msg(`{"id":"m1","author":{"type":"agent"},"data":[-1e-999999]}`),
	}
	i := 0
	for name, body := range bodies {
		// Each case its own message ID, so that no case is a retry of
		// another.
		i++
		body = strings.Replace(body, `"m1"`, fmt.Sprintf(`"h%d"`, i), 1)
		t.Run("start "+name, func(t *testing.T) {
			t.Parallel()
			requireError(t, a.call(t, http.MethodPost, "", body, paReq{}), http.StatusBadRequest, "invalid_request")
		})
		t.Run("send "+name, func(t *testing.T) {
			t.Parallel()
			requireError(t, a.call(t, http.MethodPost, "/"+id+"/messages", body, paReq{}), http.StatusBadRequest, "invalid_request")
		})
	}
	// Invalid UTF-8 in data is replaced as in text, not refused.
	for j, body := range []string{
		msg(`{"id":"u1","author":{"type":"agent"},"data":{"k":"a` + "\xff\xfe" + `"}}`),
		msg(`{"id":"u2","author":{"type":"agent"},"data":{"` + "\xc3" + `":1}}`),
	} {
		resp := a.call(t, http.MethodPost, "/"+id+"/messages", body, paReq{})
		require.Less(t, resp.Status, 500, "%d: %s", j, resp.Body)
	}
	// Invalid UTF-8 in text is replaced by the decoder, not refused.
	resp := a.call(t, http.MethodPost, "/"+id+"/messages",
		msg(`{"id":"m2","author":{"type":"agent"},"text":"a`+"\xff"+`b"}`), paReq{})
	require.Less(t, resp.Status, 500, "%s", resp.Body)

	reads := map[string]paReq{
		"cursor huge":         {Query: "cursor=evt_99999999999999999999"},
		"cursor int64 max":    {Query: "cursor=evt_9223372036854775807"},
		"cursor NUL":          {Query: "cursor=evt_1%00"},
		"cursor bad UTF-8":    {Query: "cursor=%ff%fe"},
		"cursor negative":     {Query: "cursor=evt_-1"},
		"wait negative":       {Query: "wait=-1"},
		"wait NUL":            {Query: "wait=1%00"},
		"Last-Event-ID junk":  {Header: []string{"Last-Event-ID", "evt_" + long}},
		"Last-Event-ID huge":  {Header: []string{"Last-Event-ID", "evt_99999999999999999999"}},
		"Last-Event-ID UTF-8": {Header: []string{"Last-Event-ID", "\xff\xfe"}},
	}
	for name, o := range reads {
		t.Run("read "+name, func(t *testing.T) {
			t.Parallel()
			requireError(t, a.call(t, http.MethodGet, "/"+id+"/events", nil, o), http.StatusBadRequest, "invalid_request")
		})
	}
	t.Run("read wait huge", func(t *testing.T) {
		t.Parallel()
		// Held for the cap, which a test cannot wait for; a cursor beyond
		// the last event fails first.
		resp := a.call(t, http.MethodGet, "/"+id+"/events", nil, paReq{Query: "wait=99999999999&cursor=evt_99999"})
		requireError(t, resp, http.StatusBadRequest, "invalid_request")
	})
	for name, path := range map[string]string{
		"id 257":     "/" + long + "/events",
		"id NUL":     "/cnv_a%00b/events",
		"id UTF-8":   "/%ff%fe/events",
		"id encoded": "/%2e%2e/events",
	} {
		t.Run("read "+name, func(t *testing.T) {
			t.Parallel()
			resp := a.call(t, http.MethodGet, path, nil, paReq{})
			require.Contains(t, []int{400, 404}, resp.Status, "%s", resp.Body)
		})
		t.Run("handoff "+name, func(t *testing.T) {
			t.Parallel()
			resp := a.call(t, http.MethodPost, strings.TrimSuffix(path, "/events")+"/handoff", nil, paReq{})
			require.Contains(t, []int{400, 404}, resp.Status, "%s", resp.Body)
		})
	}
}

func TestHostileCompanyInput(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "m0", "hello")
	long := strings.Repeat("a", 257)
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	cases := []struct{ name, path, body string }{
		{"message text number", "/messages", `{"message":{"id":"c1","author":{"type":"agent"},"text":1}}`},
		{"message id array", "/messages", `{"message":{"id":["c1"],"author":{"type":"agent"},"text":"x"}}`},
		{"message id 257", "/messages", `{"message":{"id":"` + long + `","author":{"type":"agent"},"text":"x"}}`},
		{"message text NUL", "/messages", `{"message":{"id":"c1","author":{"type":"agent"},"text":"\u0000"}}`},
		{"message author name NUL", "/messages", `{"message":{"id":"c1","author":{"type":"human","name":"a\u0000"},"text":"x"}}`},
		{"message data NUL", "/messages", `{"message":{"id":"c1","author":{"type":"agent"},"data":{"a":"\u0000"}}}`},
		{"message data deep", "/messages", `{"message":{"id":"c1","author":{"type":"agent"},"data":` + deep + `}}`},
		{"message huge number", "/messages", `{"message":{"id":"c1","author":{"type":"agent"},"data":{"n":1e999999}}}`},
		{"body array", "/messages", `[]`},
		{"delta number", "/deltas", `{"message_id":1,"text":2}`},
		{"delta NUL", "/deltas", `{"message_id":"c1","text":"\u0000"}`},
		{"delta id NUL", "/deltas", `{"message_id":"c\u0000","text":"x"}`},
		{"status number", "/status", `{"status":1}`},
		{"status NUL", "/status", `{"status":"open\u0000"}`},
		{"join array", "/join", `{"author":[1]}`},
		{"join name NUL", "/join", `{"author":{"type":"human","name":"\u0000"}}`},
		{"authorization NUL", "/authorization", `{"scope":"a\u0000"}`},
		{"authorization array", "/authorization", `{"scope":[1]}`},
		{"close reason NUL", "/close", `{"reason":"\u0000"}`},
		{"close array", "/close", `[1]`},
		{"user-requested NUL", "/user-requested", `{"reason":"\u0000"}`},
		{"handoff-unavailable NUL", "/handoff-unavailable", `{"message":"\u0000"}`},
	}
	for i, c := range cases {
		c.body = strings.Replace(c.body, `"c1"`, fmt.Sprintf(`"k%d"`, i), 1)
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			resp := cs.env.Do(t, http.MethodPost, cs.env.PublicURL("/company/v1/conversations/"+id+c.path),
				c.body, "Authorization", "Bearer "+cs.key, "Content-Type", "application/json")
			require.GreaterOrEqual(t, resp.Status, 400, "%s", resp.Body)
			require.Less(t, resp.Status, 500, "%s", resp.Body)
		})
	}
	gets := []string{
		"/" + long,
		"/cnv_a%00b",
		"/%ff",
		"/" + id + "/events?cursor=evt_99999999999999999999",
		"/" + id + "/events?cursor=%00",
		"/" + id + "/events?wait=99999999999&cursor=evt_9999",
		"?cursor=%00",
		"?cursor=99999999999999999999",
		"?limit=99999999999999999999",
		"?limit=-1",
		"?status=%00",
		"?status=%ff",
		"?updated_after=%00",
	}
	for _, p := range gets {
		t.Run("get "+p, func(t *testing.T) {
			t.Parallel()
			resp := cs.env.Do(t, http.MethodGet, cs.env.PublicURL("/company/v1/conversations"+p), nil,
				"Authorization", "Bearer "+cs.key)
			require.Less(t, resp.Status, 500, "%s", resp.Body)
		})
	}
}
