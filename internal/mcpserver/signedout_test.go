package mcpserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// plainPost sends a JSON-RPC POST to slug's /mcp as an MCP client that is
// not a Personal Agent: no Session header and no access token.
func (g *mcpRig) plainPost(t *testing.T, slug string, body any) *peers.Response {
	t.Helper()
	return g.post(t, slug, "", "", body, "MCP-Protocol-Version", mcpVersion)
}

// TestMCPSignedOutClients: with mcp.signed_out_clients, clients without a
// Session list the tools and call those that need no scope with no token
// at all (spec 7, "serve signed-out requests that use no Session
// claims"); a tool with scopes still sends them to sign in, and the
// per-address limit counts them.
func TestMCPSignedOutClients(t *testing.T) {
	t.Parallel()
	g := setupMCP(t)
	list := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": map[string]any{}}
	// Off by default, even where Sessions may call signed out.
	require.Equal(t, http.StatusUnauthorized, g.plainPost(t, "harbor", list).Status)

	resp := g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/harbor",
		map[string]any{"mcp": map[string]any{"signed_out": true, "signed_out_clients": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	client := mcp.NewClient(&mcp.Implementation{Name: "plain-mcp-client", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.issuer("harbor") + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerOnly{base: g.env.Client.Transport}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 2)
	res := callTool(t, cs, "harbor_hours", map[string]any{})
	require.False(t, res.IsError)
	require.Equal(t, "9 to 5", resultText(t, res))
	c := g.origins["harbor_hours"].Last().Claims
	require.NotNil(t, c)
	require.Empty(t, c.ClientID)
	require.Empty(t, c.SID)
	require.Empty(t, c.Account)

	// A tool with scopes: the challenge names them, nothing is called.
	calls := len(g.origins["harbor_orders"].Received())
	resp = g.plainPost(t, "harbor", toolsCall("harbor_orders", map[string]any{}))
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `scope="orders:read"`)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+g.metadataURL("harbor")+`"`)
	require.Len(t, g.origins["harbor_orders"].Received(), calls)

	// The other Company keeps it off.
	require.Equal(t, http.StatusUnauthorized, g.plainPost(t, "stormline", list).Status)

	// Limited by address (rate_limits.per_address).
	resp = g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/harbor",
		map[string]any{"rate_limits": map[string]any{"per_address": 3}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	limited := false
	for range 6 {
		if g.plainPost(t, "harbor", list).Status == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	require.True(t, limited, "signed-out clients are limited by address")
}

// TestOperationsMCPWithoutASession: a client with no Session has no
// Personal Agent to approve through: an origin's proposal becomes an
// ordinary tool error and nothing is recorded or performed.
func TestOperationsMCPWithoutASession(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	resp := g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/harbor",
		map[string]any{"mcp": map[string]any{"signed_out": true, "signed_out_clients": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	r := readToolResult(t, g.plainPost(t, "harbor", toolsCall("exchange_item", jacketArgs)))
	require.True(t, r.Result.IsError)
	require.Contains(t, r.Result.Content[0].Text, "this client has no Poppy Session")
	require.Nil(t, r.Result.StructuredContent)
	require.Zero(t, xs["harbor"].Performed.Load())
	list := g.env.Admin(t, http.MethodGet, "/admin/v1/companies/harbor/operations", nil)
	require.NotContains(t, string(list.Body), `"interface":"mcp"`)
	require.Empty(t, g.origins["harbor/exchange_item"].Last().Claims.SID)
}
