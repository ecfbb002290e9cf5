package conversations_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// replica is one platform instance's sweeps on the shared database: a
// pool and a store of its own, recording what it delivers.
type replica struct {
	delivered enqueued
	sweeps    map[string]jobs.Sweep
}

func newReplica(t *testing.T, j *sweepSide) *replica {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), j.pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	r := &replica{sweeps: map[string]jobs.Sweep{}}
	store := conversations.NewStore(pool, conversations.StoreOptions{Enqueue: &r.delivered, Now: j.clock.now})
	for _, s := range conversations.Sweeps(store) {
		r.sweeps[s.Name] = s
	}
	return r
}

// runBoth runs a sweep on both replicas at once, each several times, as
// two job workers would when both believe it is their turn, and returns
// what each did.
func runBoth(t *testing.T, j *sweepSide, name string, a, b *replica) int64 {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
	)
	for _, r := range []*replica{a, b, a, b} {
		wg.Go(func() {
			n, unfinished, err := jobs.RunSweep(context.Background(), r.sweeps[name], j.clock.now())
			mu.Lock()
			defer mu.Unlock()
			require.NoError(t, err)
			require.False(t, unfinished)
			total += n
		})
	}
	wg.Wait()
	return total
}

// TestDeadlinesFollowSettingsAcrossReplicas changes a Company's handoff
// timeout and idle close while it has open conversations: they then time
// out and close by the new settings, to the second, though they were
// made under the old ones; two replicas sweeping at once handle each
// conversation once, and a Company whose settings did not change keeps
// its deadlines.
func TestDeadlinesFollowSettingsAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{HandoffTimeoutSeconds: 3600, IdleCloseSeconds: 7200})
	companies := tenant.NewStore(j.pool)
	companies.OnModify(j.store.SettingsChanged)
	a, b := newReplica(t, j), newReplica(t, j)

	// More than one batch of each, so the replicas claim side by side.
	const n = 150
	var queued, idle []string
	for i := range n {
		id := j.start(t, j.acme, fmt.Sprintf("msg_q%d", i), "A person, please")
		_, err := j.store.Handoff(ctx, j.acme.ID, owner, id)
		require.NoError(t, err)
		queued = append(queued, id)
		idle = append(idle, j.start(t, j.acme, fmt.Sprintf("msg_i%d", i), "Hello"))
	}
	rival := j.start(t, j.rival, "msg_r", "A person, please")
	_, err := j.store.Handoff(ctx, j.rival.ID, owner, rival)
	require.NoError(t, err)

	modify := func(handoff, idle int) {
		t.Helper()
		_, err := companies.Modify(ctx, j.acme.ID, func(c *tenant.Company) (tenant.Settings, error) {
			s := c.Settings
			s.Conversations.HandoffTimeoutSeconds, s.Conversations.IdleCloseSeconds = handoff, idle
			return s, nil
		})
		require.NoError(t, err)
	}
	// Shorter than when the conversations were made.
	modify(60, 600)

	j.clock.advance(30 * time.Second)
	require.Zero(t, runBoth(t, j, "conversations_handoff_timeout", a, b), "not yet a minute")
	j.clock.advance(65 * time.Second)
	require.EqualValues(t, n, runBoth(t, j, "conversations_handoff_timeout", a, b))
	for _, id := range queued {
		require.Equal(t, []string{"idle", "agent"}, j.state(t, j.acme, id))
		require.Equal(t, []string{"message", "state"}, types(j.events(t, j.acme, id, 3)), "one unavailable message: %s", id)
	}
	require.ElementsMatch(t, queued, append(a.delivered.list(), b.delivered.list()...), "each once, by one replica")
	require.Equal(t, "queued", j.get(t, j.rival, rival).Status, "the rival keeps 300 seconds")

	// Longer again: the 600 seconds no longer close anything.
	modify(60, 3600)
	j.clock.advance(11 * time.Minute)
	require.Zero(t, runBoth(t, j, "conversations_idle_close", a, b))
	require.Equal(t, []string{"idle", "agent"}, j.state(t, j.acme, idle[0]))
	require.EqualValues(t, 1, runBoth(t, j, "conversations_handoff_timeout", a, b), "the rival's 300 seconds are past")
	require.Equal(t, []string{"idle", "agent"}, j.state(t, j.rival, rival))

	// An hour after they were made, the idle ones close; those handed
	// back at 65 seconds had activity then and wait a minute more.
	j.clock.advance(time.Hour + 5*time.Second)
	require.EqualValues(t, n, runBoth(t, j, "conversations_idle_close", a, b))
	for i := range n {
		require.Equal(t, "closed", j.get(t, j.acme, idle[i]).Status)
		require.Equal(t, "idle", j.get(t, j.acme, queued[i]).Status)
		require.Equal(t, []string{"state"}, types(j.events(t, j.acme, idle[i], 2)), "closed once: %s", idle[i])
	}
	j.clock.advance(time.Hour + 70*time.Second)
	require.EqualValues(t, n, runBoth(t, j, "conversations_idle_close", a, b))
	require.Equal(t, "closed", j.get(t, j.acme, queued[0]).Status)
	delivered := append(a.delivered.list(), b.delivered.list()...)
	require.Len(t, delivered, 3*n+1, "each conversation delivered once per change, the rival's handoff too")
}

// TestDeadlineDefaults checks that the deadlines the database computes for
// a Company without limits of its own are the package's defaults.
func TestDeadlineDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{})
	id := j.start(t, j.rival, "msg_1", "A person, please")
	_, err := j.store.Handoff(ctx, j.rival.ID, owner, id)
	require.NoError(t, err)
	var handoff, idle, prune time.Duration
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT extract(epoch FROM handoff_due_at - queued_at)::bigint * 1000000000,
			extract(epoch FROM idle_due_at - last_activity_at)::bigint * 1000000000,
			extract(epoch FROM prune_due_at - first_event_at)::bigint * 1000000000
		FROM conversations WHERE id = $1`, id).Scan(&handoff, &idle, &prune))
	require.Equal(t, conversations.DefaultHandoffTimeout, handoff)
	require.Equal(t, conversations.DefaultIdleClose, idle)
	require.Equal(t, time.Duration(conversations.DefaultRetentionDays)*24*time.Hour, prune)
}

// TestPruneByDeadline prunes by the deadline each conversation keeps: a
// conversation with more old events than one visit deletes is emptied in
// one run; a shorter retention set later prunes what the old one kept;
// a closed parent goes after its closed Direct Conversation, not before.
func TestPruneByDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{RetentionDays: 30})
	companies := tenant.NewStore(j.pool)
	companies.OnModify(j.store.SettingsChanged)
	// backdate moves a conversation's events and activity back by days,
	// as if it had happened then.
	backdate := func(id string, days int) {
		t.Helper()
		_, err := j.pool.Exec(ctx, `UPDATE conversation_events SET created_at = created_at - make_interval(days => $2)
			WHERE conversation_id = $1`, id, days)
		require.NoError(t, err)
		_, err = j.pool.Exec(ctx, `UPDATE conversations SET last_activity_at = last_activity_at - make_interval(days => $2),
			first_event_at = first_event_at - make_interval(days => $2) WHERE id = $1`, id, days)
		require.NoError(t, err)
	}

	// 2,499 events, 40 days old, then a new one.
	long := j.start(t, j.acme, "msg_long", "Hello")
	_, err := j.pool.Exec(ctx, `INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
		SELECT company_id, id, last_seq + g, 'message', '{}', now() FROM conversations, generate_series(1, 2497) g
		WHERE id = $1`, long)
	require.NoError(t, err)
	_, err = j.pool.Exec(ctx, `UPDATE conversations SET last_seq = last_seq + 2497 WHERE id = $1`, long)
	require.NoError(t, err)
	backdate(long, 40)
	answer := "Still here"
	_, err = j.store.CompanyPost(ctx, j.acme, long, &conversations.CompanyMessage{
		Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &answer}, "")
	require.NoError(t, err)

	// 20 days old: kept for 30 days, not for 10.
	recent := j.start(t, j.acme, "msg_recent", "Hello")
	backdate(recent, 20)

	// A closed parent and its closed Direct Conversation, 40 days old.
	parent := j.start(t, j.acme, "msg_parent", "Hello")
	_, err = j.store.CompanyUserRequested(ctx, j.acme.ID, parent, "r")
	require.NoError(t, err)
	c, err := j.store.Start(ctx, j.acme.ID, owner, conversations.StartRequest{ParentID: parent, AcceptedEventID: "evt_3"},
		conversations.Policy{})
	require.NoError(t, err)
	direct := c.ID
	_, err = j.store.CompanyClose(ctx, j.acme.ID, parent)
	require.NoError(t, err)
	require.Equal(t, "closed", j.get(t, j.acme, direct).Status)
	backdate(parent, 40)
	backdate(direct, 40)

	j.run(t, "conversations_prune")
	evs := j.events(t, j.acme, long, 0)
	require.Len(t, evs, 1, "the new message stays")
	require.EqualValues(t, 2500, evs[0].Seq)
	require.Len(t, j.events(t, j.acme, recent, 0), 2)
	gone, err := j.store.Get(ctx, j.acme.ID, direct)
	require.NoError(t, err)
	require.Nil(t, gone, "the Direct Conversation goes")
	require.Equal(t, "closed", j.get(t, j.acme, parent).Status, "its parent had it still when it was looked at")
	require.Empty(t, j.events(t, j.acme, parent, 0))

	j.run(t, "conversations_prune")
	require.Equal(t, "closed", j.get(t, j.acme, parent).Status, "looked at again in an hour")
	j.clock.advance(61 * time.Minute)
	j.run(t, "conversations_prune")
	gone, err = j.store.Get(ctx, j.acme.ID, parent)
	require.NoError(t, err)
	require.Nil(t, gone)

	_, err = companies.Modify(ctx, j.acme.ID, func(c *tenant.Company) (tenant.Settings, error) {
		s := c.Settings
		s.Conversations.RetentionDays = 10
		return s, nil
	})
	require.NoError(t, err)
	j.run(t, "conversations_prune")
	require.Empty(t, j.events(t, j.acme, recent, 0), "10 days now")
	require.Len(t, j.events(t, j.acme, long, 0), 1)
}

// TestLongerRetentionKeeps lengthens the retention after a conversation's
// prune came due under the shorter one: the prune keeps its events and
// moves its deadline to the longer retention.
func TestLongerRetentionKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{RetentionDays: 10})
	companies := tenant.NewStore(j.pool)
	companies.OnModify(j.store.SettingsChanged)
	id := j.start(t, j.acme, "msg_1", "Hello")
	_, err := j.pool.Exec(ctx, `UPDATE conversations SET first_event_at = first_event_at - interval '20 days',
		last_activity_at = last_activity_at - interval '20 days' WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = j.pool.Exec(ctx, `UPDATE conversation_events SET created_at = created_at - interval '20 days'
		WHERE conversation_id = $1`, id)
	require.NoError(t, err)
	_, err = companies.Modify(ctx, j.acme.ID, func(c *tenant.Company) (tenant.Settings, error) {
		s := c.Settings
		s.Conversations.RetentionDays = 30
		return s, nil
	})
	require.NoError(t, err)

	j.run(t, "conversations_prune")
	require.Len(t, j.events(t, j.acme, id, 0), 2)
	var secs float64
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT extract(epoch FROM prune_due_at - first_event_at)
		FROM conversations WHERE id = $1`, id).Scan(&secs))
	require.Equal(t, 30*24*time.Hour, time.Duration(secs)*time.Second)
}

// TestStaleDeadlineComputedAgain gives a queued and an idle conversation
// deadlines earlier than their Company's settings say, as a write that
// read the settings just before a change committed leaves them: the
// sweeps compute them again rather than act on them.
func TestStaleDeadlineComputedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{HandoffTimeoutSeconds: 3600, IdleCloseSeconds: 7200})
	queued := j.start(t, j.acme, "msg_1", "A person, please")
	_, err := j.store.Handoff(ctx, j.acme.ID, owner, queued)
	require.NoError(t, err)
	idle := j.start(t, j.acme, "msg_2", "Hello")
	_, err = j.pool.Exec(ctx, `UPDATE conversations SET handoff_due_at = now() - interval '1 minute',
		idle_due_at = now() - interval '1 minute' WHERE company_id = $1`, j.acme.ID)
	require.NoError(t, err)

	j.run(t, "conversations_handoff_timeout")
	j.run(t, "conversations_idle_close")
	require.Equal(t, "queued", j.get(t, j.acme, queued).Status)
	require.Equal(t, "idle", j.get(t, j.acme, idle).Status)
	require.Empty(t, j.delivered.list())
	var handoff, idleIn float64
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT
			(SELECT extract(epoch FROM handoff_due_at - queued_at) FROM conversations WHERE id = $1),
			(SELECT extract(epoch FROM idle_due_at - last_activity_at) FROM conversations WHERE id = $2)`,
		queued, idle).Scan(&handoff, &idleIn))
	require.Equal(t, []float64{3600, 7200}, []float64{handoff, idleIn})
}

// TestCompanyListFilters pages through the Company's conversations with
// each filter: newest first, only the status asked for, before the
// conversation given, and nothing of another Company's.
func TestCompanyListFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{})
	want := map[string][]string{}
	for i := range 9 {
		id := j.start(t, j.acme, fmt.Sprintf("msg_%d", i), "Hello")
		st := "idle"
		switch i % 3 {
		case 1:
			_, err := j.store.Handoff(ctx, j.acme.ID, owner, id)
			require.NoError(t, err)
			st = "queued"
		case 2:
			_, err := j.store.CompanyClose(ctx, j.acme.ID, id)
			require.NoError(t, err)
			st = "closed"
		}
		// Newest first.
		want[st] = append([]string{id}, want[st]...)
		want[""] = append([]string{id}, want[""]...)
	}
	j.start(t, j.rival, "msg_r", "Hello")
	for _, status := range []string{"", "idle", "queued", "closed", "working"} {
		var got []string
		before := ""
		for {
			page, err := j.store.CompanyList(ctx, j.acme.ID, conversations.ListFilter{Status: status, Before: before, Limit: 2})
			require.NoError(t, err)
			for _, v := range page {
				got = append(got, v.ID)
			}
			if len(page) < 2 {
				break
			}
			before = page[len(page)-1].ID
		}
		require.Equal(t, want[status], got, "status %q", status)
	}
}

// TestFailuresDoNotHoldBackTheRest: a full batch of conversations whose
// handoff timeout fails every time (a clash with an event already stored)
// does not stop the run from handling the conversation due after them;
// the failures stay due and are reported.
func TestFailuresDoNotHoldBackTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{HandoffTimeoutSeconds: 60})
	_, err := j.pool.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
			created_at, last_activity_at, queued_at)
		SELECT $1, 'cnv_broken_' || n, 'https://agent.test/', 'usr_1', 'queued', 'agent',
			now() - interval '20 minutes', now() - interval '20 minutes', now() - interval '20 minutes' - n * interval '1 second'
		FROM generate_series(1, 100) n`, j.acme.ID)
	require.NoError(t, err)
	_, err = j.pool.Exec(ctx, `INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
		SELECT $1, 'cnv_broken_' || n, 1, 'message', '{}', now() FROM generate_series(1, 100) n`, j.acme.ID)
	require.NoError(t, err)
	_, err = j.pool.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
			created_at, last_activity_at, queued_at)
		VALUES ($1, 'cnv_good', 'https://agent.test/', 'usr_1', 'queued', 'agent',
			now() - interval '10 minutes', now() - interval '10 minutes', now() - interval '10 minutes')`, j.acme.ID)
	require.NoError(t, err)

	_, unfinished, err := jobs.RunSweep(ctx, j.sweeps["conversations_handoff_timeout"], j.clock.now())
	require.Error(t, err, "the failures are reported")
	require.False(t, unfinished)
	require.Equal(t, "idle", j.get(t, j.acme, "cnv_good").Status)
	var stillQueued int
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT count(*) FROM conversations WHERE status = 'queued'`).Scan(&stillQueued))
	require.Equal(t, 100, stillQueued)
}

// TestMessageKeepsDeadlines: a message that changes nothing but the
// conversation's activity leaves its deadlines as they are, so that the
// row is updated in place (migration 00032); the idle deadline then comes
// early, and the idle sweep computes it again instead of closing: the
// conversation closes an idle period after its last message, not after
// its first.
func TestMessageKeepsDeadlines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{IdleCloseSeconds: 3600})
	id := j.start(t, j.acme, "msg_1", "Hello")
	due := func() (idle, prune time.Time) {
		t.Helper()
		require.NoError(t, j.pool.QueryRow(ctx, `SELECT idle_due_at, prune_due_at FROM conversations WHERE id = $1`, id).
			Scan(&idle, &prune))
		return idle, prune
	}
	idle0, prune0 := due()

	j.clock.advance(50 * time.Minute)
	text := "Still there?"
	_, err := j.store.Send(ctx, j.acme.ID, owner, id, &conversations.Message{ID: "msg_2",
		Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &text}, conversations.Policy{})
	require.NoError(t, err)
	idle1, prune1 := due()
	require.True(t, idle1.Equal(idle0), "idle deadline moved by a message: %v, was %v", idle1, idle0)
	require.True(t, prune1.Equal(prune0), "prune deadline moved by a message: %v, was %v", prune1, prune0)

	// Past the first deadline: the sweep finds it stale and moves it to
	// an hour after the message.
	j.clock.advance(70 * time.Minute)
	j.run(t, "conversations_idle_close")
	require.Equal(t, "idle", j.get(t, j.acme, id).Status)
	var left float64
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT extract(epoch FROM idle_due_at - last_activity_at) FROM conversations
		WHERE id = $1`, id).Scan(&left))
	require.Equal(t, float64(3600), left)
	require.Empty(t, j.delivered.list())

	j.clock.advance(111 * time.Minute)
	j.run(t, "conversations_idle_close")
	require.Equal(t, "closed", j.get(t, j.acme, id).Status)
}

// A message whose time is not after the conversation's last activity (a
// replica whose clock is behind another's) has the deadlines computed
// again from it, as the trigger's WHEN has done since migration 00032:
// the message's one statement, which the trigger does not consider
// (migration 00043), leaves such a conversation to send's transaction.
func TestMessageBeforeActivityMovesDeadlines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := newSweepSide(t, tenant.Conversations{IdleCloseSeconds: 3600})
	j.clock.advance(50 * time.Minute)
	id := j.start(t, j.acme, "msg_1", "Hello")

	j.clock.advance(20 * time.Minute)
	text := "Still there?"
	_, err := j.store.Send(ctx, j.acme.ID, owner, id, &conversations.Message{ID: "msg_2",
		Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &text}, conversations.Policy{})
	require.NoError(t, err)
	var left float64
	require.NoError(t, j.pool.QueryRow(ctx, `SELECT extract(epoch FROM idle_due_at - last_activity_at)
		FROM conversations WHERE id = $1`, id).Scan(&left))
	require.Equal(t, float64(3600), left, "the idle deadline is an hour after the message, the last activity")
}
