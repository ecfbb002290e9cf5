package platform_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/samples"
)

// exportedMetrics is the list of metric names the chart's dashboard and
// alerts may use; the chart's render test reads it too.
const exportedMetrics = "../../deploy/helm/test/testdata/exported-metrics.txt"

// scrape returns every sample of /metrics, keyed by name and labels as
// exposed (name{label="value",...}).
func scrape(t *testing.T, env *testkit.Env) map[string]float64 {
	t.Helper()
	resp := env.Probe(t, "/metrics")
	require.Equal(t, http.StatusOK, resp.Status)
	return samples.Parse(t, resp.Body)
}

// TestBacklogMetrics: operations left unsettled, jobs and webhook
// deliveries waiting, and a signing key past its rotation show in the
// metrics the chart's alerts read, at the next scrape.
func TestBacklogMetrics(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	ctx := context.Background()
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"}})
	var id int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = 'shop'`).Scan(&id))
	// The JWKS makes the Company's first signing key.
	require.Equal(t, http.StatusOK, env.Do(t, http.MethodGet, env.PublicURL("/t/shop/oauth/jwks.json"), nil).Status)

	before := scrape(t, env)
	for _, s := range []string{
		`poppyhost_operations_unsettled{status="unknown"}`, `poppyhost_operations_unsettled{status="performing"}`,
		`poppyhost_operations_unsettled_oldest_seconds{status="unknown"}`, `poppyhost_jobs{state="available"}`,
		`poppyhost_jobs_available_oldest_seconds`, `poppyhost_webhook_deliveries_pending`, `poppyhost_webhook_delivery_lag_seconds`,
		`poppyhost_operations{state="proposed"}`, `poppyhost_handoffs_waiting`, `poppyhost_handoffs_waiting_oldest_seconds`,
	} {
		v, ok := before[s]
		require.True(t, ok, "%s is not exported before anything waits", s)
		require.Zero(t, v, s)
	}
	require.Less(t, before["poppyhost_signing_key_oldest_seconds"], before["poppyhost_signing_key_rotate_after_seconds"])

	// An operation whose outcome became unknown two hours after its
	// sending began, three hours ago.
	_, err := env.Pool.Exec(ctx, `INSERT INTO operations (company_id, id, client_id, user_id, interface, target, action_key,
		status, revision, performing_since, created_at, updated_at, expires_at)
		VALUES ($1, 'op_stuck', 'https://agent.test/client', 'usr_1', 'api', 'orders-api', 'key_1', 'unknown', 'rev_1',
		now() - interval '3 hours', now() - interval '3 hours', now() - interval '1 hour', now() + interval '1 day')`, id)
	require.NoError(t, err)
	// A job due an hour ago in a queue no replica works, and a webhook
	// delivery asked for two hours ago, waiting to retry.
	_, err = env.Pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, created_at, scheduled_at)
		VALUES ('{}', 'metrics_test', 1, 'not_worked', 'available', now() - interval '1 hour', now() - interval '1 hour'),
		('{"company_id": 0, "conversation_id": "none"}', 'conversations_deliver', 5, 'default', 'retryable',
		 now() - interval '2 hours', now() + interval '1 day')`)
	require.NoError(t, err)
	// The key made a day past the rotation period.
	_, err = env.Pool.Exec(ctx, `UPDATE signing_keys SET created_at = now() - interval '91 days' WHERE company_id = $1`, id)
	require.NoError(t, err)

	// A proposed operation, and a conversation handed off to a person
	// ninety minutes ago.
	_, err = env.Pool.Exec(ctx, `INSERT INTO operations (company_id, id, client_id, user_id, interface, target, action_key,
		status, revision, created_at, updated_at, expires_at)
		VALUES ($1, 'op_proposed', 'https://agent.test/client', 'usr_1', 'api', 'orders-api', 'key_2', 'proposed', 'rev_2',
		now(), now(), now() + interval '1 day')`, id)
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
		queued_at, created_at, last_activity_at)
		VALUES ($1, 'conv_queued', 'https://agent.test/client', 'usr_1', 'queued', 'agent',
		now() - interval '90 minutes', now() - interval '2 hours', now() - interval '90 minutes')`, id)
	require.NoError(t, err)

	after := scrape(t, env)
	require.Equal(t, 1.0, after[`poppyhost_operations{state="proposed"}`])
	require.Equal(t, 1.0, after[`poppyhost_operations{state="unknown"}`])
	require.Zero(t, after[`poppyhost_operations{state="performing"}`])
	require.Equal(t, 1.0, after[`poppyhost_handoffs_waiting`])
	require.Greater(t, after[`poppyhost_handoffs_waiting_oldest_seconds`], 3600.0)
	require.Equal(t, 1.0, after[`poppyhost_operations_unsettled{status="unknown"}`])
	require.Greater(t, after[`poppyhost_operations_unsettled_oldest_seconds{status="unknown"}`], 2*3600.0)
	require.GreaterOrEqual(t, after[`poppyhost_jobs{state="available"}`], 1.0)
	require.Greater(t, after[`poppyhost_jobs_available_oldest_seconds`], 1800.0)
	require.Equal(t, 1.0, after[`poppyhost_webhook_deliveries_pending`])
	require.Greater(t, after[`poppyhost_webhook_delivery_lag_seconds`], 3600.0)
	require.Greater(t, after["poppyhost_signing_key_oldest_seconds"], after["poppyhost_signing_key_rotate_after_seconds"])
}

// TestExportedMetricsList: every name on the list the chart's dashboard
// and alerts are checked against is exported by a running server, so the
// list cannot name a metric that does not exist.
func TestExportedMetricsList(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"}})
	// One request makes the per-route HTTP metrics.
	env.Do(t, http.MethodGet, env.PublicURL("/t/shop/oauth/jwks.json"), nil)
	names := samples.Families(scrape(t, env))
	listed := samples.List(t, exportedMetrics)
	for _, name := range listed {
		require.True(t, names[name], "%s is listed in %s but the server does not export it", name, exportedMetrics)
	}
	require.NotEmpty(t, listed)
}

// TestSessionMetrics: a Session started, its JWT replayed, and a Session
// the Company ended are counted, by the spec's error code.
func TestSessionMetrics(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	c := newSessCompany(t, env, nil)
	a := env.StartAgent(t, "")
	before := scrape(t, env)
	for _, s := range []string{`poppyhost_sessions_started_total`, `poppyhost_session_replays_refused_total`,
		`poppyhost_session_verifications_refused_total{reason="invalid_session"}`,
		`poppyhost_session_verifications_refused_total{reason="session_ended"}`,
		`poppyhost_session_verifications_refused_total{reason="error"}`} {
		v, ok := before[s]
		require.True(t, ok, "%s is not exported before any Session", s)
		require.Zero(t, v, s)
	}

	sid := sessID()
	h := http.Header{}
	h.Set("Poppy-Session", a.SessionJWT(t, peers.SessionClaims{Aud: c.Aud, URL: c.FeedbackURL, Method: http.MethodPost,
		SID: sid, Sub: "usr_" + sid[:8]}, peers.SessionOptions{}))
	require.Equal(t, http.StatusAccepted, sessPost(t, env, c.FeedbackURL, h).Status)
	require.Equal(t, http.StatusBadRequest, sessPost(t, env, c.FeedbackURL, h).Status, "the same JWT again")
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+c.Slug+"/sessions/end",
		map[string]string{"client_id": a.ClientID, "sid": sid})
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	require.Equal(t, http.StatusBadRequest, sessSend(t, env, a, c, sid).Status, "the ended Session")

	after := scrape(t, env)
	require.Equal(t, 1.0, after[`poppyhost_sessions_started_total`])
	require.Equal(t, 1.0, after[`poppyhost_session_replays_refused_total`])
	require.Equal(t, 1.0, after[`poppyhost_session_verifications_refused_total{reason="invalid_session"}`])
	require.Equal(t, 1.0, after[`poppyhost_session_verifications_refused_total{reason="session_ended"}`])
	require.Zero(t, after[`poppyhost_session_verifications_refused_total{reason="error"}`])
}
