package demoagent_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/demoshop"
)

// startShop serves the demo shop as shop.test, registers its orders API
// with the Company API key, and gives account ada its orders.
func (d *demo) startShop(t *testing.T, key string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	shop, err := demoshop.New(demoshop.Options{BaseURL: "https://shop.test:" + port,
		Issuer: d.env.PublicURL("/t/" + slug), Client: d.env.Client})
	require.NoError(t, err)
	t.Cleanup(shop.Close)
	srv := httptest.NewUnstartedServer(shop)
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = d.env.CA.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	d.env.Hosts.Add("shop.test")
	d.shop = shop

	// A short timeout, so a stalled exchange settles quickly.
	reg := shop.APIRegistration()
	reg["timeout_seconds"] = 1
	resp := d.env.Do(t, http.MethodPut, d.env.PublicURL("/company/v1/apis/orders"), reg, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	resp = d.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
		map[string]any{"username": "ada", "password": adaPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	d.ada = int64(resp.JSON(t)["id"].(float64))
	shop.Seed(strconv.FormatInt(d.ada, 10))
}

// signIn signs the test Personal Agent in as ada with both order scopes;
// its client metadata declares the Operations extension (docs/operations-extension.md 3).
func (d *demo) signIn(t *testing.T) {
	t.Helper()
	meta := d.agent.Metadata()
	meta["extensions"] = map[string]any{"operations": map[string]any{"version": "3"}}
	d.agent.SetMetadata(meta)
	d.token = d.env.SignIn(t, d.agent, d.env.PublicURL("/t/"+slug), "ada", adaPassword,
		[]string{"orders:read", "orders:write"}, "").AccessToken
}

func approvalMessage(id string, op map[string]any, approver string) map[string]any {
	return map[string]any{"message": map[string]any{"id": id, "author": map[string]any{"type": "agent"},
		"text": "The user approved the exchange.",
		"extensions": map[string]any{"operations": map[string]any{"approval": map[string]any{
			"operation_id": op["operation_id"], "revision": op["revision"], "approver": approver,
			"approved_at": time.Now().Unix(), "input_type": "tap"}}}}}
}

func messageText(text string) func(map[string]any) bool {
	return func(e map[string]any) bool {
		return companyMessage(e) && e["message"].(map[string]any)["text"] == text
	}
}

// TestJacketExchangeInConversation: signed in, the demo agent proposes the
// spec's jacket exchange with the shop's own terms; the User's approval
// is performed once at the shop through the orders API, and the agent
// says it is done. The same approval in a later message adds nothing.
func TestJacketExchangeInConversation(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.signIn(t)

	rd := d.pa(t, http.MethodPost, "?wait=0", message("m1", "I want to exchange my jacket"), http.StatusCreated)
	id, cursor := rd["conversation_id"].(string), rd["cursor"].(string)
	ev, cursor := d.await(t, id, cursor, companyMessage)
	msg := ev["message"].(map[string]any)
	require.Equal(t, demoagent.ExchangeProposed, msg["text"])
	op := msg["extensions"].(map[string]any)["operations"].(map[string]any)["operation"].(map[string]any)
	want, ok := demoshop.ExchangeProposal("ord_7Hk2", "itm_4Qa", demoshop.JacketSKU, demoshop.InsulatedJacketSKU)
	require.True(t, ok)
	terms, err := json.Marshal(want.Terms)
	require.NoError(t, err)
	got, err := json.Marshal(op["terms"])
	require.NoError(t, err)
	require.JSONEq(t, string(terms), string(got))
	require.Equal(t, want.Summary, op["summary"])
	require.NotContains(t, op, "perform", "the request that performs it is the Company's own")

	d.pa(t, http.MethodPost, "/"+id+"/messages", approvalMessage("m2", op, "user"), http.StatusAccepted)
	_, cursor = d.await(t, id, cursor, messageText(demoagent.ExchangeDone))
	ada := strconv.FormatInt(d.ada, 10)
	exchanges := d.shop.Orders(ada)[0].Exchanges
	require.Len(t, exchanges, 1)
	require.Equal(t, op["operation_id"], exchanges[0].OperationID)
	require.Equal(t, "user", exchanges[0].Approver)

	// The same approval again, then a plain question: the answer to the
	// question comes, and nothing more was performed or told.
	d.pa(t, http.MethodPost, "/"+id+"/messages", approvalMessage("m3", op, "user"), http.StatusAccepted)
	d.pa(t, http.MethodPost, "/"+id+"/messages", message("m4", "Hello again"), http.StatusAccepted)
	ev, _ = d.await(t, id, cursor, companyMessage)
	require.Equal(t, demoagent.HelpText, ev["message"].(map[string]any)["text"])
	require.Len(t, d.shop.Orders(ada)[0].Exchanges, 1)
}

// TestJacketExchangeAgentApprovalDeclined: the shop declines an agent's
// approval of an exchange that costs more; the demo agent says so with
// the declined notice, and nothing is exchanged.
func TestJacketExchangeAgentApprovalDeclined(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.signIn(t)

	rd := d.pa(t, http.MethodPost, "?wait=0", message("m1", "Can I exchange the jacket?"), http.StatusCreated)
	id, cursor := rd["conversation_id"].(string), rd["cursor"].(string)
	ev, cursor := d.await(t, id, cursor, companyMessage)
	op := ev["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)["operation"].(map[string]any)

	d.pa(t, http.MethodPost, "/"+id+"/messages", approvalMessage("m2", op, "agent"), http.StatusAccepted)
	ev, _ = d.await(t, id, cursor, companyMessage)
	msg := ev["message"].(map[string]any)
	require.Equal(t, demoagent.ExchangeDeclined+" An exchange that costs more needs the account holder's own approval.", msg["text"])
	declined := msg["extensions"].(map[string]any)["operations"].(map[string]any)["declined"].(map[string]any)
	require.Equal(t, op["operation_id"], declined["operation_id"])
	require.Equal(t, op["revision"], declined["revision"])
	require.Empty(t, d.shop.Orders(strconv.FormatInt(d.ada, 10))[0].Exchanges)
}

// TestJacketExchangeAfterATimeout: the shop performs the approved
// exchange but its answer times out; the agent says it is going through,
// the platform's settle job learns the outcome with the same
// Idempotency-Key, and the agent says it is done. One exchange.
func TestJacketExchangeAfterATimeout(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.signIn(t)

	rd := d.pa(t, http.MethodPost, "?wait=0", message("m1", "exchange my jacket please"), http.StatusCreated)
	id, cursor := rd["conversation_id"].(string), rd["cursor"].(string)
	ev, cursor := d.await(t, id, cursor, companyMessage)
	op := ev["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)["operation"].(map[string]any)

	d.shop.StallNextExchange()
	d.pa(t, http.MethodPost, "/"+id+"/messages", approvalMessage("m2", op, "user"), http.StatusAccepted)
	_, cursor = d.await(t, id, cursor, messageText(demoagent.ExchangeGoing))
	d.await(t, id, cursor, messageText(demoagent.ExchangeDone))
	require.Len(t, d.shop.Orders(strconv.FormatInt(d.ada, 10))[0].Exchanges, 1)
}

// TestJacketExchangeOfANamedOrder: a message that names an order (a fresh
// copy of the jacket's order, docs/demo.md) gets the exchange of that
// order's jacket proposed and performed; the seeded order is untouched.
func TestJacketExchangeOfANamedOrder(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.signIn(t)
	ada := strconv.FormatInt(d.ada, 10)
	fresh, ok := d.shop.FreshOrder(ada)
	require.True(t, ok)

	rd := d.pa(t, http.MethodPost, "?wait=0", message("m1", "Please exchange the jacket on order "+fresh.ID+"."), http.StatusCreated)
	id, cursor := rd["conversation_id"].(string), rd["cursor"].(string)
	ev, cursor := d.await(t, id, cursor, companyMessage)
	op := ev["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)["operation"].(map[string]any)
	require.Equal(t, fresh.ID, op["terms"].(map[string]any)["order_id"])

	d.pa(t, http.MethodPost, "/"+id+"/messages", approvalMessage("m2", op, "user"), http.StatusAccepted)
	d.await(t, id, cursor, messageText(demoagent.ExchangeDone))
	for _, o := range d.shop.Orders(ada) {
		if o.ID == fresh.ID {
			require.Len(t, o.Exchanges, 1)
			require.Equal(t, op["operation_id"], o.Exchanges[0].OperationID)
		} else {
			require.Empty(t, o.Exchanges, "order %s", o.ID)
		}
	}
}
