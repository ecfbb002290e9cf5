package demoshop

import (
	"net/http"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// Tool is an MCP tool of the shop as the Company registers it
// (PUT /company/v1/tools/{name}, docs/gateway.md section 5).
type Tool struct {
	Name        string         `json:"-"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
	Annotations map[string]any `json:"annotations,omitempty"`
	Scopes      []string       `json:"scopes"`
	URL         string         `json:"url"`
}

func object(required []string, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required}
}

var str = map[string]any{"type": "string"}

// Tools are the shop's MCP tools, each with its URL on this shop.
func (s *Shop) Tools() []Tool {
	num := map[string]any{"type": "number", "minimum": 0}
	return []Tool{
		{Name: "search_products", Title: "Search products", Scopes: []string{},
			Description: "Searches Stormline's catalog by words of a product's name or kind (jacket, shell, socks).",
			InputSchema: object([]string{"query"}, map[string]any{"query": str}),
			Annotations: map[string]any{"readOnlyHint": true}, URL: s.ToolURL("search_products")},
		{Name: "size_help", Title: "Size help", Scopes: []string{},
			Description: "Recommends a Stormline jacket or shell size from height and chest measurements in centimetres.",
			InputSchema: object([]string{"height_cm", "chest_cm"}, map[string]any{"height_cm": num, "chest_cm": num}),
			Annotations: map[string]any{"readOnlyHint": true}, URL: s.ToolURL("size_help")},
		{Name: "exchange_item", Title: "Exchange an item", Scopes: []string{ScopeRead, ScopeWrite},
			Description: "Exchanges an item of an order for another product of the same kind. Needs the User's approval of the terms (Operations extension).",
			InputSchema: object([]string{"order_id", "item_id", "replacement_sku"},
				map[string]any{"order_id": str, "item_id": str, "replacement_sku": str}),
			Annotations: map[string]any{"destructiveHint": false, "idempotentHint": false}, URL: s.ToolURL("exchange_item")},
	}
}

// The tools: POSTs of the call's arguments, each verified for its own URL.
func (s *Shop) mountTools() {
	s.mux.HandleFunc("POST /tools/search_products", s.tool("search_products", func(w http.ResponseWriter, r *http.Request, _ *verified.Claims) {
		var args struct {
			Query string `json:"query"`
		}
		if readJSON(w, r, &args) {
			writeJSON(w, "application/json", http.StatusOK, map[string]any{"products": searchProducts(args.Query)})
		}
	}))
	s.mux.HandleFunc("POST /tools/size_help", s.tool("size_help", func(w http.ResponseWriter, r *http.Request, _ *verified.Claims) {
		var args struct {
			HeightCM float64 `json:"height_cm"`
			ChestCM  float64 `json:"chest_cm"`
		}
		if !readJSON(w, r, &args) {
			return
		}
		if args.HeightCM < 100 || args.HeightCM > 250 || args.ChestCM < 60 || args.ChestCM > 160 {
			writeJSON(w, "application/json", http.StatusBadRequest,
				problemBody("invalid_request", "height_cm must be 100 to 250 and chest_cm 60 to 160"))
			return
		}
		size, advice := sizeFor(args.HeightCM, args.ChestCM)
		writeJSON(w, "application/json", http.StatusOK, map[string]any{"size": size, "advice": advice})
	}))
	s.mux.HandleFunc("POST /tools/exchange_item", s.tool("exchange_item", func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		var args struct {
			OrderID        string `json:"order_id"`
			ItemID         string `json:"item_id"`
			ReplacementSKU string `json:"replacement_sku"`
		}
		if !readJSON(w, r, &args) {
			return
		}
		if args.OrderID == "" || args.ItemID == "" || args.ReplacementSKU == "" {
			writeJSON(w, "application/json", http.StatusBadRequest,
				problemBody("invalid_request", "order_id, item_id and replacement_sku are required"))
			return
		}
		s.writeOutcome(w, r, s.exchange(c, r.Header.Get("Idempotency-Key"), args.OrderID, args.ItemID, args.ReplacementSKU),
			http.StatusOK)
	}))
}

// tool verifies Poppy-Verified for the tool's URL before h.
func (s *Shop) tool(name string, h func(http.ResponseWriter, *http.Request, *verified.Claims)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c := s.claims(w, r, s.ToolURL(name)); c != nil {
			h(w, r, c)
		}
	}
}
