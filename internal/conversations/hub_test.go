package conversations_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// listening waits until the hub has woken each waiter once for its
// listener's connection, which may have missed events.
func listening(t *testing.T, waiters ...*conversations.Waiter) {
	t.Helper()
	for _, w := range waiters {
		select {
		case <-w.C:
			_, news := w.Take()
			require.True(t, news.Came, "a (re)connection may have missed events")
			_, carried := news.After(0)
			require.False(t, carried, "a (re)connection carries no events")
		case <-time.After(10 * time.Second):
			t.Fatal("the hub did not start listening")
		}
	}
}

// TestHubDeltasOnlyToStreams: a stream's waiter gets text deltas; a
// long-poll's is not woken by them.
func TestHubDeltasOnlyToStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	listener := notify.New(pool, nil)
	hub := conversations.NewHub(listener)
	poll, stream := hub.Watch(1, "cnv_a"), hub.WatchDeltas(1, "cnv_a")
	defer poll.Stop()
	defer stream.Stop()
	stop := listener.Start(ctx)
	defer stop()
	listening(t, poll, stream)
	for _, text := range []string{"one", "two"} {
		require.NoError(t, conversations.PublishDelta(ctx, pool,
			conversations.Delta{CompanyID: 1, ConversationID: "cnv_a", MessageID: "msg_1", Text: text}))
		select {
		case <-stream.C:
			deltas, news := stream.Take()
			require.False(t, news.Came, "a delta is not an event")
			require.Len(t, deltas, 1)
			require.Equal(t, text, deltas[0].Text)
		case <-time.After(10 * time.Second):
			t.Fatal("the stream got no delta")
		}
	}
	select {
	case <-poll.C:
		t.Fatal("a delta woke the long-poll")
	default:
	}
}

// An event notification carries its transaction's events as a read reads
// them, numbers and text as stored, so a woken reader answers with them;
// events too large to carry, or a gap, make the reader read them.
func TestHubNotificationsCarryEvents(t *testing.T) {
	a := newAgentSide(t)
	ctx := context.Background()
	id := a.start(t, paMsg("m0", "Hello"), paReq{})
	store := conversations.NewStore(a.env.Pool, conversations.StoreOptions{})
	seen, _, err := store.Events(ctx, a.companyID, id, 0, 100)
	require.NoError(t, err)
	after := seen[len(seen)-1].Seq

	// take waits for news of events; a wake-up whose news an earlier Take
	// took has none.
	take := func(w *conversations.Waiter) conversations.News {
		t.Helper()
		for {
			select {
			case <-w.C:
				if _, news := w.Take(); news.Came {
					return news
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no wake-up")
			}
		}
	}
	w := a.env.Hub.Watch(a.companyID, id)
	defer w.Stop()

	// Two transactions before the reader takes: a Company message with
	// numbers JSON would round, then a message with a state change.
	odd := companyMessage("c1", "Prix: 12 €, \u00e9t\u00e9 \"quoted\" \\ ok")
	odd.Body["data"] = map[string]any{"big": json.Number("123456789012345678901234567890"), "exp": json.Number("1.50e2"), "z": nil}
	a.companyEvents(t, id, "", "", odd)
	a.companyEvents(t, id, conversations.StatusIdle, conversations.ResponderHuman, companyMessage("c2", "A person is here"))
	// Read as a stream does: each wake-up's events after the last written.
	var carried []conversations.Event
	var news conversations.News
	for last := after; len(carried) < 3; {
		news = take(w)
		events, ok := news.After(last)
		require.True(t, ok, "the notifications carried every event")
		require.NotEmpty(t, events)
		carried = append(carried, events...)
		last = events[len(events)-1].Seq
	}
	read, _, err := store.Events(ctx, a.companyID, id, after, 100)
	require.NoError(t, err)
	require.Len(t, read, 3, "two messages and a state event")
	want, err := json.Marshal(read)
	require.NoError(t, err)
	got, err := json.Marshal(carried)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
	require.Equal(t, string(want), string(got), "byte for byte as a read writes them")
	for i := range read {
		require.Equal(t, read[i].Seq, carried[i].Seq)
		require.True(t, read[i].CreatedAt.Equal(carried[i].CreatedAt))
	}
	first := news.Carried()[0].Seq
	_, ok := news.After(first - 2)
	require.False(t, ok, "an event before the carried ones is read")
	rest, ok := news.After(read[2].Seq)
	require.True(t, ok)
	require.Empty(t, rest, "nothing new after the last carried event")

	// Too large to carry: the reader reads.
	a.companyEvents(t, id, "", "", companyMessage("c3", strings.Repeat("long ", 2000)))
	news = take(w)
	_, ok = news.After(read[2].Seq)
	require.False(t, ok, "an event too large for a notification is read")
}

// TestHubCompanyWaiter: a Company's waiter is woken by an event of any
// of its conversations, not by another Company's.
func TestHubCompanyWaiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	listener := notify.New(pool, nil)
	hub := conversations.NewHub(listener)
	mine, theirs := hub.WatchCompany(1), hub.WatchCompany(2)
	defer mine.Stop()
	defer theirs.Stop()
	stop := listener.Start(ctx)
	defer stop()
	listening(t, mine, theirs)
	// The second carries its event, as a message's notification does.
	for _, id := range []string{"cnv_a", `cnv_b [{"seq": 1, "type": "message", "body": {}, "created_at": "2026-12-06T01:00:00+00:00"}]`} {
		_, err := pool.Exec(ctx, `SELECT pg_notify('poppy_conversation_events', $1)`, "1 "+id)
		require.NoError(t, err)
		select {
		case <-mine.C:
			_, news := mine.Take()
			require.True(t, news.Came)
			_, carried := news.After(0)
			require.False(t, carried, "a Company's waiter reads")
		case <-time.After(10 * time.Second):
			t.Fatal("the Company's waiter was not woken")
		}
	}
	require.NoError(t, conversations.PublishDelta(ctx, pool,
		conversations.Delta{CompanyID: 1, ConversationID: "cnv_a", MessageID: "msg_1", Text: "one"}))
	// A notification after the delta, so the delta had its chance.
	_, err := pool.Exec(ctx, `SELECT pg_notify('poppy_conversation_events', '2 cnv_c')`)
	require.NoError(t, err)
	select {
	case <-theirs.C:
	case <-time.After(10 * time.Second):
		t.Fatal("the other Company's waiter was not woken")
	}
	select {
	case <-mine.C:
		t.Fatal("another Company's event or a delta woke the Company's waiter")
	default:
	}
}
