package conversations_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// The staff console's side of the store (store_staff.go, feed.go): the
// inbox, the search filters, handing back, and the feeds.

// inboxIDs lists co's inbox as "id reason", longest waiting first.
func (j *sweepSide) inboxIDs(t *testing.T, co *tenant.Company) []string {
	t.Helper()
	ws, more, err := j.store.Inbox(context.Background(), co.ID, conversations.MaxInbox)
	require.NoError(t, err)
	require.False(t, more)
	out := []string{}
	for _, w := range ws {
		out = append(out, w.ID+" "+w.Reason)
	}
	return out
}

// TestInbox: the conversations waiting for a person are the queued ones
// and the open Direct Conversations the User accepted from a
// user_requested event while no person answers, longest waiting first
// (by the handoff, or the Direct Conversation's start), only the
// Company's own.
func TestInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{})
	handoff := func(co *tenant.Company, id string) {
		t.Helper()
		_, err := j.store.Handoff(ctx, co.ID, owner, id)
		require.NoError(t, err)
	}
	// Started in this order, waiting in another.
	late, early, idle, parent := j.start(t, j.acme, "m1", "A person, please"), j.start(t, j.acme, "m2", "A person!"),
		j.start(t, j.acme, "m3", "Hello"), j.start(t, j.acme, "m4", "An exchange")
	rival := j.start(t, j.rival, "m5", "A person, please")
	handoff(j.rival, rival)
	require.Empty(t, j.inboxIDs(t, j.acme))

	j.clock.advance(time.Minute)
	handoff(j.acme, early)
	asked, err := j.store.CompanyUserRequested(ctx, j.acme.ID, parent, "A specialist needs to confirm the exchange.")
	require.NoError(t, err)
	// The clock's offset from now: handoffs at 1 and 6 minutes, the
	// Direct Conversation at 3.
	j.clock.advance(3 * time.Minute)
	direct, err := j.store.Start(ctx, j.acme.ID, owner, conversations.StartRequest{ParentID: parent, AcceptedEventID: asked.EventID},
		conversations.Policy{})
	require.NoError(t, err)
	j.clock.advance(6 * time.Minute)
	handoff(j.acme, late)
	want := []string{early + " handoff", direct.ID + " user_requested", late + " handoff"}
	require.Equal(t, want, j.inboxIDs(t, j.acme))
	require.Equal(t, []string{rival + " handoff"}, j.inboxIDs(t, j.rival))

	ws, more, err := j.store.Inbox(ctx, j.acme.ID, 2)
	require.NoError(t, err)
	require.True(t, more)
	require.Len(t, ws, 2)
	require.WithinDuration(t, j.clock.now().Add(-5*time.Minute), ws[0].Since, 5*time.Second, "waiting since the handoff")
	require.WithinDuration(t, j.clock.now().Add(-3*time.Minute), ws[1].Since, 5*time.Second, "waiting since it began")
	require.Equal(t, conversations.StatusQueued, ws[0].Status)

	// A person takes one: it waits no more; handed back, a conversation
	// the Personal Agent handed off is the Company Agent's again, while
	// a Direct Conversation waits again for a person.
	for _, id := range []string{early, direct.ID} {
		_, err = j.store.CompanyJoin(ctx, j.acme.ID, id, &conversations.Author{Name: "Alex"}, nil)
		require.NoError(t, err)
	}
	require.Equal(t, []string{late + " handoff"}, j.inboxIDs(t, j.acme))
	for _, id := range []string{early, direct.ID} {
		p, err := j.store.CompanyHandBack(ctx, j.acme.ID, id)
		require.NoError(t, err)
		require.Equal(t, []string{"idle", "agent"}, []string{p.Status, p.Responder})
	}
	require.Equal(t, []string{direct.ID + " user_requested", late + " handoff"}, j.inboxIDs(t, j.acme))
	// Closed, it waits no more; nor does a handoff nobody could take.
	_, err = j.store.CompanyClose(ctx, j.acme.ID, direct.ID)
	require.NoError(t, err)
	_, err = j.store.CompanyHandoffUnavailable(ctx, j.acme, late, "")
	require.NoError(t, err)
	require.Empty(t, j.inboxIDs(t, j.acme))
	require.Equal(t, []string{"idle", "agent"}, j.state(t, j.acme, idle))
}

// TestCompanyHandBack: only a conversation a person answers is handed
// back, with one state event; the Company API's rules for closed and
// other Companies' conversations hold.
func TestCompanyHandBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{})
	id := j.start(t, j.acme, "m1", "Hello")
	requireCode := func(err error, code string) {
		t.Helper()
		var he *httpx.Error
		require.ErrorAs(t, err, &he)
		require.Equal(t, code, he.Code)
	}
	_, err := j.store.CompanyHandBack(ctx, j.acme.ID, id)
	requireCode(err, httpx.CodeConflict)
	_, err = j.store.Handoff(ctx, j.acme.ID, owner, id)
	require.NoError(t, err)
	_, err = j.store.CompanyHandBack(ctx, j.acme.ID, id)
	requireCode(err, httpx.CodeConflict)
	_, err = j.store.CompanyJoin(ctx, j.acme.ID, id, nil, nil)
	require.NoError(t, err)
	before := j.get(t, j.acme, id).LastSeq
	_, err = j.store.CompanyHandBack(ctx, j.rival.ID, id)
	requireCode(err, httpx.CodeConversationNotFound)
	_, err = j.store.CompanyHandBack(ctx, j.acme.ID, id)
	require.NoError(t, err)
	evs := j.events(t, j.acme, id, before)
	require.Equal(t, []string{"state"}, types(evs))
	require.Equal(t, map[string]any{"status": "idle", "responder": "agent"}, evs[0].Body)
	_, err = j.store.CompanyJoin(ctx, j.acme.ID, id, nil, nil)
	require.NoError(t, err)
	_, err = j.store.CompanyClose(ctx, j.acme.ID, id)
	require.NoError(t, err)
	_, err = j.store.CompanyHandBack(ctx, j.acme.ID, id)
	requireCode(err, httpx.CodeConversationClosed)
}

// TestCompanyListSearch: the console's search by Personal Agent and by
// the day conversations began, with status, newest first.
func TestCompanyListSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{})
	other := conversations.Owner{ClientID: "https://other.test/", UserID: "user_2"}
	text := "Hello"
	startAs := func(o conversations.Owner, msgID string) string {
		c, err := j.store.Start(ctx, j.acme.ID, o, conversations.StartRequest{Message: &conversations.Message{
			ID: msgID, Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &text}}, conversations.Policy{})
		require.NoError(t, err)
		return c.ID
	}
	day0 := j.clock.now()
	a := startAs(owner, "m1")
	j.clock.advance(48 * time.Hour)
	b := startAs(other, "m2")
	c := startAs(owner, "m3")
	_, err := j.store.CompanyClose(ctx, j.acme.ID, c)
	require.NoError(t, err)
	list := func(f conversations.ListFilter) []string {
		t.Helper()
		f.Limit = 10
		vs, err := j.store.CompanyList(ctx, j.acme.ID, f)
		require.NoError(t, err)
		out := []string{}
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	require.Equal(t, []string{c, b, a}, list(conversations.ListFilter{}))
	require.Equal(t, []string{c, a}, list(conversations.ListFilter{ClientID: owner.ClientID}))
	require.Equal(t, []string{a}, list(conversations.ListFilter{ClientID: owner.ClientID, Status: "idle"}))
	require.Equal(t, []string{a}, list(conversations.ListFilter{To: day0.Add(time.Hour)}))
	require.Equal(t, []string{c, b}, list(conversations.ListFilter{From: day0.Add(time.Hour)}))
	require.Equal(t, []string{c}, list(conversations.ListFilter{From: day0.Add(time.Hour), Status: "closed"}))
	require.Empty(t, list(conversations.ListFilter{ClientID: "https://nobody.test/"}))
	require.Empty(t, list(conversations.ListFilter{From: day0.Add(time.Hour), To: day0.Add(2 * time.Hour)}))
}

// feedReader reads a feed's events.
type feedReader struct {
	t  *testing.T
	rd *bufio.Reader
}

// next returns the next event, name and data (lines joined by newlines,
// as EventSource joins them), skipping comments.
func (f *feedReader) next() (string, string) {
	f.t.Helper()
	var (
		event string
		data  []string
	)
	for {
		line, err := f.rd.ReadString('\n')
		require.NoError(f.t, err)
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && data != nil:
			return event, strings.Join(data, "\n")
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// openFeed serves h at a test server and opens it.
func openFeed(t *testing.T, h http.HandlerFunc) *feedReader {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	return &feedReader{t: t, rd: bufio.NewReader(resp.Body)}
}

// TestCompanyFeed: a Company's feed sends the inbox as it is, then again
// whenever a conversation of the Company changes it, woken by the
// notifications of the conversations' events; another Company's changes
// send nothing.
func TestCompanyFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{})
	listener := notify.New(j.pool, nil)
	hub := conversations.NewHub(listener)
	t.Cleanup(listener.Start(ctx))
	inbox := func(ctx context.Context) ([]byte, error) {
		ws, _, err := j.store.Inbox(ctx, j.acme.ID, conversations.MaxInbox)
		var ids []string
		for _, w := range ws {
			ids = append(ids, w.ID)
		}
		return []byte("inbox:\n" + strings.Join(ids, "\n")), err
	}
	feed := openFeed(t, func(w http.ResponseWriter, r *http.Request) {
		hub.ServeFeed(w, r, hub.WatchCompany(j.acme.ID), conversations.FeedOptions{Event: "inbox", Every: 10 * time.Millisecond}, inbox)
	})
	event, data := feed.next()
	require.Equal(t, "inbox", event)
	require.Equal(t, "inbox:\n", data)

	a, b := j.start(t, j.acme, "m1", "A person, please"), j.start(t, j.acme, "m2", "A person!")
	_, err := j.store.Handoff(ctx, j.acme.ID, owner, a)
	require.NoError(t, err)
	// The starts changed nothing the feed shows, so the next event is
	// the handoff's.
	_, data = feed.next()
	require.Equal(t, "inbox:\n"+a, data)
	rival := j.start(t, j.rival, "m3", "A person, please")
	_, err = j.store.Handoff(ctx, j.rival.ID, owner, rival)
	require.NoError(t, err)
	_, err = j.store.Handoff(ctx, j.acme.ID, owner, b)
	require.NoError(t, err)
	_, data = feed.next()
	require.Equal(t, "inbox:\n"+a+"\n"+b, data)
	_, err = j.store.CompanyJoin(ctx, j.acme.ID, a, nil, nil)
	require.NoError(t, err)
	_, data = feed.next()
	require.Equal(t, "inbox:\n"+b, data)
}

// TestFeedLines: a carriage return in what a feed sends ends a data line,
// so text in it cannot add a field of its own to the stream.
func TestFeedLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The listener is never started: the feed sends its first rendering
	// and ends with its request.
	hub := conversations.NewHub(notify.New(nil, nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		hub.ServeFeed(w, r.WithContext(ctx), hub.Watch(1, "cnv_a"), conversations.FeedOptions{},
			func(context.Context) ([]byte, error) { return []byte("one\revent: evil\r\nid: 7\ntwo"), nil })
	}))
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw := new(strings.Builder)
	_, err = bufio.NewReader(resp.Body).WriteTo(raw)
	require.NoError(t, err)
	require.Equal(t, "event: update\ndata: one\ndata: event: evil\ndata: id: 7\ndata: two\n\n", raw.String())
}

// TestInboxUsesWaitingIndex: the inbox's query repeats the predicate and
// the order of the partial index conversations_company_waiting
// (migration 00037), so the planner can answer it from the index alone
// without a sort; a change to one that the other does not follow fails
// here rather than turning the inbox into a scan of the Company's
// conversations.
func TestInboxUsesWaitingIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL enable_bitmapscan = off`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `EXPLAIN `+conversations.InboxSQL, int64(1), 11)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	require.Contains(t, text, "conversations_company_waiting", text)
	require.NotContains(t, text, "Sort", text)
}
