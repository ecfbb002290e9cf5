package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzMCP feeds JSON-RPC bodies to the hosted MCP server's /mcp, in a
// Session and from a client without one, at a Company that serves
// signed-out calls: the answer is never a 5xx, and a JSON answer is JSON.
// The seeds are the calls of the MCP client tests and broken ones;
// testdata/fuzz holds more, and every finding.
func FuzzMCP(f *testing.F) {
	initialize := `{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}`
	for _, seed := range []string{
		initialize,
		`{"jsonrpc": "2.0", "method": "notifications/initialized"}`,
		`{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}`,
		`{"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": {"name": "harbor_hours", "arguments": {}}}`,
		`{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "harbor_orders", "arguments": {"order_id": "o1"}, "_meta": {"personalagentprotocol.org/approval": {"operation_id": "o", "revision": "r", "approver": "user"}}}}`,
		`{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "lookup_order", "arguments": "x"}}`,
		`{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "harbor_hours", "arguments": {"a": 1e999}}}`,
		`[` + initialize + `, {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}]`,
		`{"jsonrpc": "2.0", "id": null, "method": "ping"}`,
		`{"jsonrpc": "1.0", "id": 1, "method": "ping"}`,
		`{"jsonrpc": "2.0", "id": {}, "method": "resources/list"}`,
		`{"jsonrpc": "2.0", "id": 1, "result": {}}`,
		`{"id": 1, "method": "` + strings.Repeat("a", 300) + `"}`,
		`{`,
		``,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	g := setupMCP(f)
	f.Fuzz(func(t *testing.T, body []byte, inSession bool) {
		sid := ""
		if inSession {
			sid = newSID()
		}
		resp := g.post(t, "harbor", sid, "", body, "Mcp-Protocol-Version", "2025-06-18")
		if resp.Status >= 500 {
			t.Fatalf("answered %d: %s", resp.Status, resp.Body)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && resp.Status != http.StatusNoContent &&
			len(resp.Body) > 0 && !json.Valid(resp.Body) {
			t.Fatalf("answered %d with JSON that is not: %q", resp.Status, resp.Body)
		}
	})
}
