package demoshop_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// form is the exchange form's Continue for the spec's jacket.
var form = url.Values{"item_id": {"itm_4Qa"}, "replacement_sku": {"stormline-insulated-m"}}.Encode()

func (r *rig) post(path, token string, headers ...string) *httpResponse {
	r.t.Helper()
	resp := r.do(http.MethodPost, path, form, append([]string{"Content-Type", "application/x-www-form-urlencoded",
		verified.Header, token}, headers...)...)
	return &httpResponse{resp.Status, resp.Header, string(resp.Body)}
}

type httpResponse struct {
	status int
	header http.Header
	body   string
}

// TestWebsite: visitors see no orders; a joined browser sees the
// account's; the exchange form's Continue is proposed when the join
// declared operations and performed once when the platform sends it
// approved.
func TestWebsite(t *testing.T) {
	t.Parallel()
	r := setup(t)
	web := r.shop.WebOrigin()

	home := r.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, home.Status)
	require.Contains(t, string(home.Body), `id="signed-out"`)
	visitor := r.do(http.MethodGet, "/orders", nil)
	require.Equal(t, http.StatusForbidden, visitor.Status)
	require.Contains(t, string(visitor.Body), `<ul id="missing-scopes"><li>orders:read</li></ul>`)

	orders := r.do(http.MethodGet, "/orders", nil, verified.Header, r.token(web, ada()))
	require.Equal(t, http.StatusOK, orders.Status)
	require.Contains(t, string(orders.Body), `href="/orders/ord_7Hk2"`)
	page := r.do(http.MethodGet, "/orders/ord_7Hk2/exchange?item=itm_4Qa", nil, verified.Header, r.token(web, ada()))
	require.Equal(t, http.StatusOK, page.Status)
	require.Regexp(t, `value="stormline-insulated-m" checked`, string(page.Body))
	require.Contains(t, string(page.Body), `<button type="submit">Continue</button>`)

	undeclared := ada()
	undeclared.Extensions = nil
	resp := r.post("/orders/ord_7Hk2/exchange", r.token(web, undeclared))
	require.Equal(t, http.StatusForbidden, resp.status)
	require.Contains(t, resp.header.Get("Content-Type"), "text/html")

	resp = r.post("/orders/ord_7Hk2/exchange", r.token(web, ada()))
	require.Equal(t, http.StatusForbidden, resp.status)
	require.Equal(t, "application/poppy-proposal+json", resp.header.Get("Content-Type"))
	require.Contains(t, resp.body, `"action_key":"exchange ord_7Hk2 itm_4Qa"`)
	require.Empty(t, r.shop.Orders("42")[0].Exchanges)

	tok := r.token(web, approved(ada(), "op_w", "v1", "user"))
	for range 2 {
		resp = r.post("/orders/ord_7Hk2/exchange", tok, "Idempotency-Key", "op_w.v1")
		require.Equal(t, http.StatusSeeOther, resp.status, resp.body)
		require.Equal(t, "/orders/ord_7Hk2", resp.header.Get("Location"))
	}
	require.Len(t, r.shop.Orders("42")[0].Exchanges, 1)
	order := r.do(http.MethodGet, "/orders/ord_7Hk2", nil, verified.Header, r.token(web, ada()))
	require.Contains(t, string(order.Body), `<ul id="exchanges">`)
	require.Contains(t, string(order.Body), "Stormline Insulated Jacket (M)")

	// The API's token is not the website's.
	resp = r.post("/orders/ord_7Hk2/exchange", r.token(r.shop.APIOrigin(), ada()))
	require.Equal(t, http.StatusUnauthorized, resp.status)
}
