package agentid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
)

// TestMetrics: fetches are counted by document and result, lookups by
// whether a fresh cached copy answered them; every series is exported
// from the start.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, setupOptions{Resolver: agentid.Options{Metrics: reg}})
	c := b.client(t)
	_, kid := b.agent.Key("ES256")
	for range 2 {
		_, err := b.resolver.Key(context.Background(), c, kid)
		require.NoError(t, err)
	}
	b.client(t)
	// Expired, the document comes back invalid.
	b.clock.Advance(time.Hour)
	b.agent.SetMetadata(b.metadataWith("redirect_uris", "not a list"))
	_, err := b.resolver.Client(context.Background(), b.agent.ClientID)
	require.Error(t, err)

	want := `
# HELP poppyhost_agent_metadata_cache_total Lookups of those documents, by document and result: hit (a fresh cached copy) or miss (fetched, waited for a fetch, or failed).
# TYPE poppyhost_agent_metadata_cache_total counter
poppyhost_agent_metadata_cache_total{document="client_metadata",result="hit"} 1
poppyhost_agent_metadata_cache_total{document="client_metadata",result="miss"} 2
poppyhost_agent_metadata_cache_total{document="jwks",result="hit"} 1
poppyhost_agent_metadata_cache_total{document="jwks",result="miss"} 1
# HELP poppyhost_agent_metadata_fetches_total Fetches of Personal Agents' and MCP clients' documents, by document (client_metadata, jwks) and result: ok, invalid (fetched, refused), unavailable (not fetched: unreachable, timeout, not 2xx).
# TYPE poppyhost_agent_metadata_fetches_total counter
poppyhost_agent_metadata_fetches_total{document="client_metadata",result="invalid"} 1
poppyhost_agent_metadata_fetches_total{document="client_metadata",result="ok"} 1
poppyhost_agent_metadata_fetches_total{document="client_metadata",result="unavailable"} 0
poppyhost_agent_metadata_fetches_total{document="jwks",result="invalid"} 0
poppyhost_agent_metadata_fetches_total{document="jwks",result="ok"} 1
poppyhost_agent_metadata_fetches_total{document="jwks",result="unavailable"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}
