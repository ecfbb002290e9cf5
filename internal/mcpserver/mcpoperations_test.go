package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The Operations extension at the hosted MCP server (extension 4, 6, 7,
// "MCP"): the jacket exchange as a tool.

const mcpVersion = "2025-06-18"

// toolResult is a tools/call answer as JSON-RPC carries it.
type toolResult struct {
	Result struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func readToolResult(t *testing.T, resp *peers.Response) toolResult {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var r toolResult
	require.NoError(t, json.Unmarshal(resp.Body, &r), "%s", resp.Body)
	require.Nil(t, r.Error, "%s", resp.Body)
	return r
}

// toolOperation returns the operation of an approval_required tool result.
func toolOperation(t *testing.T, r toolResult) opstest.Op {
	t.Helper()
	require.True(t, r.Result.IsError, "an operation is an error result")
	var sc opstest.Op
	require.NoError(t, json.Unmarshal(r.Result.StructuredContent, &sc))
	require.NotEmpty(t, sc.Operation.OperationID)
	require.NotEmpty(t, sc.Operation.Revision)
	require.NotEmpty(t, sc.Operation.ExpiresAt)
	return sc
}

// approvedCall is a tools/call with the approval of op in _meta.
func approvedCall(name string, args any, op opstest.Op, extra map[string]any) map[string]any {
	a := map[string]any{"operation_id": op.Operation.OperationID, "revision": op.Operation.Revision,
		"approver": "user", "approved_at": 1791487260, "input_type": "tap"}
	for k, v := range extra {
		a[k] = v
	}
	call := toolsCall(name, args)
	call["params"].(map[string]any)["_meta"] = map[string]any{"personalagentprotocol.org/approval": a}
	return call
}

// setupMCPOperations is setupMCP with operations on at stormline and
// harbor and an exchange_item tool at each on an exchange origin. Harbor's
// needs no scope, so signed-out Sessions may call it.
func setupMCPOperations(t *testing.T) (*mcpRig, map[string]*opstest.ExchangeOrigin) {
	t.Helper()
	g := setupMCP(t)
	xs := map[string]*opstest.ExchangeOrigin{}
	for slug, scopes := range map[string][]string{"stormline": {"orders:write"}, "harbor": nil} {
		resp := g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+slug,
			map[string]any{"operations": map[string]any{"enabled": true}})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		o := g.env.StartOrigin(t, "origin.test", g.issuer(slug), g.issuer(slug))
		x := opstest.NewExchangeOrigin()
		o.Handle(http.MethodPost, "/", x.Serve)
		g.putTool(t, slug, registry.Tool{Name: "exchange_item", Description: "Exchanges an item", Scopes: scopes,
			URL: o.BaseURL(), InputSchema: json.RawMessage(`{"type":"object"}`)})
		g.origins[slug+"/exchange_item"] = o
		xs[slug] = x
	}
	resp := g.env.Admin(t, http.MethodPost, "/admin/v1/companies/harbor/accounts",
		map[string]any{"username": "ada", "password": mcpPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return g, xs
}

var jacketArgs = map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}

func TestOperationsMCPJacketExchange(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	origin := g.origins["stormline/exchange_item"]
	call := func(sid string, body any) toolResult {
		return readToolResult(t, g.post(t, "stormline", sid, token, body,
			"MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares))
	}

	// Required: an error result with the operation and text naming it.
	r := call(newSID(), toolsCall("exchange_item", jacketArgs))
	op := toolOperation(t, r)
	require.Contains(t, r.Result.Content[0].Text, "This needs approval: Exchange the jacket for stormline-insulated-m")
	require.Equal(t, "Exchange the jacket for stormline-insulated-m, $70.00 more.", op.Operation.Summary)
	require.Zero(t, xs["stormline"].Performed.Load())
	// The origin learns the request declared the extension (by its header).
	require.Equal(t, "3", origin.Last().Claims.Extensions["operations"])

	// Approved in another Session, arguments in another order, an unknown
	// member in the approval.
	done := call(newSID(), approvedCall("exchange_item",
		map[string]any{"replacement_sku": "stormline-insulated-m", "item_id": "itm_4Qa"}, op, map[string]any{"future": 1}))
	require.False(t, done.Result.IsError, "%s", done.Result.Content)
	require.JSONEq(t, `{"exchange_id": "ex_1", "operation_id": "`+op.Operation.OperationID+`", "approver": "user"}`,
		string(done.Result.StructuredContent))
	require.Equal(t, int32(1), xs["stormline"].Performed.Load())
	last := origin.Last()
	require.Equal(t, op.Operation.OperationID+"."+op.Operation.Revision, last.Header.Get("Idempotency-Key"))
	require.Equal(t, "exchange_item", last.Claims.Tool)
	require.Equal(t, op.Operation.Revision, last.Claims.Revision)
	require.Equal(t, "user", last.Claims.Approver)

	// Retried: the same result, the origin not called again.
	calls := len(origin.Received())
	retry := call(newSID(), approvedCall("exchange_item", jacketArgs, op, nil))
	require.Equal(t, done.Result, retry.Result)
	require.Len(t, origin.Received(), calls)

	// The Company's audit list shows it performed at the MCP server.
	list := g.env.Admin(t, http.MethodGet, "/admin/v1/companies/stormline/operations", nil)
	require.Contains(t, string(list.Body), `"interface":"mcp"`)
	require.Contains(t, string(list.Body), `"status":"performed"`)
}

func TestOperationsMCPChecks(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	post := func(body any, headers ...string) *peers.Response {
		return g.post(t, "stormline", newSID(), token, body, append([]string{"MCP-Protocol-Version", mcpVersion}, headers...)...)
	}
	call := func(body any) toolResult { return readToolResult(t, post(body, "Poppy-Extensions", opstest.Declares)) }

	t.Run("undeclared gets an ordinary tool error", func(t *testing.T) {
		r := readToolResult(t, post(toolsCall("exchange_item", jacketArgs)))
		require.True(t, r.Result.IsError)
		require.Contains(t, r.Result.Content[0].Text, "Operations extension")
		require.Empty(t, r.Result.StructuredContent, "no operation without the extension")
	})

	op := toolOperation(t, call(toolsCall("exchange_item", jacketArgs)))

	t.Run("missing approver", func(t *testing.T) {
		body := toolsCall("exchange_item", jacketArgs)
		body["params"].(map[string]any)["_meta"] = map[string]any{"personalagentprotocol.org/approval": map[string]any{
			"operation_id": op.Operation.OperationID, "revision": op.Operation.Revision}}
		r := call(body)
		require.True(t, r.Result.IsError)
		require.Contains(t, r.Result.Content[0].Text, "approver")
		require.Zero(t, xs["stormline"].Performed.Load())
	})

	t.Run("other arguments get a new revision, never the approved one", func(t *testing.T) {
		r := call(approvedCall("exchange_item", map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-l"}, op, nil))
		other := toolOperation(t, r)
		require.Equal(t, op.Operation.OperationID, other.Operation.OperationID, "the same action")
		require.NotEqual(t, op.Operation.Revision, other.Operation.Revision)
		require.Zero(t, xs["stormline"].Performed.Load())
	})

	t.Run("an approval opstest.Declares the extension", func(t *testing.T) {
		// No Poppy-Extensions: the approval alone declares it, so a stale
		// one gets a new revision rather than a tool error.
		r := readToolResult(t, post(approvedCall("exchange_item",
			map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-s"}, op, nil)))
		other := toolOperation(t, r)
		require.Equal(t, op.Operation.OperationID, other.Operation.OperationID)
		require.NotEqual(t, op.Operation.Revision, other.Operation.Revision)
	})

	t.Run("another tool's approval is not this one's", func(t *testing.T) {
		g.putTool(t, "stormline", registry.Tool{Name: "gift_wrap", Description: "Wraps an order", Scopes: []string{"orders:write"},
			URL: g.origins["stormline/exchange_item"].BaseURL(), InputSchema: json.RawMessage(`{"type":"object"}`)})
		r := call(approvedCall("gift_wrap", jacketArgs, op, nil))
		// Handled as a call without approval: gift_wrap's own operation.
		require.NotEqual(t, op.Operation.OperationID, toolOperation(t, r).Operation.OperationID)
		require.Zero(t, xs["stormline"].Performed.Load())
	})

	t.Run("declined at perform time, and never accepted again", func(t *testing.T) {
		fresh := toolOperation(t, call(toolsCall("exchange_item", jacketArgs)))
		xs["stormline"].Decline.Store(true)
		r := call(approvedCall("exchange_item", jacketArgs, fresh, nil))
		require.True(t, r.Result.IsError)
		require.Contains(t, r.Result.Content[0].Text, "Only the account holder can exchange this order.")
		require.JSONEq(t, `{"error": "approval_declined", "operation_id": "`+fresh.Operation.OperationID+`",
			"revision": "`+fresh.Operation.Revision+`", "reason": "Only the account holder can exchange this order."}`,
			string(r.Result.StructuredContent))
		xs["stormline"].Decline.Store(false)
		again := toolOperation(t, call(approvedCall("exchange_item", jacketArgs, fresh, nil)))
		require.NotEqual(t, fresh.Operation.Revision, again.Operation.Revision)
		require.Zero(t, xs["stormline"].Performed.Load())
	})
}

func TestOperationsMCPSignedOutAndSignedIn(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.env.SignIn(t, g.agent, g.issuer("harbor"), "ada", mcpPassword, []string{"orders:read"}, g.issuer("harbor")+"/mcp").AccessToken
	post := func(tok string, body any) *peers.Response {
		return g.post(t, "harbor", newSID(), tok, body, "MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares)
	}

	// Proposed signed in: the account's. A signed-out Session of the same
	// agent and User gets a challenge for the account.
	account := toolOperation(t, readToolResult(t, post(token, toolsCall("exchange_item", jacketArgs))))
	resp := post("", approvedCall("exchange_item", jacketArgs, account, nil))
	require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+g.metadataURL("harbor")+`"`)
	require.Zero(t, xs["harbor"].Performed.Load())

	// Proposed signed out: approvable only signed out. Signed in it is
	// handled as a call without approval: the account's own operation.
	signedOut := toolOperation(t, readToolResult(t, post("", toolsCall("exchange_item", jacketArgs))))
	require.NotEqual(t, account.Operation.OperationID, signedOut.Operation.OperationID)
	r := readToolResult(t, post(token, approvedCall("exchange_item", jacketArgs, signedOut, nil)))
	require.Equal(t, account.Operation.OperationID, toolOperation(t, r).Operation.OperationID)
	require.Zero(t, xs["harbor"].Performed.Load())

	// Signed out, the signed-out operation is performed.
	done := readToolResult(t, post("", approvedCall("exchange_item", jacketArgs, signedOut, nil)))
	require.False(t, done.Result.IsError, "%s", done.Result.Content)
	require.Equal(t, int32(1), xs["harbor"].Performed.Load())
	require.Empty(t, g.origins["harbor/exchange_item"].Last().Claims.Account)
}

func TestOperationsMCPConcurrentRetriesPerformOnce(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	post := func(body any) toolResult {
		return readToolResult(t, g.post(t, "stormline", newSID(), token, body,
			"MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares))
	}
	op := toolOperation(t, post(toolsCall("exchange_item", jacketArgs)))
	var wg sync.WaitGroup
	results := make([]*peers.Response, 20)
	for i := range results {
		wg.Go(func() {
			results[i] = g.post(t, "stormline", newSID(), token, approvedCall("exchange_item", jacketArgs, op, nil),
				"MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares)
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), xs["stormline"].Performed.Load())
	for _, r := range results {
		if r.Status == http.StatusServiceUnavailable {
			// Still performing: not a failure; the same call again later.
			require.Equal(t, "5", r.Header.Get("Retry-After"))
			require.Equal(t, "unavailable", r.JSON(t)["error"])
			continue
		}
		require.Contains(t, string(readToolResult(t, r).Result.StructuredContent), `"exchange_id":"ex_1"`)
	}
}

// TestOperationsMCPOriginTimeoutSettles: a tool's approved call that times
// out is performing, not failed, to every retry, until the settle job
// learns its outcome with the same Idempotency-Key.
func TestOperationsMCPOriginTimeoutSettles(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	origin := g.origins["stormline/exchange_item"]
	g.putTool(t, "stormline", registry.Tool{Name: "exchange_item", Description: "Exchanges an item", Scopes: []string{"orders:write"},
		URL: origin.BaseURL(), InputSchema: json.RawMessage(`{"type":"object"}`), TimeoutSeconds: 1})
	require.NoError(t, g.env.Platform.Jobs.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.env.Platform.Jobs.Stop(ctx)
	})
	var slow atomic.Bool
	slow.Store(true)
	origin.Handle(http.MethodPost, "/", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" && slow.CompareAndSwap(true, false) {
			// Performed, but the answer comes too late.
			xs["stormline"].Serve(httptest.NewRecorder(), req)
			time.Sleep(1500 * time.Millisecond)
			return
		}
		xs["stormline"].Serve(w, req)
	})
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	post := func(body any) toolResult {
		return readToolResult(t, g.post(t, "stormline", newSID(), token, body,
			"MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares))
	}
	op := toolOperation(t, post(toolsCall("exchange_item", jacketArgs)))
	raw := func(body any) *peers.Response {
		return g.post(t, "stormline", newSID(), token, body, "MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares)
	}
	// Performing, or unknown: 503 with Retry-After as at an API, never a
	// failure, to the call, its retries and a new call for the action.
	for _, body := range []any{approvedCall("exchange_item", jacketArgs, op, nil), approvedCall("exchange_item", jacketArgs, op, nil),
		toolsCall("exchange_item", jacketArgs)} {
		resp := raw(body)
		require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s", resp.Body)
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
	}

	require.Eventually(t, func() bool {
		resp := raw(approvedCall("exchange_item", jacketArgs, op, nil))
		return resp.Status == http.StatusOK && !readToolResult(t, resp).Result.IsError
	}, 30*time.Second, 500*time.Millisecond, "the settle job finishes the operation")
	require.Equal(t, int32(1), xs["stormline"].Performed.Load(), "performed once, by the first call")
	keys := map[string]bool{}
	for _, c := range origin.Received() {
		if c.Claims != nil && c.Claims.OperationID != "" {
			keys[c.Header.Get("Idempotency-Key")] = true
		}
	}
	require.Equal(t, map[string]bool{op.Operation.OperationID + "." + op.Operation.Revision: true}, keys)
}

// TestOperationsMCPBatchWithApproval: an approved call's answer may be 503
// (extension 7), which would stand for a whole JSON-RPC batch and drop the
// results of calls that ran. A batch with an approval is refused before
// anything runs.
func TestOperationsMCPBatchWithApproval(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	origin := g.origins["stormline/exchange_item"]
	headers := []string{"MCP-Protocol-Version", mcpVersion, "Poppy-Extensions", opstest.Declares}
	op := toolOperation(t, readToolResult(t, g.post(t, "stormline", newSID(), token,
		toolsCall("exchange_item", jacketArgs), headers...)))
	calls := len(origin.Received())

	other := toolsCall("exchange_item", map[string]any{"item_id": "itm_9", "replacement_sku": "x"})
	other["id"] = 2
	batch := []any{other, approvedCall("exchange_item", jacketArgs, op, nil)}
	resp := g.post(t, "stormline", newSID(), token, batch, headers...)
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Contains(t, string(resp.Body), "not in a JSON-RPC batch")
	require.Len(t, origin.Received(), calls, "nothing in the batch ran")
	require.Zero(t, xs["stormline"].Performed.Load())
}
