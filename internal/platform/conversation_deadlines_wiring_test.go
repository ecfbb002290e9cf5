package platform_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestConversationDeadlinesWiring changes a Company's handoff timeout
// and idle close through the admin API while it has a queued and an idle
// conversation made under the old ones: the platform computes their
// deadlines again (tenant's settings hook is conversations'), and two
// platform instances on the one database, both running their jobs, time
// out the handoff and close the idle conversation, each once.
func TestConversationDeadlinesWiring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "deadlines",
		"organization":  map[string]any{"name": "Deadlines", "domain": "deadlines.example"},
		"conversations": map[string]any{"handoff_timeout_seconds": 3600, "idle_close_seconds": 7200}})
	var companyID int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = 'deadlines'`).Scan(&companyID))
	// As the conversations store leaves them (how they got there is the
	// conversations package's to test): one queued ten minutes ago and
	// active two minutes ago, so that under the new limits its handoff is
	// due and its idle close is not (both due at once would race, and
	// real time never makes them so: the handoff limit is the shorter),
	// and one idle for ten minutes.
	_, err := env.Pool.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
			created_at, last_activity_at, queued_at)
		VALUES ($1, 'cnv_queued', 'https://agent.test/', 'usr_1', 'queued', 'agent', now() - interval '10 minutes',
			now() - interval '2 minutes', now() - interval '10 minutes'),
		($1, 'cnv_idle', 'https://agent.test/', 'usr_1', 'idle', 'agent', now() - interval '10 minutes',
			now() - interval '10 minutes', NULL)`, companyID)
	require.NoError(t, err)
	dueIn := func() (handoff, idle time.Duration) {
		t.Helper()
		var h, i float64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT
				(SELECT extract(epoch FROM handoff_due_at - queued_at) FROM conversations WHERE id = 'cnv_queued'),
				(SELECT extract(epoch FROM idle_due_at - last_activity_at) FROM conversations WHERE id = 'cnv_idle')`).Scan(&h, &i))
		return time.Duration(h) * time.Second, time.Duration(i) * time.Second
	}
	h, i := dueIn()
	require.Equal(t, []time.Duration{time.Hour, 2 * time.Hour}, []time.Duration{h, i})

	resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/deadlines",
		map[string]any{"conversations": map[string]any{"handoff_timeout_seconds": 60, "idle_close_seconds": 300}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	h, i = dueIn()
	require.Equal(t, []time.Duration{time.Minute, 5 * time.Minute}, []time.Duration{h, i})

	second, err := platform.New(ctx, platform.Options{Pool: env.Pool, Sealer: testdb.Sealer(env.Pool), URLs: env.URLs})
	require.NoError(t, err)
	for _, p := range []*platform.Platform{env.Platform, second} {
		require.NoError(t, p.Jobs.Start(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = p.Jobs.Stop(ctx)
		})
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		crows, err := env.Pool.Query(ctx, `SELECT id, status, last_activity_at::text, coalesce(idle_due_at::text, '-'),
			coalesce(handoff_due_at::text, '-') FROM conversations ORDER BY id`)
		if err == nil {
			for crows.Next() {
				var id, status, last, idle, handoff string
				_ = crows.Scan(&id, &status, &last, &idle, &handoff)
				t.Logf("conversation %s %s last activity %s idle due %s handoff due %s", id, status, last, idle, handoff)
			}
			crows.Close()
		}
		// What River did, to tell a job not run from one that failed.
		rows, err := env.Pool.Query(ctx, `SELECT kind, state, attempt, errors::text FROM river_job ORDER BY id`)
		if err != nil {
			t.Logf("river_job: %v", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var kind, state string
			var attempt int
			var errs *string
			_ = rows.Scan(&kind, &state, &attempt, &errs)
			t.Logf("river_job %s %s attempt %d errors %v", kind, state, attempt, errs)
		}
	})
	require.Eventually(t, func() bool {
		var done bool
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT
			(SELECT status = 'idle' FROM conversations WHERE id = 'cnv_queued') AND
			(SELECT status = 'closed' FROM conversations WHERE id = 'cnv_idle')`).Scan(&done))
		return done
	}, 60*time.Second, 50*time.Millisecond, "the sweeps run when River elects a leader, which a loaded machine can make wait")
	// Once each: the nobody-available message and its state event, the
	// closing state event.
	var events []string
	rows, err := env.Pool.Query(ctx, `SELECT conversation_id || ':' || type || ':' || origin FROM conversation_events
		WHERE company_id = $1 ORDER BY conversation_id, seq`, companyID)
	require.NoError(t, err)
	for rows.Next() {
		var e string
		require.NoError(t, rows.Scan(&e))
		events = append(events, e)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"cnv_idle:state:platform", "cnv_queued:message:platform", "cnv_queued:state:platform"}, events)
}
