package demoshop_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// platformRig is the shop behind a real platform, registered as dev mode
// registers it, with a Personal Agent that declares operations and ada's
// sign-ins for the API and for the MCP server.
type platformRig struct {
	env      *testkit.Env
	agent    *peers.Agent
	shop     *demoshop.Shop
	issuer   string
	ada      string
	apiToken string
	mcpToken string
}

func setupPlatform(t *testing.T) *platformRig {
	t.Helper()
	env := testkit.Setup(t)
	r := &platformRig{env: env, agent: env.StartAgent(t, "agent.test"), issuer: env.PublicURL("/t/stormline")}
	meta := r.agent.Metadata()
	meta["extensions"] = map[string]any{"operations": map[string]any{"version": "3"}}
	r.agent.SetMetadata(meta)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	shop, err := demoshop.New(demoshop.Options{BaseURL: "https://shop.test:" + port, Issuer: r.issuer, Client: env.Client})
	require.NoError(t, err)
	t.Cleanup(shop.Close)
	srv := httptest.NewUnstartedServer(shop)
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = env.CA.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	env.Hosts.Add("shop.test")
	r.shop = shop

	env.CreateCompany(t, map[string]any{"slug": "stormline",
		"organization": map[string]any{"name": "Stormline Outfitters", "domain": "stormline.example"},
		"auth":         map[string]any{"scopes": map[string]any{"orders:read": "See your orders", "orders:write": "Change your orders"}},
		"operations":   map[string]any{"enabled": true, "web": true},
		"web":          map[string]any{"origin": shop.WebOrigin(), "browser_join": true},
		"mcp":          map[string]any{"signed_out": true}})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/api-keys", map[string]any{"name": "shop"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	key := "Bearer " + resp.JSON(t)["key"].(string)
	resp = env.Do(t, http.MethodPut, env.PublicURL("/company/v1/apis/orders"), shop.APIRegistration(), "Authorization", key)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	for _, tool := range shop.Tools() {
		resp = env.Do(t, http.MethodPut, env.PublicURL("/company/v1/tools/"+tool.Name), tool, "Authorization", key)
		require.Equal(t, http.StatusCreated, resp.Status, "%s: %s", tool.Name, resp.Body)
	}
	resp = env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/accounts",
		map[string]any{"username": "ada", "password": "correct horse battery staple"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	r.ada = strconv.FormatInt(int64(resp.JSON(t)["id"].(float64)), 10)
	shop.Seed(r.ada)

	scopes := []string{"orders:read", "orders:write"}
	r.apiToken = env.SignIn(t, r.agent, r.issuer, "ada", "correct horse battery staple", scopes, "").AccessToken
	r.mcpToken = env.SignIn(t, r.agent, r.issuer, "ada", "correct horse battery staple", scopes, r.issuer+"/mcp").AccessToken
	return r
}

// send sends a Personal Agent request to url, signed for the Company with
// the access token, declaring operations; headers are name, value pairs.
func (r *platformRig) send(t *testing.T, method, url, token string, body any, headers ...string) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, method, url, body)
	req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r.agent.Sign(t, req, peers.SessionClaims{Aud: r.issuer, SID: "ses_demo", AccessToken: token}, peers.SessionOptions{})
	return peers.Send(t, r.env.Client, req)
}

// operation reads an operation from a body's operation member.
func operation(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var body struct {
		Operation map[string]any `json:"operation"`
	}
	require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
	require.NotEmpty(t, body.Operation["operation_id"], "%s", raw)
	return body.Operation
}

// TestThroughThePlatform: the shop registers with a real platform as dev
// mode registers it, and the jacket exchange goes through the API gateway
// and the hosted MCP server as the Operations extension says, each
// performed once. The website is the shop's, proxied.
func TestThroughThePlatform(t *testing.T) {
	t.Parallel()
	r := setupPlatform(t)
	api := r.issuer + "/api/orders/orders/ord_7Hk2/exchanges"

	resp := r.send(t, http.MethodPost, api, r.apiToken, jacket)
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Equal(t, "approval_required", resp.JSON(t)["error"])
	op := operation(t, resp.Body)
	require.Equal(t, map[string]any{"amount": "70.00", "currency": "USD"}, op["terms"].(map[string]any)["price_difference"])

	approval := fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=1791487260, input_type="tap"`,
		op["operation_id"], op["revision"])
	first := r.send(t, http.MethodPost, api, r.apiToken, jacket, "Poppy-Approval", approval)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	again := r.send(t, http.MethodPost, api, r.apiToken, jacket, "Poppy-Approval", approval)
	require.Equal(t, http.StatusCreated, again.Status)
	require.JSONEq(t, string(first.Body), string(again.Body))
	order := r.send(t, http.MethodGet, r.issuer+"/api/orders/orders/ord_7Hk2", r.apiToken, nil).JSON(t)
	require.Len(t, order["exchanges"], 1)
	require.Equal(t, op["operation_id"], order["exchanges"].([]any)[0].(map[string]any)["operation_id"])

	// MCP: the rain shell for another size, through exchange_item.
	mcp := r.issuer + "/mcp"
	args := map[string]any{"order_id": "ord_3Mp8", "item_id": "itm_2Ls", "replacement_sku": "rain-shell-m"}
	call := func(meta map[string]any) map[string]any {
		params := map[string]any{"name": "exchange_item", "arguments": args}
		if meta != nil {
			params["_meta"] = meta
		}
		resp := r.send(t, http.MethodPost, mcp, r.mcpToken, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": params}, "Accept", "application/json, text/event-stream", "MCP-Protocol-Version", "2025-06-18")
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		return resp.JSON(t)["result"].(map[string]any)
	}
	result := call(nil)
	require.Equal(t, true, result["isError"])
	raw, err := json.Marshal(result["structuredContent"])
	require.NoError(t, err)
	op = operation(t, raw)
	require.Equal(t, map[string]any{"amount": "0.00", "currency": "USD"}, op["terms"].(map[string]any)["price_difference"])
	meta := map[string]any{"personalagentprotocol.org/approval": map[string]any{"operation_id": op["operation_id"],
		"revision": op["revision"], "approver": "agent", "approved_at": 1791487260}}
	for range 2 {
		result = call(meta)
		require.NotEqual(t, true, result["isError"], "%v", result)
		require.Equal(t, "rain-shell-m", result["structuredContent"].(map[string]any)["replacement_sku"])
	}
	require.Len(t, r.shop.Orders(r.ada)[1].Exchanges, 1)

	// The website is the shop's: a visitor is asked to sign in.
	resp = r.env.Do(t, http.MethodGet, r.env.URL("stormline.example", "/orders"), nil)
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Contains(t, string(resp.Body), `<ul id="missing-scopes"><li>orders:read</li></ul>`)
}
