package crosstenant_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// notFound reports whether err is the conversation_not_found refusal.
func notFound(err error) bool {
	var he *httpx.Error
	return errors.As(err, &he) && he.Code == httpx.CodeConversationNotFound
}

func TestConversations(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := conversations.NewStore(w.pool, conversations.StoreOptions{})
	ctx, a, b := w.ctx, w.a.ID, w.b.ID
	owner := conversations.Owner{ClientID: "https://agent.test/client", UserID: "usr_1"}
	text := func(s string) *string { return &s }
	message := func(id string) *conversations.Message {
		return &conversations.Message{ID: id, Author: conversations.Author{Type: conversations.ResponderHuman},
			Text: text("where is my order?")}
	}
	conv, err := store.Start(ctx, a, owner, conversations.StartRequest{Message: message("m1")}, conversations.Policy{})
	require.NoError(t, err)
	id := conv.ID
	eventsA, _, err := store.Events(ctx, a, id, 0, 100)
	require.NoError(t, err)
	require.NotEmpty(t, eventsA)

	// keptA checks, as A, that the conversation has A's events only and
	// its status.
	keptA := func(t *testing.T) {
		t.Helper()
		got, err := store.Get(ctx, a, id)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, conv.Status, got.Status)
		require.Equal(t, conv.Responder, got.Responder)
		require.Equal(t, conv.LastSeq, got.LastSeq)
		events, _, err := store.Events(ctx, a, id, 0, 100)
		require.NoError(t, err)
		require.Len(t, events, len(eventsA))
		view, err := store.CompanyGet(ctx, a, id)
		require.NoError(t, err)
		require.Equal(t, id, view.ID)
	}

	for _, c := range []struct {
		method string
		call   func() error
	}{
		{"Send", func() error {
			_, err := store.Send(ctx, b, owner, id, message("m2"), conversations.Policy{})
			return err
		}},
		{"Handoff", func() error { _, err := store.Handoff(ctx, b, owner, id); return err }},
		{"Close", func() error { _, err := store.Close(ctx, b, owner, id); return err }},
		{"Start/parent", func() error {
			_, err := store.Start(ctx, b, owner, conversations.StartRequest{ParentID: id, Message: message("m3")},
				conversations.Policy{})
			return err
		}},
		{"CompanyPost", func() error {
			_, err := store.CompanyPost(ctx, w.b, id, &conversations.CompanyMessage{
				Author: conversations.Author{Type: conversations.ResponderAgent}, Text: text("it left")}, "")
			return err
		}},
		{"CompanyStatus", func() error {
			_, err := store.CompanyStatus(ctx, b, id, conversations.StatusQueued)
			return err
		}},
		{"CompanyJoin", func() error {
			_, err := store.CompanyJoin(ctx, b, id, &conversations.Author{Type: conversations.ResponderHuman, Name: "Bea"},
				text("hello"))
			return err
		}},
		{"CompanyHandoffUnavailable", func() error {
			_, err := store.CompanyHandoffUnavailable(ctx, w.b, id, "nobody is here")
			return err
		}},
		{"CompanyUserRequested", func() error {
			_, err := store.CompanyUserRequested(ctx, b, id, "to choose a size")
			return err
		}},
		{"CompanyAuthorization", func() error {
			_, err := store.CompanyAuthorization(ctx, w.b, id, "orders")
			return err
		}},
		{"CompanyHandBack", func() error { _, err := store.CompanyHandBack(ctx, b, id); return err }},
		{"CompanyClose", func() error { _, err := store.CompanyClose(ctx, b, id); return err }},
		{"CompanyDelta", func() error { return store.CompanyDelta(ctx, b, id, "msg_1", "it le") }},
	} {
		t.Run("conversations.Store/"+c.method, func(t *testing.T) {
			err := c.call()
			require.True(t, notFound(err), "want conversation_not_found, got %v", err)
			keptA(t)
		})
	}

	t.Run("conversations.Store/Get", func(t *testing.T) {
		got, err := store.Get(ctx, b, id)
		require.NoError(t, err)
		require.Nil(t, got)
		keptA(t)
	})
	t.Run("conversations.Store/CompanyGet", func(t *testing.T) {
		got, err := store.CompanyGet(ctx, b, id)
		require.NoError(t, err)
		require.Nil(t, got)
		keptA(t)
	})
	t.Run("conversations.Store/Events", func(t *testing.T) {
		events, more, err := store.Events(ctx, b, id, 0, 100)
		require.NoError(t, err)
		require.Empty(t, events)
		require.False(t, more)
		keptA(t)
	})
	t.Run("conversations.Store/CompanyList", func(t *testing.T) {
		list, err := store.CompanyList(ctx, b, conversations.ListFilter{Limit: 100})
		require.NoError(t, err)
		require.Empty(t, list)
		// The console's search: A's Personal Agent and day, as B.
		list, err = store.CompanyList(ctx, b, conversations.ListFilter{Limit: 100, ClientID: owner.ClientID,
			From: conv.CreatedAt.Add(-time.Hour), To: conv.CreatedAt.Add(time.Hour)})
		require.NoError(t, err)
		require.Empty(t, list)
		keptA(t)
	})
	t.Run("conversations.Store/Inbox", func(t *testing.T) {
		// A conversation of A's waiting for a person is not in B's inbox.
		waiting, err := store.Start(ctx, a, owner, conversations.StartRequest{Message: message("m-inbox")}, conversations.Policy{})
		require.NoError(t, err)
		_, err = store.Handoff(ctx, a, owner, waiting.ID)
		require.NoError(t, err)
		inbox, more, err := store.Inbox(ctx, b, conversations.MaxInbox)
		require.NoError(t, err)
		require.Empty(t, inbox)
		require.False(t, more)
		inbox, _, err = store.Inbox(ctx, a, conversations.MaxInbox)
		require.NoError(t, err)
		require.Len(t, inbox, 1)
		keptA(t)
	})
	t.Run("conversations.Store/Start", func(t *testing.T) {
		// The same Personal Agent's message ID at B starts B's own
		// conversation, not a retry of A's.
		got, err := store.Start(ctx, b, owner, conversations.StartRequest{Message: message("m1")}, conversations.Policy{})
		require.NoError(t, err)
		require.NotEqual(t, id, got.ID)
		keptA(t)
	})
	t.Run("conversations.Delivery/RotateSecret", func(t *testing.T) {
		d := conversations.NewDelivery(conversations.DeliveryOptions{Pool: w.pool, Sealer: testdb.Sealer(w.pool)})
		_, _, err := d.RotateSecret(ctx, a)
		require.NoError(t, err)
		secretA := w.webhookSecret(t, a)
		_, _, err = d.RotateSecret(ctx, b)
		require.NoError(t, err)
		require.Equal(t, secretA, w.webhookSecret(t, a))
		require.NotEqual(t, secretA, w.webhookSecret(t, b))
		keptA(t)
	})
	// Readers wait on a hub keyed by Company and conversation: what
	// happens at B under A's conversation ID reaches no reader of A's.
	t.Run("conversations.Hub/Watch", func(t *testing.T) {
		listener := notify.New(w.pool, nil)
		hub := conversations.NewHub(listener)
		readerA, readerB := hub.WatchDeltas(a, id), hub.WatchDeltas(b, id)
		defer readerA.Stop()
		defer readerB.Stop()
		stop := listener.Start(ctx)
		defer stop()
		// Each reader is woken once when the hub starts listening.
		for _, r := range []*conversations.Waiter{readerA, readerB} {
			select {
			case <-r.C:
			case <-time.After(10 * time.Second):
				t.Fatal("the hub did not start listening")
			}
		}
		require.NoError(t, conversations.PublishDelta(ctx, w.pool,
			conversations.Delta{CompanyID: b, ConversationID: id, MessageID: "msg_b", Text: "B's"}))
		select {
		case <-readerB.C:
			deltas, _ := readerB.Take()
			require.Len(t, deltas, 1)
			require.Equal(t, "B's", deltas[0].Text)
		case <-time.After(10 * time.Second):
			t.Fatal("B's reader got no delta")
		}
		deltas, _ := readerA.Take()
		require.Empty(t, deltas, "B's delta reached A's reader")
		require.NoError(t, conversations.PublishDelta(ctx, w.pool,
			conversations.Delta{CompanyID: a, ConversationID: id, MessageID: "msg_a", Text: "A's"}))
		select {
		case <-readerA.C:
			// The hub handles notifications in order: B's delta, had it
			// reached A's reader, would come first.
			deltas, _ := readerA.Take()
			require.Len(t, deltas, 1)
			require.Equal(t, "A's", deltas[0].Text, "B's delta reached A's reader")
		case <-time.After(10 * time.Second):
			t.Fatal("A's reader got no delta")
		}
		deltas, _ = readerB.Take()
		require.Empty(t, deltas, "A's delta reached B's reader")
		keptA(t)
	})
	// The console's live inbox waits for any event of its Company's
	// conversations: an event of A's wakes no inbox of B's.
	t.Run("conversations.Hub/WatchCompany", func(t *testing.T) {
		listener := notify.New(w.pool, nil)
		hub := conversations.NewHub(listener)
		inboxA, inboxB := hub.WatchCompany(a), hub.WatchCompany(b)
		defer inboxA.Stop()
		defer inboxB.Stop()
		stop := listener.Start(ctx)
		defer stop()
		for _, r := range []*conversations.Waiter{inboxA, inboxB} {
			select {
			case <-r.C:
				r.Take()
			case <-time.After(10 * time.Second):
				t.Fatal("the hub did not start listening")
			}
		}
		_, err := store.CompanyUserRequested(ctx, a, id, "A's event")
		require.NoError(t, err)
		select {
		case <-inboxA.C:
		case <-time.After(10 * time.Second):
			t.Fatal("A's inbox was not woken")
		}
		_, news := inboxB.Take()
		require.False(t, news.Came, "A's event woke B's inbox")
	})
}
