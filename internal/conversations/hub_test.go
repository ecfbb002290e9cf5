package conversations_test

import (
	"context"
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
			_, events := w.Take()
			require.True(t, events, "a (re)connection may have missed events")
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
			deltas, events := stream.Take()
			require.False(t, events, "a delta is not an event")
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
	for _, id := range []string{"cnv_a", "cnv_b"} {
		_, err := pool.Exec(ctx, `SELECT pg_notify('poppy_conversation_events', $1)`, "1 "+id)
		require.NoError(t, err)
		select {
		case <-mine.C:
			_, events := mine.Take()
			require.True(t, events)
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
