package demoshop

import (
	"net/http"
	"strconv"
)

// OpenAPI is the orders API's OpenAPI 3.1 description, to register with
// the gateway and served at /openapi.json. Every operation needs a
// sign-in: orders:read to read, orders:write to change.
func (s *Shop) OpenAPI() map[string]any {
	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
	jsonBody := func(schema any) map[string]any {
		return map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	answer := func(desc string, schema any) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	errs := map[string]any{
		"400": answer("The request is not valid.", ref("Error")),
		"403": answer("A scope is missing, or (Operations extension) the action needs approval or the approval was declined.", ref("Error")),
		"404": answer("No such order or item on this account.", ref("Error")),
		"409": answer("The item was already exchanged or returned, or the replacement is out of stock.", ref("Error")),
	}
	with := func(ok string, okAnswer map[string]any) map[string]any {
		out := map[string]any{ok: okAnswer}
		for k, v := range errs {
			out[k] = v
		}
		return out
	}
	idParam := []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": str}}
	read := []any{map[string]any{"stormline": []string{ScopeRead}}}
	write := []any{map[string]any{"stormline": []string{ScopeRead, ScopeWrite}}}
	money := object([]string{"amount", "currency"}, map[string]any{"amount": str, "currency": str})
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Stormline Outfitters orders", "version": "1",
			"description": "Your Stormline orders: see them, exchange or return an item, change where an order ships."},
		"servers":  []any{map[string]any{"url": s.APIOrigin()}},
		"security": read,
		"components": map[string]any{
			"securitySchemes": map[string]any{"stormline": map[string]any{"type": "oauth2", "flows": map[string]any{
				"authorizationCode": map[string]any{
					"authorizationUrl": s.o.IssuerURL + "/oauth/authorize", "tokenUrl": s.o.IssuerURL + "/oauth/token",
					"scopes": map[string]string{ScopeRead: "See your orders", ScopeWrite: "Exchange or return items"},
				}}}},
			"schemas": map[string]any{
				"Error": object([]string{"error"}, map[string]any{"error": str, "error_description": str}),
				"Money": money,
				"Address": object([]string{"name", "line1", "city", "postal_code", "country"}, map[string]any{
					"name": str, "line1": str, "line2": str, "city": str, "postal_code": str, "country": str}),
				"Item": object([]string{"id", "sku", "name", "price", "status"}, map[string]any{
					"id": str, "sku": str, "name": str, "price": ref("Money"), "status": str}),
				"Exchange": object([]string{"id", "order_id", "item_id", "replacement_sku", "price_difference"}, map[string]any{
					"id": str, "order_id": str, "item_id": str, "replacement_sku": str, "replacement_name": str,
					"price_difference": ref("Money"), "operation_id": str, "approver": str, "created_at": str}),
				"Return": object([]string{"id", "order_id", "item_id", "refund"}, map[string]any{
					"id": str, "order_id": str, "item_id": str, "refund": ref("Money"), "operation_id": str,
					"approver": str, "created_at": str}),
				"Order": object([]string{"id", "status", "items"}, map[string]any{
					"id": str, "status": str, "placed_at": str, "shipping_address": ref("Address"),
					"items":     map[string]any{"type": "array", "items": ref("Item")},
					"exchanges": map[string]any{"type": "array", "items": ref("Exchange")},
					"returns":   map[string]any{"type": "array", "items": ref("Return")}}),
			},
		},
		"paths": map[string]any{
			"/orders": map[string]any{"get": map[string]any{"operationId": "listOrders", "summary": "Your orders",
				"responses": map[string]any{"200": answer("The account's orders.",
					object([]string{"orders"}, map[string]any{"orders": map[string]any{"type": "array", "items": ref("Order")}}))}}},
			"/orders/{id}": map[string]any{"parameters": idParam, "get": map[string]any{"operationId": "getOrder",
				"summary": "An order, with its exchanges and returns", "responses": with("200", answer("The order.", ref("Order")))}},
			"/demo-orders": map[string]any{"post": map[string]any{"operationId": "freshDemoOrder", "security": write,
				"summary": "Demo only: a new copy of the jacket's order for this account, so the story can be run again " +
					"(the account keeps the latest " + strconv.Itoa(MaxFreshOrders) + ")",
				"responses": map[string]any{
					"201": answer("The new order.", ref("Order")),
					"403": answer("A scope is missing.", ref("Error")),
					"404": answer("The account has no demo orders.", ref("Error"))}}},
			"/orders/{id}/exchanges": map[string]any{"parameters": idParam, "post": map[string]any{
				"operationId": "exchangeItem", "security": write,
				"summary":     "Exchange an item for another size or model; needs approval of the terms (Operations extension)",
				"requestBody": jsonBody(object([]string{"item_id", "replacement_sku"}, map[string]any{"item_id": str, "replacement_sku": str})),
				"responses":   with("201", answer("The exchange, performed.", ref("Exchange")))}},
			"/orders/{id}/returns": map[string]any{"parameters": idParam, "post": map[string]any{
				"operationId": "returnItem", "security": write,
				"summary":     "Return an item for a refund; needs approval of the terms (Operations extension)",
				"requestBody": jsonBody(object([]string{"item_id"}, map[string]any{"item_id": str})),
				"responses":   with("201", answer("The return, performed.", ref("Return")))}},
			"/orders/{id}/shipping-address": map[string]any{"parameters": idParam, "put": map[string]any{
				"operationId": "setShippingAddress", "security": write, "summary": "Change where the order ships",
				"requestBody": jsonBody(ref("Address")), "responses": with("200", answer("The order.", ref("Order")))}},
		},
	}
}

func (s *Shop) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, "application/json", http.StatusOK, s.OpenAPI())
}
