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
	for _, w := range []*conversations.Waiter{poll, stream} {
		select {
		case <-w.C:
			_, events := w.Take()
			require.True(t, events, "a (re)connection may have missed events")
		case <-time.After(10 * time.Second):
			t.Fatal("the hub did not start listening")
		}
	}
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
