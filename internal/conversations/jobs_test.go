package conversations_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// jobClock is the jobs' clock: now, moved on by the test.
type jobClock struct{ offset atomic.Int64 }

func (c *jobClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jobClock) advance(d time.Duration) { c.offset.Store(int64(d)) }

// enqueued records what a job scheduled for the Company's webhook.
type enqueued struct {
	mu  sync.Mutex
	ids []string
}

func (e *enqueued) EnqueueConversation(_ context.Context, _ pgx.Tx, c *conversations.Conversation) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids = append(e.ids, c.ID)
	return nil
}

func (e *enqueued) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ids)
}

// jobRunner runs the package's sweeps through River, on a store with the
// test's clock that records deliveries.
type jobRunner struct {
	cs        *companySide
	clock     jobClock
	delivered enqueued
	sweeps    map[string]jobs.Sweep
}

func newJobRunner(t *testing.T, cs *companySide) *jobRunner {
	t.Helper()
	j := &jobRunner{cs: cs, sweeps: map[string]jobs.Sweep{}}
	store := conversations.NewStore(cs.env.Pool, conversations.StoreOptions{Enqueue: &j.delivered, Now: j.clock.now})
	for _, s := range conversations.Sweeps(store, tenant.NewStore(cs.env.Pool)) {
		j.sweeps[s.Name] = s
	}
	require.Len(t, j.sweeps, 3)
	return j
}

// run runs one sweep. The delivery jobs the Personal Agent's requests
// queued are dropped first: the sweep's client would take them too.
func (j *jobRunner) run(t *testing.T, name string) {
	t.Helper()
	_, err := j.cs.env.Pool.Exec(context.Background(), `DELETE FROM river_job`)
	require.NoError(t, err)
	s, ok := j.sweeps[name]
	require.True(t, ok, name)
	testdb.RunSweeps(t, j.cs.env.Pool, j.clock.now, s)
}

// origins lists the origin of a conversation's events from seq on.
func origins(t *testing.T, cs *companySide, id string, from int) []string {
	t.Helper()
	rows, err := cs.env.Pool.Query(context.Background(), `SELECT origin FROM conversation_events
		WHERE conversation_id = $1 AND seq >= $2 ORDER BY seq`, id, from)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		out = append(out, o)
	}
	return out
}

func TestHandoffTimeoutJob(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{conversations: map[string]any{"handoff_timeout_seconds": 60}})
	jr := newJobRunner(t, cs)
	clock := &jr.clock
	state := func(key, id string) (string, string) {
		v := cs.apiAs(t, key, http.MethodGet, "/"+id, nil).JSON(t)
		return v["status"].(string), v["responder"].(string)
	}

	queued := cs.paStart(t, "msg_1", "A person, please")
	require.Equal(t, http.StatusAccepted, cs.pa(t, http.MethodPost, "/"+queued+"/handoff", map[string]any{}).Status)
	taken := cs.paStart(t, "msg_2", "A person, please")
	require.Equal(t, http.StatusAccepted, cs.pa(t, http.MethodPost, "/"+taken+"/handoff", map[string]any{}).Status)
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+taken+"/join", nil).Status)
	rival := rivalConversation(t, cs)
	require.Equal(t, http.StatusAccepted, cs.paAs(t, coRival, "", http.MethodPost, "/"+rival+"/handoff", map[string]any{}).Status)

	// Within the limit nothing happens.
	clock.advance(30 * time.Second)
	jr.run(t, "conversations_handoff_timeout")
	st, _ := state(cs.key, queued)
	require.Equal(t, "queued", st)

	// Past acme's limit (60s) its handoff goes back to the Company Agent,
	// which says nobody is free; rival's default limit (300s) is not past.
	clock.advance(61 * time.Second)
	jr.run(t, "conversations_handoff_timeout")
	st, rs := state(cs.key, queued)
	require.Equal(t, []string{"idle", "agent"}, []string{st, rs})
	rd := cs.paEvents(t, queued, "cursor=evt_3")
	require.Equal(t, []string{"message", "state"}, typesOf(rd))
	msg := eventsOf(rd)[0]["message"].(map[string]any)
	require.Equal(t, "Nobody from the team is free right now.", msg["text"])
	require.Equal(t, "company", msg["role"])
	require.Equal(t, map[string]any{"type": "agent"}, msg["author"])
	require.Equal(t, []string{"platform", "platform"}, origins(t, cs, queued, 4), "the Company's webhook hears of it")
	require.Equal(t, []string{queued}, jr.delivered.list())
	st, rs = state(cs.key, taken)
	require.Equal(t, []string{"idle", "human"}, []string{st, rs})
	st, _ = state(cs.rivalKey, rival)
	require.Equal(t, "queued", st)

	clock.advance(301 * time.Second)
	jr.run(t, "conversations_handoff_timeout")
	st, rs = state(cs.rivalKey, rival)
	require.Equal(t, []string{"idle", "agent"}, []string{st, rs})
	text := cs.apiAs(t, cs.rivalKey, http.MethodGet, "/"+rival+"/events?cursor=evt_3", nil).JSON(t)
	require.Contains(t, eventsOf(text)[0]["message"].(map[string]any)["text"], "No one is available")
	// Nothing more for acme's: it is no longer queued.
	require.Len(t, eventsOf(cs.paEvents(t, queued, "cursor=evt_3")), 2)
}

func TestIdleCloseJob(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{conversations: map[string]any{"idle_close_seconds": 3600}})
	jr := newJobRunner(t, cs)
	clock := &jr.clock
	status := func(key, id string) string {
		return cs.apiAs(t, key, http.MethodGet, "/"+id, nil).JSON(t)["status"].(string)
	}

	idle := cs.paStart(t, "msg_1", "Hello")
	parent := cs.paStart(t, "msg_2", "Hello")
	require.Equal(t, http.StatusCreated, cs.api(t, http.MethodPost, "/"+parent+"/user-requested", map[string]any{"reason": "r"}).Status)
	resp := cs.pa(t, http.MethodPost, "", map[string]any{"parent_conversation_id": parent, "user_requested_event_id": "evt_3"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	direct := resp.JSON(t)["conversation_id"].(string)
	rival := rivalConversation(t, cs)

	clock.advance(30 * time.Minute)
	jr.run(t, "conversations_idle_close")
	require.Equal(t, "idle", status(cs.key, idle))

	// Past an hour: closed, the Direct Conversation too; its parent waits
	// while the Direct Conversation is open, and closing it is activity.
	clock.advance(61 * time.Minute)
	jr.run(t, "conversations_idle_close")
	require.Equal(t, "closed", status(cs.key, idle))
	require.Equal(t, []string{"platform"}, origins(t, cs, idle, 3))
	require.Equal(t, "closed", status(cs.key, direct))
	require.Equal(t, "idle", status(cs.key, parent))
	require.Equal(t, []string{"user_requested", "direct_opened", "direct_closed"}, typesOf(cs.paEvents(t, parent, "cursor=evt_2")))
	require.Equal(t, "idle", status(cs.rivalKey, rival), "the rival's limit is a week")
	sent := cs.pa(t, http.MethodPost, "/"+idle+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_3", "author": map[string]any{"type": "agent"}, "text": "Still there?"}})
	requireCode(t, sent, 409, "conversation_closed")

	clock.advance(2*time.Hour + 2*time.Minute)
	jr.run(t, "conversations_idle_close")
	require.Equal(t, "closed", status(cs.key, parent))
	require.Equal(t, "idle", status(cs.rivalKey, rival))
	clock.advance(7*24*time.Hour + time.Minute)
	jr.run(t, "conversations_idle_close")
	require.Equal(t, "closed", status(cs.rivalKey, rival))
}

func TestPruneJob(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{conversations: map[string]any{"retention_days": 1}})
	jr := newJobRunner(t, cs)
	clock := &jr.clock
	ctx := context.Background()
	backdate := func(id string, upTo int, by time.Duration) {
		t.Helper()
		_, err := cs.env.Pool.Exec(ctx, `UPDATE conversation_events SET created_at = created_at - $3::interval
			WHERE conversation_id = $1 AND seq <= $2`, id, upTo, by.String())
		require.NoError(t, err)
		_, err = cs.env.Pool.Exec(ctx, `UPDATE conversations SET last_activity_at = last_activity_at - $2::interval
			WHERE id = $1 AND last_seq <= $3`, id, by.String(), upTo)
		require.NoError(t, err)
	}

	// Open, with old and new events.
	open := cs.paStart(t, "msg_1", "Old question")
	require.Equal(t, http.StatusCreated, cs.api(t, http.MethodPost, "/"+open+"/messages", map[string]any{"message": map[string]any{
		"author": map[string]any{"type": "agent"}, "text": "New answer"}}).Status)
	backdate(open, 2, 48*time.Hour)
	// Closed, every event old: it goes, with its message IDs.
	gone := cs.paStart(t, "msg_2", "Bye")
	require.Equal(t, http.StatusOK, cs.pa(t, http.MethodPost, "/"+gone+"/close", map[string]any{}).Status)
	backdate(gone, 3, 48*time.Hour)
	// The rival keeps 90 days.
	rival := rivalConversation(t, cs)
	backdate(rival, 2, 48*time.Hour)

	jr.run(t, "conversations_prune")

	rd := cs.paEvents(t, open, "")
	require.Equal(t, []string{"message"}, typesOf(rd), "the new event stays")
	require.Equal(t, "evt_3", eventsOf(rd)[0]["id"])
	resp := cs.pa(t, http.MethodGet, "/"+open+"/events?cursor=evt_1", nil)
	requireCode(t, resp, http.StatusGone, "cursor_expired")
	requireCode(t, cs.api(t, http.MethodGet, "/"+open+"/events?cursor=evt_1", nil), http.StatusGone, "cursor_expired")
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodGet, "/"+open+"/events?cursor=evt_2", nil).Status,
		"the cursor of the last pruned event still reads what follows")

	requireCode(t, cs.api(t, http.MethodGet, "/"+gone, nil), 404, "conversation_not_found")
	requireCode(t, cs.pa(t, http.MethodGet, "/"+gone+"/events", nil), 404, "conversation_not_found")
	var ids int
	require.NoError(t, cs.env.Pool.QueryRow(ctx, `SELECT count(*) FROM conversation_message_ids WHERE conversation_id = $1`,
		gone).Scan(&ids))
	require.Zero(t, ids)

	rivalRead := cs.apiAs(t, cs.rivalKey, http.MethodGet, "/"+rival+"/events", nil)
	require.Equal(t, http.StatusOK, rivalRead.Status)
	require.Len(t, eventsOf(rivalRead.JSON(t)), 2)

	// Later every event of the open conversation is past the retention:
	// it stays, empty, until it closes.
	clock.advance(3 * 24 * time.Hour)
	jr.run(t, "conversations_prune")
	rd = cs.paEvents(t, open, "")
	require.Empty(t, eventsOf(rd))
	require.Equal(t, "idle", rd["status"])
	requireCode(t, cs.pa(t, http.MethodGet, "/"+open+"/events?cursor=evt_2", nil), http.StatusGone, "cursor_expired")
	require.Empty(t, eventsOf(cs.paEvents(t, open, "cursor=evt_3")))
	require.Equal(t, "evt_3", cs.api(t, http.MethodGet, "/"+open, nil).JSON(t)["cursor"])
}
