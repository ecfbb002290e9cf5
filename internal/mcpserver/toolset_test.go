package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestMCPToolSetChanges: the Company's server is kept between requests,
// yet a tool added or changed shows on the next request.
func TestMCPToolSetChanges(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	list := func() map[string]string {
		resp := g.post(t, "harbor", newSID(), "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		var out struct {
			Result struct {
				Tools []struct {
					Name        string `json:"name"`
					Description string `json:"description"`
				} `json:"tools"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &out))
		got := map[string]string{}
		for _, tool := range out.Result.Tools {
			got[tool.Name] = tool.Description
		}
		return got
	}
	require.Equal(t, map[string]string{"harbor_hours": "Opening hours", "harbor_orders": "Your orders"}, list())
	require.Equal(t, "Opening hours", list()["harbor_hours"])

	g.putTool(t, "harbor", registry.Tool{Name: "harbor_hours", Description: "When we are open",
		InputSchema: json.RawMessage(`{"type":"object"}`), URL: g.origins["harbor_hours"].URL("/")})
	g.addTool(t, "harbor", registry.Tool{Name: "harbor_tides", Description: "Tides", InputSchema: json.RawMessage(`{"type":"object"}`)})
	require.Equal(t, map[string]string{"harbor_hours": "When we are open", "harbor_orders": "Your orders", "harbor_tides": "Tides"}, list())
}

// TestMCPConcurrentCallsKeepTheirOwnSession: requests served at once by
// the Company's one server each reach the origin with their own Session.
func TestMCPConcurrentCallsKeepTheirOwnSession(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	origin := g.origins["harbor_hours"]
	var mu sync.Mutex
	seen := map[string]int{}
	origin.Handle(http.MethodPost, "/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[peers.OriginClaims(r).SID]++
		mu.Unlock()
		_, _ = w.Write([]byte("9 to 5"))
	})
	sids := make([]string, 12)
	for i := range sids {
		sids[i] = newSID()
	}
	var wg sync.WaitGroup
	for _, sid := range sids {
		wg.Go(func() {
			resp := g.post(t, "harbor", sid, "", toolsCall("harbor_hours", map[string]any{}))
			assert.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		})
	}
	wg.Wait()
	for _, sid := range sids {
		require.Equal(t, 1, seen[sid], "the call of Session %s reached the origin as its own", sid)
	}
}
