package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/samples"
)

// exportedMetricsList is the chart's list of the metric names a server
// exports (deploy/helm/test).
const exportedMetricsList = "../deploy/helm/test/testdata/exported-metrics.txt"

// scrapeOps returns every sample of the server's /metrics, on its
// operations listener, keyed by name and labels as exposed.
func (s *server) scrapeOps(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := s.probeGet("/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return samples.Parse(t, body)
}

// storyMetrics: after the story, /metrics exports every family the
// chart's list names, and the story moved the counters it should have:
// Sessions started, sign-ins and their tokens, messages both ways, an
// approval at every interface, the origin's decline, the retry storm's
// settle job, gateway and origin answers, webhook deliveries, agent
// metadata fetched and then found in the cache.
func (e *storyEnv) storyMetrics(t *testing.T) {
	got := e.srv.scrapeOps(t)
	families := samples.Families(got)
	for _, name := range samples.List(t, exportedMetricsList) {
		require.True(t, families[name], "%s is not exported after the story", name)
	}
	require.True(t, families["poppyhost_jobs_worked_total"], "jobs were worked")

	sum := func(prefix string) float64 {
		var n float64
		for s, v := range got {
			if strings.HasPrefix(s, prefix) {
				n += v
			}
		}
		return n
	}
	for _, s := range []string{
		`poppyhost_sessions_started_total`,
		`poppyhost_sign_ins_total{result="signed_in"}`,
		`poppyhost_token_revocations_total`,
		`poppyhost_conversation_messages_total{author="personal_agent"}`,
		`poppyhost_conversation_messages_total{author="agent"}`,
		`poppyhost_operations_proposals_total{interface="api"}`,
		`poppyhost_operations_proposals_total{interface="conversation"}`,
		`poppyhost_operations_approvals_total{interface="api"}`,
		`poppyhost_operations_approvals_total{interface="mcp"}`,
		`poppyhost_operations_approvals_total{interface="web"}`,
		`poppyhost_operations_approvals_total{interface="conversation"}`,
		`poppyhost_operations_declines_total{by="origin"}`,
		`poppyhost_operations_outcomes_total{outcome="performed"}`,
		`poppyhost_operations_settle_attempts_total`,
		`poppyhost_gateway_calls_total{class="2xx",interface="api"}`,
		`poppyhost_gateway_calls_total{class="2xx",interface="mcp"}`,
		`poppyhost_origin_responses_total{call="api",class="2xx"}`,
		`poppyhost_origin_responses_total{call="web",class="2xx"}`,
		`poppyhost_origin_request_duration_seconds_count{call="tool"}`,
		`poppyhost_origin_responses_total{call="operation",class="2xx"}`,
		`poppyhost_origin_request_duration_seconds_count{call="api"}`,
		`poppyhost_webhook_deliveries_total{result="delivered"}`,
		`poppyhost_agent_metadata_fetches_total{document="client_metadata",result="ok"}`,
		`poppyhost_agent_metadata_fetches_total{document="jwks",result="ok"}`,
		`poppyhost_agent_metadata_cache_total{document="client_metadata",result="hit"}`,
	} {
		require.Positive(t, got[s], "%s after the story", s)
	}
	require.Positive(t, got[`poppyhost_token_grants_total{grant_type="authorization_code"}`]+
		got[`poppyhost_token_grants_total{grant_type="device_code"}`], "sign-ins got tokens")
	require.Positive(t, sum(`poppyhost_jobs_worked_total{kind="conversations_deliver",result="completed"}`),
		"webhook deliveries were worked")
	// Nothing is left waiting once the story is over.
	require.Zero(t, got[`poppyhost_handoffs_waiting`])
	require.Zero(t, got[`poppyhost_operations{state="unknown"}`])
}
