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

// TestMCPArgumentsMatchTheSchema: a tools/call whose arguments do not
// match the tool's registered input schema is the MCP error for invalid
// params, and nothing reaches the origin.
func TestMCPArgumentsMatchTheSchema(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	origin := g.addTool(t, "harbor", registry.Tool{Name: "harbor_berth", Description: "Book a berth",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"boat":{"type":"string","maxLength":20},
			"nights":{"type":"integer","minimum":1}},"required":["boat"],"additionalProperties":false}`)})
	origin.Handle(http.MethodPost, "/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("booked")) })
	call := func(args any) map[string]any {
		resp := g.post(t, "harbor", newSID(), "", toolsCall("harbor_berth", args))
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		return resp.JSON(t)
	}
	for name, args := range map[string]any{
		"missing required": map[string]any{},
		"wrong type":       map[string]any{"boat": 7},
		"too long":         map[string]any{"boat": "a boat with a very long name"},
		"below minimum":    map[string]any{"boat": "Kestrel", "nights": 0},
		"unknown member":   map[string]any{"boat": "Kestrel", "crew": 3},
		"null arguments":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			got := call(args)
			e, ok := got["error"].(map[string]any)
			require.True(t, ok, "a JSON-RPC error: %v", got)
			require.Equal(t, float64(-32602), e["code"], "%v", e)
			require.Contains(t, e["message"], "input schema of harbor_berth")
		})
	}
	require.Zero(t, origin.Calls("", "/"), "nothing reached the origin")
	got := call(map[string]any{"boat": "Kestrel", "nights": 2})
	require.NotContains(t, got, "error")
	require.Equal(t, 1, origin.Calls("", "/"))
}
