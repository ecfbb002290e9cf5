package conversations

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseWait(t *testing.T) {
	t.Parallel()
	limit := 30 * time.Second
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"00", 0, true},
		{"7", 7 * time.Second, true},
		{"30", 30 * time.Second, true},
		// spec 8.5: a larger wait is held for the cap, not refused.
		{"31", limit, true},
		{"4294967296", limit, true},
		{"99999999999999999999999999", limit, true},
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"abc", 0, false},
		{"1.5", 0, false},
		{" 1", 0, false},
		{"1e3", 0, false},
	} {
		got, ok := parseWait(tc.in, limit)
		require.Equal(t, tc.ok, ok, "wait=%q", tc.in)
		require.Equal(t, tc.want, got, "wait=%q", tc.in)
	}
}

func TestParseEventID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"evt_1": 1, "evt_42": 42} {
		seq, ok := parseEventID(in)
		require.True(t, ok, in)
		require.Equal(t, want, seq)
	}
	for _, in := range []string{"", "evt_", "evt_0", "evt_01", "evt_-1", "evt_1a", "cnv_1", "evt_9999999999999999999"} {
		_, ok := parseEventID(in)
		require.False(t, ok, in)
	}
}

func decodeMessage(t *testing.T, raw string) *Message {
	t.Helper()
	var m Message
	require.NoError(t, json.Unmarshal([]byte(raw), &m))
	return &m
}

func TestCheckAgentMessage(t *testing.T) {
	t.Parallel()
	none := func(string) bool { return false }
	for _, raw := range []string{
		`{"id":"m1","author":{"type":"agent"}}`,
		`{"id":"m1","author":{"type":"agent"},"text":null}`,
		`{"id":"m1","author":{"type":"agent"},"data":null}`,
		`{"id":"m1","author":{"type":"robot"},"text":"hi"}`,
		`{"id":"m1","text":"hi"}`,
		`{"id":"","author":{"type":"agent"},"text":"hi"}`,
		`{"id":"m 1","author":{"type":"agent"},"text":"hi"}`,
		`{"id":"` + strings.Repeat("a", 257) + `","author":{"type":"agent"},"text":"hi"}`,
		`{"id":"m1","author":{"type":"agent"},"data":"a string"}`,
		`{"id":"m1","author":{"type":"agent"},"data":42}`,
		`{"id":"m1","author":{"type":"agent"},"context":{"time_zone":"Mars/Olympus"}}`,
		`{"id":"m1","author":{"type":"agent"},"context":{"time_zone":"Local"}}`,
		`{"id":"m1","author":{"type":"agent"},"context":{"time_zone":"../../etc/passwd"}}`,
		`{"id":"m1","author":{"type":"agent"},"context":{"locale":5}}`,
		`{"id":"m1","author":{"type":"agent"},"context":{"user_available":"yes"}}`,
		`{"id":"m1","author":{"type":"agent"},"context":{"user_available":null}}`,
		`{"id":"m1","author":{"type":"agent"},"extensions":{"example.com/x":"not an object"}}`,
	} {
		require.Error(t, checkAgentMessage(decodeMessage(t, raw), none), raw)
	}

	m := decodeMessage(t, `{"id":"m1","role":"company","author":{"type":"human","name":"Eve","id":"a1"},"text":"hi",
		"data":null,"context":{"user_available":false,"time_zone":"America/Los_Angeles","units":"metric"},
		"extensions":{"example.com/known":{"a":1},"example.com/unknown":{"b":2}}}`)
	require.NoError(t, checkAgentMessage(m, func(n string) bool { return n == "example.com/known" }))
	require.Empty(t, m.Role, "only Company messages have a role")
	require.Equal(t, Author{Type: "human"}, m.Author, "only Company messages have author id, name and image")
	require.Nil(t, m.Data)
	require.Equal(t, []string{"example.com/known"}, keys(m.Extensions))

	// Left with nothing once the unknown extension is ignored (spec 3.3),
	// the message breaks spec 8.4: refused, naming the extension.
	m = decodeMessage(t, `{"id":"m1","author":{"type":"agent"},"extensions":{"example.com/unknown":{"b":2}}}`)
	err := checkAgentMessage(m, none)
	require.ErrorContains(t, err, "example.com/unknown")
	require.ErrorContains(t, err, "spec 8.4")
	m = decodeMessage(t, `{"id":"m1","author":{"type":"agent"},"context":{},"extensions":{"example.com/unknown":{"b":2}}}`)
	require.NoError(t, checkAgentMessage(m, none), "context alone is content")
	require.Nil(t, m.Extensions)
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestContentHashIsCanonical(t *testing.T) {
	t.Parallel()
	a := decodeMessage(t, `{"id":"m1","author":{"type":"agent"},"data":{"a":1,"b":[1,2],"n":12345678901234567890}}`)
	b := decodeMessage(t, `{"author":{"type":"agent"},"data":{ "n": 12345678901234567890, "b":[1, 2],"a":1 },"id":"m1"}`)
	c := decodeMessage(t, `{"id":"m1","author":{"type":"agent"},"data":{"a":1,"b":[1,2],"n":12345678901234567891}}`)
	require.Equal(t, contentHash(a, "send", "x"), contentHash(b, "send", "x"))
	require.NotEqual(t, contentHash(a, "send", "x"), contentHash(c, "send", "x"), "numbers are not rounded")
	require.NotEqual(t, contentHash(a, "send", "x"), contentHash(a, "send", "y"))
}

// A message's canonical form, which its content hash hashes, is the text
// of its event's "message": send's one statement stores the event from it
// without encoding the message again.
func TestCanonicalMessageIsTheEvent(t *testing.T) {
	t.Parallel()
	m := decodeMessage(t, `{"id":"m1","author":{"type":"agent"},"text":"<b>&</b> é \u2028",
		"data":{"z":1,"a":[1.50,2e3],"n":12345678901234567890}}`)
	body, err := json.Marshal(messageEvent(m).Body)
	require.NoError(t, err)
	require.Equal(t, string(body), `{"message":`+string(canonicalMessage(m))+`}`)
}

func TestMessageEventKeepsNumbers(t *testing.T) {
	t.Parallel()
	m := decodeMessage(t, `{"id":"m1","author":{"type":"agent"},"data":{"n":12345678901234567890,"f":0.1}}`)
	raw, err := json.Marshal(Event{Seq: 3, Type: EventMessage, Body: messageEvent(m).Body, CreatedAt: time.Unix(0, 0)})
	require.NoError(t, err)
	require.Contains(t, string(raw), `"n":12345678901234567890`)
	require.Contains(t, string(raw), `"f":0.1`)
	require.Contains(t, string(raw), `"id":"evt_3"`)
}

func TestDeltaPayloadFits(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		strings.Repeat("a", 20000),
		// Each < becomes \u003c: six bytes of payload per byte of text.
		strings.Repeat("<", 6000),
		strings.Repeat("é", 5000),
		strings.Repeat("\x01", 3000),
	} {
		raw, err := deltaPayload(Delta{CompanyID: 1, ConversationID: "cnv_1", MessageID: "msg_1", Text: text})
		require.NoError(t, err)
		require.LessOrEqual(t, len(raw), maxPayload)
		var d Delta
		require.NoError(t, json.Unmarshal(raw, &d))
		require.NotEmpty(t, d.Text)
		require.True(t, strings.HasPrefix(text, d.Text))
	}
	raw, err := deltaPayload(Delta{CompanyID: 1, ConversationID: "cnv_1", MessageID: "msg_1", Text: "short"})
	require.NoError(t, err)
	require.Contains(t, string(raw), `"text":"short"`)
}

func TestOwns(t *testing.T) {
	t.Parallel()
	c := &Conversation{ClientID: "a", UserID: "u"}
	bound := &Conversation{ClientID: "a", UserID: "u", AccountID: 7}
	for _, tc := range []struct {
		o    Owner
		c    *Conversation
		want error
	}{
		{Owner{ClientID: "a", UserID: "u", AccountID: 0}, c, nil},
		{Owner{ClientID: "a", UserID: "u", AccountID: 7}, c, nil},
		{Owner{ClientID: "a", UserID: "u", AccountID: 7}, bound, nil},
		{Owner{ClientID: "a", UserID: "u", AccountID: 0}, bound, errSignInNeeded},
		{Owner{ClientID: "a", UserID: "u", AccountID: 8}, bound, notFound()},
		{Owner{ClientID: "b", UserID: "u", AccountID: 0}, c, notFound()},
		{Owner{ClientID: "a", UserID: "v", AccountID: 0}, c, notFound()},
		{Owner{ClientID: "a", UserID: "v", AccountID: 7}, bound, notFound()},
		{Owner{ClientID: "a", UserID: "v", AccountID: 0}, bound, notFound()},
		{Owner{ClientID: "a", UserID: "u", AccountID: 0}, nil, notFound()},
	} {
		require.Equal(t, tc.want, tc.o.owns(tc.c), "%+v", tc.o)
	}
}
