package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRateLimitAcrossReplicas: two server processes on one database count
// each other through their heartbeats and together allow a limit once,
// within the documented tolerance, not once each; a replica killed without
// a clean stop is dropped from the count (docs/operations.md, "Rate limits
// across replicas").
func TestRateLimitAcrossReplicas(t *testing.T) {
	const limit = 20
	rs := startReplicasEnv(t, map[string]string{"POPPYHOST_COMPANY_API_RATE_PER_KEY": "20"})
	a, b := rs.a, rs.b
	for _, s := range []*server{a, b} {
		waitFor(t, 30*time.Second, s.name+" counting two replicas", func() bool { return s.liveReplicas(t) == "2" })
	}

	resp := a.admin(t, http.MethodPost, "/admin/v1/companies", companyBody("shop"))
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	resp = a.admin(t, http.MethodPost, "/admin/v1/companies/shop/api-keys", map[string]any{"name": "agent"})
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	var created struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &created))
	key := created.Key

	allowed := 0
	for i := range 3 * limit {
		req := mustRequest(t, http.MethodGet, publicURL+"/company/v1/company", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		got := []*server{a, b}[i%2].do(t, req)
		switch got.status {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
			require.Equal(t, "rate_limited", got.errorCode())
			require.NotEmpty(t, got.header.Get("Retry-After"))
		default:
			t.Fatalf("request %d: %d %s", i, got.status, got.body)
		}
	}
	t.Logf("%d of %d requests allowed across two replicas, limit %d", allowed, 3*limit, limit)
	require.LessOrEqual(t, allowed, limit+1, "the limit holds across the replicas, within one request per extra replica")
	require.GreaterOrEqual(t, allowed, limit, "spread evenly, the replicas allow the whole limit")

	// B dies without a word: A stops counting it once its heartbeat is
	// stale.
	require.NoError(t, b.cmd.Process.Kill())
	waitFor(t, 40*time.Second, "A dropping the killed replica", func() bool { return a.liveReplicas(t) == "1" })
}

// liveReplicas reads poppyhost_replicas_live from the server's metrics.
func (s *server) liveReplicas(t *testing.T) string {
	t.Helper()
	resp, err := s.probeGet("/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "poppyhost_replicas_live "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
