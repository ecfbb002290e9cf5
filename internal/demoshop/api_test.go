package demoshop_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

const exchangePath = "/api/orders/ord_7Hk2/exchanges"

var jacket = map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}

// TestVerifiedRefused: every part of the shop refuses a request whose
// Poppy-Verified is missing, forged, expired, of another typ or issuer,
// or made for another part, and performs nothing.
func TestVerifiedRefused(t *testing.T) {
	t.Parallel()
	r := setup(t)
	approval := approved(ada(), "op_1", "rev_1", "user")
	api := r.shop.APIOrigin()
	cases := map[string]string{
		"missing":          "",
		"garbage":          "not-a-jwt",
		"forged":           r.tokenWith(newKey(t), api, approval, time.Now()),
		"forged same kid":  r.tokenWith(companyKey{t: t, key: newKey(t).key, kid: r.key.kid}, api, approval, time.Now()),
		"expired":          r.tokenWith(r.key, api, approval, time.Now().Add(-time.Hour)),
		"aud of the web":   r.token(r.shop.WebOrigin(), approval),
		"aud of a tool":    r.token(r.shop.ToolURL("exchange_item"), approval),
		"aud elsewhere":    r.token("https://elsewhere.test", approval),
		"aud with a slash": r.token(api+"/", approval),
		"typ JWT":          r.signed(typedKey{r.key, "JWT"}, issuer, api, approval),
		"iss of another":   r.signed(r.key, "https://poppyhost.test/t/other", api, approval),
	}
	for name, tok := range cases {
		var headers []string
		if tok != "" {
			headers = []string{verified.Header, tok}
		}
		resp := r.do(http.MethodPost, exchangePath, jacket, append(headers, "Idempotency-Key", "op_1.rev_1")...)
		require.Equal(t, http.StatusUnauthorized, resp.Status, name)
		require.Equal(t, "unverified", resp.JSON(t)["error"], name)
	}
	// A tool refuses the API's token, and a website request refuses any
	// token that is not the website's (a visitor without one is served).
	resp := r.do(http.MethodPost, "/tools/exchange_item", map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa",
		"replacement_sku": "stormline-insulated-m"}, verified.Header, r.token(api, approval), "Idempotency-Key", "op_1.rev_1")
	require.Equal(t, http.StatusUnauthorized, resp.Status)
	resp = r.do(http.MethodGet, "/orders", nil, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusUnauthorized, resp.Status)
	// Two headers are refused, even if one is good.
	req := peers.NewRequest(t, http.MethodGet, r.base+"/api/orders", nil)
	req.Header.Add(verified.Header, r.token(api, ada()))
	req.Header.Add(verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusUnauthorized, peers.Send(t, r.client, req).Status)

	require.Empty(t, r.shop.Orders("42")[0].Exchanges, "nothing was performed")
}

// TestExchangeThroughAPI: the spec's jacket exchange is proposed with its
// exact terms, performed once per Idempotency-Key, and shows on the order.
func TestExchangeThroughAPI(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()

	resp := r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Equal(t, "application/poppy-proposal+json", resp.Header.Get("Content-Type"))
	require.JSONEq(t, `{"action_key": "exchange ord_7Hk2 itm_4Qa",
		"terms": {"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m",
			"price_difference": {"amount": "70.00", "currency": "USD"}},
		"summary": "Exchange the Stormline Jacket (M) on order ord_7Hk2 for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order.",
		"expires_in": 1200}`, string(resp.Body))
	require.Empty(t, r.shop.Orders("42")[0].Exchanges, "a proposal performs nothing")

	tok := r.token(api, approved(ada(), "op_5RT2", "K3JD9", "user"))
	first := r.do(http.MethodPost, exchangePath, jacket, verified.Header, tok, "Idempotency-Key", "op_5RT2.K3JD9")
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	ex := first.JSON(t)
	require.Equal(t, "op_5RT2", ex["operation_id"])
	require.Equal(t, "stormline-insulated-m", ex["replacement_sku"])
	require.Equal(t, map[string]any{"amount": "70.00", "currency": "USD"}, ex["price_difference"])

	// A retry with the same key (the settle job's, say) gets the same
	// answer and performs nothing more.
	again := r.do(http.MethodPost, exchangePath, jacket, verified.Header, tok, "Idempotency-Key", "op_5RT2.K3JD9")
	require.Equal(t, http.StatusCreated, again.Status)
	require.JSONEq(t, string(first.Body), string(again.Body))

	order := r.do(http.MethodGet, "/api/orders/ord_7Hk2", nil, verified.Header, r.token(api, ada())).JSON(t)
	require.Len(t, order["exchanges"], 1)
	require.Equal(t, "exchange requested", order["items"].([]any)[0].(map[string]any)["status"])

	// Another approval for the same item performs nothing: it is done,
	// and the approved terms can no longer be honoured: declined.
	other := r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, approved(ada(), "op_9", "R2", "user")),
		"Idempotency-Key", "op_9.R2")
	require.Equal(t, http.StatusForbidden, other.Status, "%s", other.Body)
	require.Equal(t, "application/poppy-decline+json", other.Header.Get("Content-Type"))
	require.Len(t, r.shop.Orders("42")[0].Exchanges, 1)
}

// TestApprovedTermsPerformed: the shop performs exactly the terms the
// platform states in Poppy-Verified, and declines when they are not the
// ones it would honour now: it never performs terms it recomputed.
func TestApprovedTermsPerformed(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()
	for name, terms := range map[string]string{
		"another price": `{"item_id": "itm_4Qa", "order_id": "ord_7Hk2", "replacement_sku": "stormline-insulated-m",
			"price_difference": {"amount": "7.00", "currency": "USD"}}`,
		"another item": `{"item_id": "itm_8Rc", "order_id": "ord_7Hk2", "replacement_sku": "stormline-insulated-m",
			"price_difference": {"amount": "70.00", "currency": "USD"}}`,
		"none": ``,
	} {
		c := approved(ada(), "op_t", "r-"+strings.ReplaceAll(name, " ", "-"), "user")
		c.Terms = json.RawMessage(terms)
		resp := r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, c),
			"Idempotency-Key", c.OperationID+"."+c.Revision)
		require.Equal(t, http.StatusForbidden, resp.Status, "%s: %s", name, resp.Body)
		require.Equal(t, "application/poppy-decline+json", resp.Header.Get("Content-Type"), name)
		require.Contains(t, resp.JSON(t)["reason"], "can no longer be honoured", name)
	}
	require.Empty(t, r.shop.Orders("42")[0].Exchanges, "nothing was performed")
}

// TestApprovedNeedsItsKey: an approved request without the Idempotency-Key
// of its approval, or with one used for another action, performs nothing.
func TestApprovedNeedsItsKey(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()
	tok := r.token(api, approved(ada(), "op_1", "rev_1", "user"))
	for _, key := range []string{"", "op_1.rev_2", "op_2.rev_1"} {
		resp := r.do(http.MethodPost, exchangePath, jacket, verified.Header, tok, "Idempotency-Key", key)
		require.Equal(t, http.StatusBadRequest, resp.Status, key)
	}
	require.Empty(t, r.shop.Orders("42")[0].Exchanges)

	c := approved(ada(), "op_1", "rev_1", "user")
	c.Terms = returnTerms("ord_7Hk2", "itm_8Rc", "18.00")
	ret := r.do(http.MethodPost, "/api/orders/ord_7Hk2/returns", map[string]any{"item_id": "itm_8Rc"}, verified.Header,
		r.token(api, c), "Idempotency-Key", "op_1.rev_1")
	require.Equal(t, http.StatusCreated, ret.Status, "%s", ret.Body)
	reused := r.do(http.MethodPost, exchangePath, jacket, verified.Header, tok, "Idempotency-Key", "op_1.rev_1")
	require.Equal(t, http.StatusUnprocessableEntity, reused.Status, "%s", reused.Body)
	require.Empty(t, r.shop.Orders("42")[0].Exchanges)
}

// TestAgentApprovalDeclined: an exchange that costs more is declined when
// the Personal Agent approved it, and can then be approved by the User.
func TestAgentApprovalDeclined(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()
	resp := r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, approved(ada(), "op_1", "r1", "agent")),
		"Idempotency-Key", "op_1.r1")
	require.Equal(t, http.StatusForbidden, resp.Status)
	require.Equal(t, "application/poppy-decline+json", resp.Header.Get("Content-Type"))
	decline := resp.JSON(t)
	require.Equal(t, "An exchange that costs more needs the account holder's own approval.", decline["reason"])
	require.Equal(t, []any{map[string]any{"type": "web", "url": "https://stormline.test/orders/ord_7Hk2"}},
		decline["alternative"].(map[string]any)["references"], "the website as people reach it, not the origin")
	require.Empty(t, r.shop.Orders("42")[0].Exchanges)

	resp = r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, approved(ada(), "op_1", "r2", "user")),
		"Idempotency-Key", "op_1.r2")
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
}

// TestReturnThroughAPI: a return is proposed with its refund and
// performed once; an agent's approval is enough for it.
func TestReturnThroughAPI(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()
	body := map[string]any{"item_id": "itm_2Ls"}
	resp := r.do(http.MethodPost, "/api/orders/ord_3Mp8/returns", body, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusForbidden, resp.Status)
	p := resp.JSON(t)
	require.Equal(t, "return ord_3Mp8 itm_2Ls", p["action_key"])
	require.Equal(t, map[string]any{"amount": "120.00", "currency": "USD"}, p["terms"].(map[string]any)["refund"])

	c := approved(ada(), "op_r", "v1", "agent")
	c.Terms = returnTerms("ord_3Mp8", "itm_2Ls", "120.00")
	tok := r.token(api, c)
	for range 2 {
		resp = r.do(http.MethodPost, "/api/orders/ord_3Mp8/returns", body, verified.Header, tok, "Idempotency-Key", "op_r.v1")
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	require.Len(t, r.shop.Orders("42")[1].Returns, 1)
}

// TestAccountsAndScopes: the shop acts for the claim's account within its
// scopes only.
func TestAccountsAndScopes(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()

	signedOut := ada()
	signedOut.Account, signedOut.Scopes = "", []string{}
	readOnly := ada()
	readOnly.Scopes = []string{"orders:read"}
	other := ada()
	other.Account = "43"

	require.Equal(t, http.StatusForbidden, r.do(http.MethodGet, "/api/orders", nil, verified.Header, r.token(api, signedOut)).Status)
	resp := r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, readOnly))
	require.Equal(t, http.StatusForbidden, resp.Status)
	require.Equal(t, "insufficient_scope", resp.JSON(t)["error"])
	require.Empty(t, r.do(http.MethodGet, "/api/orders", nil, verified.Header, r.token(api, other)).JSON(t)["orders"])
	require.Equal(t, http.StatusNotFound, r.do(http.MethodGet, "/api/orders/ord_7Hk2", nil, verified.Header, r.token(api, other)).Status)
	resp = r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, approved(other, "op_1", "r", "user")),
		"Idempotency-Key", "op_1.r")
	require.Equal(t, http.StatusNotFound, resp.Status)

	addr := map[string]any{"name": "Ada", "line1": "1 Rain Lane", "city": "Bergen", "postal_code": "5003", "country": "NO"}
	resp = r.do(http.MethodPut, "/api/orders/ord_7Hk2/shipping-address", addr, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "Bergen", r.shop.Orders("42")[0].ShippingAddress.City)
	for _, bad := range []any{"[1]", `{"name": "x"}`, "{"} {
		resp = r.do(http.MethodPut, "/api/orders/ord_7Hk2/shipping-address", bad, verified.Header, r.token(api, ada()))
		require.Equal(t, http.StatusBadRequest, resp.Status, "%v", bad)
	}
	big := `{"item_id": "` + strings.Repeat("x", 70<<10) + `"}`
	resp = r.do(http.MethodPost, exchangePath, big, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.Status)
}

// TestStalledExchange: the test hook performs the next approved exchange
// but holds its answer until the caller gives up; the retry with the same
// key gets the recorded answer, and the exchange happened once.
func TestStalledExchange(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()
	r.shop.StallNextExchange()
	tok := r.token(api, approved(ada(), "op_s", "v1", "user"))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+exchangePath, jsonBody(t, jacket))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(verified.Header, tok)
	req.Header.Set("Idempotency-Key", "op_s.v1")
	_, err = r.client.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	resp := r.do(http.MethodPost, exchangePath, jacket, verified.Header, tok, "Idempotency-Key", "op_s.v1")
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Len(t, r.shop.Orders("42")[0].Exchanges, 1)
}

// TestOpenAPI: the description names the API's origin and declares the
// scopes the Company has.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	r := setup(t)
	resp := r.do(http.MethodGet, "/openapi.json", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	doc := resp.JSON(t)
	require.Equal(t, "3.1.0", doc["openapi"])
	require.Equal(t, r.shop.APIOrigin(), doc["servers"].([]any)[0].(map[string]any)["url"])
	require.Contains(t, doc["paths"], "/orders/{id}/exchanges")
	require.Equal(t, r.base+"/api", r.shop.APIOrigin())
}

// TestFreshOrder: POST /api/demo-orders gives the signed-in, seeded
// account a new copy of the jacket's order, whose jacket can be exchanged
// after the seeded one was; an account the shop did not seed gets none,
// one without orders:write neither, and an account keeps a bounded number.
func TestFreshOrder(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()

	// The seeded jacket is exchanged: asking again is refused.
	tok := r.token(api, approved(ada(), "op_1", "R1", "user"))
	require.Equal(t, http.StatusCreated, r.do(http.MethodPost, exchangePath, jacket, verified.Header, tok, "Idempotency-Key", "op_1.R1").Status)
	require.Equal(t, http.StatusConflict, r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(api, ada())).Status)

	resp := r.do(http.MethodPost, "/api/demo-orders", map[string]any{}, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	order := resp.JSON(t)
	id, _ := order["id"].(string)
	require.Regexp(t, `^ord_[A-Z2-7]{10}$`, id)
	require.Equal(t, "delivered", order["items"].([]any)[0].(map[string]any)["status"])
	again := r.do(http.MethodPost, "/api/demo-orders", map[string]any{}, verified.Header, r.token(api, ada())).JSON(t)
	require.NotEqual(t, id, again["id"], "each call its own order")

	path := "/api/orders/" + id + "/exchanges"
	proposal := r.do(http.MethodPost, path, jacket, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusForbidden, proposal.Status, "%s", proposal.Body)
	require.Equal(t, "application/poppy-proposal+json", proposal.Header.Get("Content-Type"))
	require.Equal(t, "exchange "+id+" itm_4Qa", proposal.JSON(t)["action_key"])
	c := approved(ada(), "op_2", "R1", "user")
	c.Terms = json.RawMessage(strings.Replace(jacketTerms, "ord_7Hk2", id, 1))
	done := r.do(http.MethodPost, path, jacket, verified.Header, r.token(api, c), "Idempotency-Key", "op_2.R1")
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	require.Equal(t, id, done.JSON(t)["order_id"])

	// Refused: an account the shop has no orders for, and no orders:write.
	stranger := ada()
	stranger.Account = "43"
	resp = r.do(http.MethodPost, "/api/demo-orders", map[string]any{}, verified.Header, r.token(api, stranger))
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
	require.Empty(t, r.shop.Orders("43"))
	reader := ada()
	reader.Scopes = []string{"orders:read"}
	resp = r.do(http.MethodPost, "/api/demo-orders", map[string]any{}, verified.Header, r.token(api, reader))
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Len(t, r.shop.Orders("42"), 4, "the seed and two fresh orders")

	// Bounded: the oldest fresh orders go, the seeded ones stay.
	for range demoshop.MaxFreshOrders + 5 {
		_, ok := r.shop.FreshOrder("42")
		require.True(t, ok)
	}
	orders := r.shop.Orders("42")
	require.Len(t, orders, 2+demoshop.MaxFreshOrders)
	require.Equal(t, "ord_7Hk2", orders[0].ID)
	require.Equal(t, "ord_3Mp8", orders[1].ID)
}
