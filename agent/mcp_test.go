package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// An MCP tool asks for approval with an error result carrying the
// operation; the agent calls it again with the same arguments and the
// approval in _meta, and reads an SSE answer.
func TestCallToolWithApproval(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var calls []map[string]any
	f.mux.HandleFunc("POST /mcp", func(w http.ResponseWriter, r *http.Request) {
		require.NotEmpty(t, r.Header.Get("Poppy-Session"))
		var req struct {
			ID     any            `json:"id"`
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		switch req.Method {
		case "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
			return
		case "initialize":
			writeJSON(w, map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{"protocolVersion": mcpVersion}})
			return
		}
		calls = append(calls, req.Params)
		meta, _ := req.Params["_meta"].(map[string]any)
		if meta == nil {
			writeJSON(w, map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
				"isError": true, "content": []any{map[string]any{"type": "text", "text": "Not done yet."}},
				"structuredContent": map[string]any{"operation": json.RawMessage(jacketOp)},
			}})
			return
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
			"content": []any{map[string]any{"type": "text", "text": "Exchanged."}},
		}})
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", b)
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	require.NoError(t, s.MCPInitialize(f.ctx, f.url("/mcp")))
	args := map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}
	user := AsUser(func(context.Context, *Ask) (bool, string, error) { return true, "tap", nil })
	result, res, err := s.CallTool(f.ctx, f.url("/mcp"), "exchange_item", args, jacket, user)
	require.NoError(t, err)
	require.Equal(t, "Exchanged.", result.Text())
	require.Equal(t, 2, res.Attempts)
	require.Len(t, calls, 2)
	require.Equal(t, calls[0]["arguments"], calls[1]["arguments"], "the same arguments")
	approval := calls[1]["_meta"].(map[string]any)["personalagentprotocol.org/approval"].(map[string]any)
	require.Equal(t, "exc_5Rt2", approval["operation_id"])
	require.Equal(t, "user", approval["approver"])
}
