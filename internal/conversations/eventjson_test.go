package conversations

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/notify"
)

// mapEncoded is an event as encoding/json writes the map of its body's
// members with id, type and created_at put in: what a read has always
// answered with (spec 8.5), which appendEvent must write byte for byte.
func mapEncoded(e Event) ([]byte, error) {
	m := make(map[string]any, len(e.Body)+3)
	for k, v := range e.Body {
		m[k] = v
	}
	m["id"] = eventID(e.Seq)
	m["type"] = e.Type
	m["created_at"] = e.CreatedAt.UTC().Format(time.RFC3339Nano)
	return json.Marshal(m)
}

// TestEventJSONAsEncodingJSON: an event written without building a map
// is byte for byte what encoding/json writes for the map: sorted keys,
// HTML and control characters escaped, invalid UTF-8 replaced, numbers as
// decoded, members named id, type or created_at overridden, and values of
// other Go types as encoding/json writes them.
func TestEventJSONAsEncodingJSON(t *testing.T) {
	t.Parallel()
	strs := []string{"", "plain", `quo"te`, `back\slash`, "<b>&amp;</b>", "tab\tnl\nbs\bff\fcr\r\x01\x1f",
		"été €", "line\u2028para\u2029", "bad \xff utf8", "emoji 😀", "del \x7f"}
	nums := []json.Number{"0", "-1", "12", "1.50e2", "123456789012345678901234567890", "-0.000001E-10"}
	rng := rand.New(rand.NewPCG(1, 2))
	var value func(depth int) any
	value = func(depth int) any {
		switch k := rng.IntN(8); {
		case k == 0:
			return nil
		case k == 1:
			return rng.IntN(2) == 0
		case k == 2:
			return nums[rng.IntN(len(nums))]
		case k == 3 && depth < 3:
			m := map[string]any{}
			for range rng.IntN(5) {
				m[strs[rng.IntN(len(strs))]+strs[rng.IntN(len(strs))]] = value(depth + 1)
			}
			return m
		case k == 4 && depth < 3:
			a := make([]any, rng.IntN(4))
			for i := range a {
				a[i] = value(depth + 1)
			}
			return a
		case k == 5:
			// Values a body built in Go may hold.
			return []any{42, 1.5, []string{"a<"}, struct {
				A string `json:"a"`
			}{"x&y"}, time.Unix(1_800_000_000, 5).UTC(), []any(nil), map[string]any(nil)}[rng.IntN(7)]
		default:
			return strs[rng.IntN(len(strs))]
		}
	}
	for i := range 2000 {
		body := map[string]any{}
		for range rng.IntN(6) {
			body[[]string{"text", "message", "id", "type", "created_at", "<k>", "é", "a", "b\n"}[rng.IntN(9)]] = value(0)
		}
		e := Event{Seq: int64(i), Type: strs[rng.IntN(len(strs))], Body: body,
			CreatedAt: time.Unix(1_800_000_000+int64(i), int64(rng.IntN(1e9))).In(time.FixedZone("x", 3600))}
		want, err := mapEncoded(e)
		require.NoError(t, err)
		got, err := json.Marshal(e)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%#v", body)
	}
}

// TestCarriedEventsEncodedOnce: the events a notification carries are
// written as JSON once, when the hub decodes them, and every reader of
// the conversation writes those bytes: a stream's write of them encodes
// nothing again.
func TestCarriedEventsEncodedOnce(t *testing.T) {
	hub := NewHub(notify.New(nil, nil))
	a, b := hub.WatchDeltas(1, "cnv_a"), hub.Watch(1, "cnv_a")
	defer a.Stop()
	defer b.Stop()
	hub.wake(`1 cnv_a [{"seq": 3, "body": {"text": "Where <is> my order?", "author": {"type": "agent"}, "message_id": "m3"},` +
		` "type": "message", "created_at": "2026-12-06T03:16:03.668551+00:00"}]`)
	_, na := a.Take()
	_, nb := b.Take()
	ea, ok := na.After(2)
	require.True(t, ok)
	eb, ok := nb.After(2)
	require.True(t, ok)
	require.Len(t, ea, 1)
	require.NotEmpty(t, ea[0].encoded, "encoded when decoded")
	require.Same(t, &ea[0].encoded[0], &eb[0].encoded[0], "one encoding for both readers")
	want, err := mapEncoded(ea[0])
	require.NoError(t, err)
	require.Equal(t, string(want), string(ea[0].encoded))

	rec := httptest.NewRecorder()
	rec.Body.Grow(1 << 20)
	s := &eventStream{w: rec, rc: http.NewResponseController(rec), watch: a}
	allocs := testing.AllocsPerRun(100, func() {
		s.after = 2
		require.True(t, s.write(ea))
	})
	require.LessOrEqual(t, allocs, 2.0, "the stream encoded the event again")
	require.True(t, strings.HasPrefix(rec.Body.String(), "id: evt_3\ndata: "+string(want)+"\n\n"), "%q", rec.Body.String())
}

// BenchmarkEventJSON writes a message event as JSON: as an event not
// carried by a notification is written (event), and as it was before
// 2026-12-06, through a map (map), in one run.
func BenchmarkEventJSON(b *testing.B) {
	events, err := carriedEvents(`[{"seq": 12, "body": {"message": {"id": "m12_abcdef", "text": "Where is my order?",` +
		` "author": {"type": "agent"}}}, "type": "message", "created_at": "2026-12-06T03:16:03.668551+00:00"}]`)
	require.NoError(b, err)
	e := events[0]
	e.encoded = nil
	b.Run("event", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mapEncoded(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestReadJSONAsEncodingJSON: a read is answered byte for byte as
// httpx.WriteJSON answered it, events carried or read, strings escaped.
func TestReadJSONAsEncodingJSON(t *testing.T) {
	t.Parallel()
	carried, err := carriedEvents(`[{"seq": 3, "body": {"message": {"id": "m3", "text": "a <b> & \u2028 é"}}, "type": "message",` +
		` "created_at": "2026-12-06T03:16:03.668551+00:00"}, {"seq": 4, "body": {"status": "idle", "responder": "human"},` +
		` "type": "state", "created_at": "2026-12-06T03:16:03.7+00:00"}]`)
	require.NoError(t, err)
	read := carried[1]
	read.encoded = nil
	for _, rd := range []*Read{
		{ConversationID: "cnv_a", Events: carried, Cursor: "evt_4", Status: "idle", Responder: "human"},
		{ConversationID: "cnv_<a>", Events: []Event{read}, Cursor: "evt_4", HasMore: true, Status: "open", Responder: "agent"},
		{ConversationID: "cnv_a", Events: []Event{}, Cursor: "", Status: "closed", Responder: "agent"},
		{ConversationID: "cnv_a", Status: "open", Responder: "agent"},
	} {
		want := httptest.NewRecorder()
		httpx.WriteJSON(want, http.StatusOK, rd)
		got := httptest.NewRecorder()
		writeReadJSON(got, http.StatusOK, rd)
		require.Equal(t, want.Body.String(), got.Body.String())
		require.Equal(t, want.Header(), got.Header())
		require.Equal(t, want.Code, got.Code)
	}
}

// BenchmarkReadJSON answers a long-poll woken with a carried message: as
// it is answered (read) and through httpx.WriteJSON (encoding/json), in
// one run.
func BenchmarkReadJSON(b *testing.B) {
	carried, err := carriedEvents(`[{"seq": 3, "body": {"message": {"id": "m3", "text": "Where is my order?", "author": {"type": "agent"}}},` +
		` "type": "message", "created_at": "2026-12-06T03:16:03.668551+00:00"}]`)
	require.NoError(b, err)
	rd := readOf(&Conversation{ID: "cnv_a", Status: "open", Responder: "agent"}, readParams{}, carried, false)
	for name, write := range map[string]func(http.ResponseWriter, int, any){
		"read":          func(w http.ResponseWriter, status int, _ any) { writeReadJSON(w, status, rd) },
		"encoding-json": httpx.WriteJSON,
	} {
		b.Run(name, func(b *testing.B) {
			rec := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				rec.Body.Reset()
				write(rec, http.StatusOK, rd)
			}
		})
	}
}
