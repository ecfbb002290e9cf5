package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Randomized schedules at the interfaces of the Operations extension, the
// companion of internal/operations' engine harness (TestEngineSchedules):
// the engine's invariants hold there; these hold where the interfaces
// meet the origin and the Personal Agent. Each schedule is seeded, and a
// failure names its seed (opstest.Seeds).

// TestInterfaceSchedulesMCPBatches: no JSON-RPC batch loses a result. A
// batch answered otherwise than 200 ran nothing at the origin; a batch
// answered 200 has a result for every call.
func TestInterfaceSchedulesMCPBatches(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	origin := g.origins["stormline/exchange_item"]
	var slow atomic.Bool
	origin.Handle(http.MethodPost, "/", func(w http.ResponseWriter, req *http.Request) {
		if slow.Load() && peers.OriginClaims(req).OperationID != "" {
			time.Sleep(1500 * time.Millisecond) // past the tool's timeout: outcome unknown
		}
		xs["stormline"].Serve(w, req)
	})
	g.putTool(t, "stormline", registry.Tool{Name: "exchange_item", Description: "Exchanges an item",
		Scopes: []string{"orders:write"}, URL: origin.BaseURL(), InputSchema: json.RawMessage(`{"type":"object"}`),
		TimeoutSeconds: 1})
	headers := []string{"MCP-Protocol-Version", "2025-03-26", "Poppy-Extensions", opstest.Declares}
	for _, seed := range opstest.Seeds() {
		rnd := rand.New(rand.NewPCG(seed, 11))
		for step := range 6 {
			sku := fmt.Sprintf("sku-%d-%d", seed, step)
			op := toolOperation(t, readToolResult(t, g.post(t, "stormline", newSID(), token,
				toolsCall("exchange_item", map[string]any{"item_id": "itm_4Qa", "replacement_sku": sku}), headers...)))
			slow.Store(rnd.IntN(2) == 0)
			batch := []any{}
			for i := range 1 + rnd.IntN(3) {
				var call map[string]any
				if i == 0 && rnd.IntN(2) == 0 {
					call = approvedCall("exchange_item", map[string]any{"item_id": "itm_4Qa", "replacement_sku": sku}, op, nil)
				} else {
					call = toolsCall("exchange_item", map[string]any{"item_id": "itm_9", "replacement_sku": sku + "-other"})
				}
				call["id"] = i + 1
				batch = append(batch, call)
			}
			before := len(origin.Received())
			resp := g.post(t, "stormline", newSID(), token, batch, headers...)
			if resp.Status != http.StatusOK {
				// Allow the cut-off send to arrive before counting.
				time.Sleep(200 * time.Millisecond)
				require.Equal(t, before, len(origin.Received()),
					"seed %d step %d: a batch answered %d ran calls at the origin, whose results are lost", seed, step, resp.Status)
				continue
			}
			var results []json.RawMessage
			require.NoError(t, json.Unmarshal(resp.Body, &results), "seed %d: %s", seed, resp.Body)
			require.Len(t, results, len(batch), "seed %d step %d: a result for every call", seed, step)
		}
	}
	slow.Store(false)
}
