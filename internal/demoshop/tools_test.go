package demoshop_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/verified"
)

func jsonBody(t *testing.T, v any) io.Reader {
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return bytes.NewReader(raw)
}

// TestTools: search and size help for anyone the platform verified, and
// exchange_item with the API's exchange logic and idempotency.
func TestTools(t *testing.T) {
	t.Parallel()
	r := setup(t)
	signedOut := ada()
	signedOut.Account, signedOut.Scopes = "", []string{}
	search := r.shop.ToolURL("search_products")

	resp := r.do(http.MethodPost, "/tools/search_products", map[string]any{"query": "insulated M"},
		verified.Header, r.token(search, signedOut))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	products := resp.JSON(t)["products"].([]any)
	require.Len(t, products, 1)
	require.Equal(t, "stormline-insulated-m", products[0].(map[string]any)["sku"])

	size := r.shop.ToolURL("size_help")
	resp = r.do(http.MethodPost, "/tools/size_help", map[string]any{"height_cm": 178, "chest_cm": 98},
		verified.Header, r.token(size, signedOut))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "M", resp.JSON(t)["size"])
	resp = r.do(http.MethodPost, "/tools/size_help", map[string]any{"height_cm": "tall"}, verified.Header, r.token(size, signedOut))
	require.Equal(t, http.StatusBadRequest, resp.Status)

	exchange := r.shop.ToolURL("exchange_item")
	args := map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m", "note": "ignored"}
	resp = r.do(http.MethodPost, "/tools/exchange_item", args, verified.Header, r.token(exchange, ada()))
	require.Equal(t, http.StatusForbidden, resp.Status)
	require.Equal(t, "application/poppy-proposal+json", resp.Header.Get("Content-Type"))
	require.Equal(t, "exchange ord_7Hk2 itm_4Qa", resp.JSON(t)["action_key"])

	tok := r.token(exchange, approved(ada(), "op_m", "v1", "user"))
	first := r.do(http.MethodPost, "/tools/exchange_item", args, verified.Header, tok, "Idempotency-Key", "op_m.v1")
	require.Equal(t, http.StatusOK, first.Status, "%s", first.Body)
	again := r.do(http.MethodPost, "/tools/exchange_item", args, verified.Header, tok, "Idempotency-Key", "op_m.v1")
	require.JSONEq(t, string(first.Body), string(again.Body))
	require.Len(t, r.shop.Orders("42")[0].Exchanges, 1)

	// The API sees the same order: the item is exchanged already.
	resp = r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.token(r.shop.APIOrigin(), ada()))
	require.Equal(t, http.StatusConflict, resp.Status)
	require.Len(t, r.shop.Tools(), 3)
}
