package conversations_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/httpx"
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

// sweepSide is a database of its own with two Companies, acme with the
// test's conversation settings and rival with the defaults, a store that
// makes the conversations and the sweeps' store, which records what they
// deliver; both on the test's clock. The sweeps need nothing else.
type sweepSide struct {
	pool        *pgxpool.Pool
	store       *conversations.Store
	swept       *conversations.Store
	acme, rival *tenant.Company
	clock       jobClock
	delivered   enqueued
	sweeps      map[string]jobs.Sweep
}

// owner is the Personal Agent and User of every conversation of the
// sweep tests.
var owner = conversations.Owner{ClientID: "https://agent.test/", UserID: "user_1"}

func newSweepSide(t *testing.T, acme tenant.Conversations) *sweepSide {
	t.Helper()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	companies := tenant.NewStore(pool)
	j := &sweepSide{pool: pool, sweeps: map[string]jobs.Sweep{}}
	acme.HandoffUnavailableMessage = "Nobody from the team is free right now."
	var err error
	j.acme, err = companies.Create(ctx, coSlug, tenant.Settings{
		Organization: tenant.Organization{Name: "Acme", Domain: "acme.example"}, Conversations: acme})
	require.NoError(t, err)
	j.rival, err = companies.Create(ctx, coRival, tenant.Settings{
		Organization: tenant.Organization{Name: "Rival", Domain: "rival.example"}})
	require.NoError(t, err)
	j.store = conversations.NewStore(pool, conversations.StoreOptions{Now: j.clock.now})
	j.swept = conversations.NewStore(pool, conversations.StoreOptions{Enqueue: &j.delivered, Now: j.clock.now})
	for _, s := range conversations.Sweeps(j.swept) {
		j.sweeps[s.Name] = s
	}
	require.Len(t, j.sweeps, 3)
	return j
}

// run runs one sweep.
func (j *sweepSide) run(t *testing.T, name string) {
	t.Helper()
	s, ok := j.sweeps[name]
	require.True(t, ok, name)
	testdb.RunSweeps(t, j.pool, j.clock.now, s)
}

// start starts a conversation of co with a Personal Agent message.
func (j *sweepSide) start(t *testing.T, co *tenant.Company, msgID, text string) string {
	t.Helper()
	c, err := j.store.Start(context.Background(), co.ID, owner, conversations.StartRequest{Message: &conversations.Message{
		ID: msgID, Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &text}}, conversations.Policy{})
	require.NoError(t, err)
	return c.ID
}

// get returns a conversation of co.
func (j *sweepSide) get(t *testing.T, co *tenant.Company, id string) *conversations.Conversation {
	t.Helper()
	c, err := j.store.Get(context.Background(), co.ID, id)
	require.NoError(t, err)
	require.NotNil(t, c, id)
	return c
}

// state is a conversation's status and responder.
func (j *sweepSide) state(t *testing.T, co *tenant.Company, id string) []string {
	t.Helper()
	c := j.get(t, co, id)
	return []string{c.Status, c.Responder}
}

// events returns a conversation's events after seq.
func (j *sweepSide) events(t *testing.T, co *tenant.Company, id string, after int64) []conversations.Event {
	t.Helper()
	evs, _, err := j.store.Events(context.Background(), co.ID, id, after, 100)
	require.NoError(t, err)
	return evs
}

func types(evs []conversations.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// text is the text of a message event.
func text(t *testing.T, e conversations.Event) string {
	t.Helper()
	m, err := json.Marshal(e.Body["message"])
	require.NoError(t, err)
	var msg conversations.Message
	require.NoError(t, json.Unmarshal(m, &msg))
	require.NotNil(t, msg.Text)
	return *msg.Text
}

// origins lists the origin of a conversation's events from seq on.
func origins(t *testing.T, pool *pgxpool.Pool, id string, from int) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT origin FROM conversation_events
		WHERE conversation_id = $1 AND seq >= $2 ORDER BY seq`, id, from)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// requireErrCode requires err to be an httpx error with code.
func requireErrCode(t *testing.T, err error, code string) {
	t.Helper()
	var he *httpx.Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, code, he.Code)
}

func TestHandoffTimeoutJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{HandoffTimeoutSeconds: 60})
	s := j.store
	handoff := func(co *tenant.Company, id string) {
		t.Helper()
		_, err := s.Handoff(ctx, co.ID, owner, id)
		require.NoError(t, err)
	}

	queued := j.start(t, j.acme, "msg_1", "A person, please")
	handoff(j.acme, queued)
	taken := j.start(t, j.acme, "msg_2", "A person, please")
	handoff(j.acme, taken)
	_, err := s.CompanyJoin(ctx, j.acme.ID, taken, nil, nil)
	require.NoError(t, err)
	rival := j.start(t, j.rival, "msg_r", "Hi")
	handoff(j.rival, rival)

	// Within the limit nothing happens.
	j.clock.advance(30 * time.Second)
	j.run(t, "conversations_handoff_timeout")
	require.Equal(t, "queued", j.get(t, j.acme, queued).Status)

	// Past acme's limit (60s) its handoff goes back to the Company Agent,
	// which says nobody is free; rival's default limit (300s) is not past.
	j.clock.advance(61 * time.Second)
	j.run(t, "conversations_handoff_timeout")
	require.Equal(t, []string{"idle", "agent"}, j.state(t, j.acme, queued))
	evs := j.events(t, j.acme, queued, 3)
	require.Equal(t, []string{"message", "state"}, types(evs))
	msg := evs[0].Body["message"].(map[string]any)
	require.Equal(t, "Nobody from the team is free right now.", msg["text"])
	require.Equal(t, "company", msg["role"])
	require.Equal(t, map[string]any{"type": "agent"}, msg["author"])
	require.Equal(t, []string{"platform", "platform"}, origins(t, j.pool, queued, 4), "the Company's webhook hears of it")
	require.Equal(t, []string{queued}, j.delivered.list())
	require.Equal(t, []string{"idle", "human"}, j.state(t, j.acme, taken))
	require.Equal(t, "queued", j.get(t, j.rival, rival).Status)

	j.clock.advance(301 * time.Second)
	j.run(t, "conversations_handoff_timeout")
	require.Equal(t, []string{"idle", "agent"}, j.state(t, j.rival, rival))
	require.Contains(t, text(t, j.events(t, j.rival, rival, 3)[0]), "No one is available")
	// Nothing more for acme's: it is no longer queued.
	require.Len(t, j.events(t, j.acme, queued, 3), 2)
}

func TestIdleCloseJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{IdleCloseSeconds: 3600})
	s := j.store

	idle := j.start(t, j.acme, "msg_1", "Hello")
	parent := j.start(t, j.acme, "msg_2", "Hello")
	_, err := s.CompanyUserRequested(ctx, j.acme.ID, parent, "r")
	require.NoError(t, err)
	c, err := s.Start(ctx, j.acme.ID, owner, conversations.StartRequest{ParentID: parent, AcceptedEventID: "evt_3"},
		conversations.Policy{})
	require.NoError(t, err)
	direct := c.ID
	rival := j.start(t, j.rival, "msg_r", "Hi")

	j.clock.advance(30 * time.Minute)
	j.run(t, "conversations_idle_close")
	require.Equal(t, "idle", j.get(t, j.acme, idle).Status)

	// Past an hour: closed, the Direct Conversation too; its parent waits
	// while the Direct Conversation is open, and closing it is activity.
	j.clock.advance(61 * time.Minute)
	j.run(t, "conversations_idle_close")
	require.Equal(t, "closed", j.get(t, j.acme, idle).Status)
	require.Equal(t, []string{"platform"}, origins(t, j.pool, idle, 3))
	require.Equal(t, "closed", j.get(t, j.acme, direct).Status)
	require.Equal(t, "idle", j.get(t, j.acme, parent).Status)
	require.Equal(t, []string{"user_requested", "direct_opened", "direct_closed"}, types(j.events(t, j.acme, parent, 2)))
	require.Equal(t, "idle", j.get(t, j.rival, rival).Status, "the rival's limit is a week")
	still := "Still there?"
	_, err = s.Send(ctx, j.acme.ID, owner, idle, &conversations.Message{ID: "msg_3",
		Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &still}, conversations.Policy{})
	requireErrCode(t, err, "conversation_closed")

	j.clock.advance(2*time.Hour + 2*time.Minute)
	j.run(t, "conversations_idle_close")
	require.Equal(t, "closed", j.get(t, j.acme, parent).Status)
	require.Equal(t, "idle", j.get(t, j.rival, rival).Status)
	j.clock.advance(7*24*time.Hour + time.Minute)
	j.run(t, "conversations_idle_close")
	require.Equal(t, "closed", j.get(t, j.rival, rival).Status)
}

func TestPruneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{RetentionDays: 1})
	s := j.store
	backdate := func(id string, upTo int, by time.Duration) {
		t.Helper()
		_, err := j.pool.Exec(ctx, `UPDATE conversation_events SET created_at = created_at - $3::interval
			WHERE conversation_id = $1 AND seq <= $2`, id, upTo, by.String())
		require.NoError(t, err)
		// As the store would have written them: the oldest event's time,
		// and the last activity when every event moved.
		_, err = j.pool.Exec(ctx, `UPDATE conversations c SET first_event_at = (SELECT e.created_at
				FROM conversation_events e WHERE e.conversation_id = c.id AND e.seq = c.first_seq),
			last_activity_at = CASE WHEN last_seq <= $3 THEN last_activity_at - $2::interval ELSE last_activity_at END
			WHERE id = $1`, id, by.String(), upTo)
		require.NoError(t, err)
	}

	// Open, with old and new events.
	open := j.start(t, j.acme, "msg_1", "Old question")
	answer := "New answer"
	_, err := s.CompanyPost(ctx, j.acme, open, &conversations.CompanyMessage{
		Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &answer}, "")
	require.NoError(t, err)
	backdate(open, 2, 48*time.Hour)
	// Closed, every event old: it goes, with its message IDs.
	gone := j.start(t, j.acme, "msg_2", "Bye")
	_, err = s.Close(ctx, j.acme.ID, owner, gone)
	require.NoError(t, err)
	backdate(gone, 3, 48*time.Hour)
	// The rival keeps 90 days.
	rival := j.start(t, j.rival, "msg_r", "Hi")
	backdate(rival, 2, 48*time.Hour)

	j.run(t, "conversations_prune")

	evs := j.events(t, j.acme, open, 0)
	require.Equal(t, []string{"message"}, types(evs), "the new event stays")
	require.EqualValues(t, 3, evs[0].Seq)
	// A cursor before evt_2 answers cursor_expired; evt_2's still reads
	// what follows.
	require.EqualValues(t, 3, j.get(t, j.acme, open).FirstSeq)

	c, err := s.Get(ctx, j.acme.ID, gone)
	require.NoError(t, err)
	require.Nil(t, c)
	var ids int
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT count(*) FROM conversation_message_ids WHERE conversation_id = $1`,
		gone).Scan(&ids))
	require.Zero(t, ids)
	require.Len(t, j.events(t, j.rival, rival, 0), 2)

	// Later every event of the open conversation is past the retention:
	// it stays, empty, until it closes.
	j.clock.advance(3 * 24 * time.Hour)
	j.run(t, "conversations_prune")
	require.Empty(t, j.events(t, j.acme, open, 0))
	cur := j.get(t, j.acme, open)
	require.Equal(t, "idle", cur.Status)
	require.EqualValues(t, 4, cur.FirstSeq, "a cursor of evt_2 has expired; evt_3 reads nothing")
	require.EqualValues(t, 3, cur.LastSeq)
}
