package demoshop

import (
	"html/template"
	"net/http"
	"slices"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// The website, at {base} (web.origin), reached through the platform's
// website proxy (docs/website.md section 6). A request without
// Poppy-Verified is an ordinary visitor, who has no login here; one with
// a Poppy-Verified that fails a check is refused, since the platform
// removes any a browser sends. Pages that act for the account need its
// scopes, and say which are missing (spec 6, 5.4).
func (s *Shop) mountWebsite() {
	s.mux.HandleFunc("GET /{$}", s.web(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		s.render(w, http.StatusOK, "home", page{Title: "Stormline Outfitters", Claims: c})
	}))
	s.mux.HandleFunc("GET /orders", s.web(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		if s.needPageScope(w, c, ScopeRead) {
			return
		}
		s.render(w, http.StatusOK, "orders", page{Title: "Your orders", Claims: c, Orders: s.Orders(c.Account)})
	}))
	s.mux.HandleFunc("GET /orders/{id}", s.web(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		if s.needPageScope(w, c, ScopeRead) {
			return
		}
		o := s.findOrder(c.Account, r.PathValue("id"))
		if o == nil {
			s.render(w, http.StatusNotFound, "message", page{Title: "Order not found", Message: "There is no such order on this account."})
			return
		}
		s.render(w, http.StatusOK, "order", page{Title: "Order " + o.ID, Claims: c, Order: o})
	}))
	s.mux.HandleFunc("GET /orders/{id}/exchange", s.web(func(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
		if s.needPageScope(w, c, ScopeRead, ScopeWrite) {
			return
		}
		o := s.findOrder(c.Account, r.PathValue("id"))
		var item *Item
		if o != nil {
			item = o.item(r.URL.Query().Get("item"))
		}
		if item == nil || item.Status != "delivered" {
			s.render(w, http.StatusNotFound, "message", page{Title: "Nothing to exchange",
				Message: "This item is not on the order, or it was already exchanged or returned."})
			return
		}
		current, _ := findProduct(item.SKU)
		var options []Product
		for _, p := range catalog {
			if p.Kind == current.Kind && p.SKU != current.SKU && p.InStock {
				options = append(options, p)
			}
		}
		// The same size in another model first: the spec's insulated jacket.
		slices.SortStableFunc(options, func(a, b Product) int {
			return boolRank(a.Size != current.Size) - boolRank(b.Size != current.Size)
		})
		s.render(w, http.StatusOK, "exchange", page{Title: "Exchange " + item.Name, Claims: c, Order: o, Item: item, Options: options})
	}))
	s.mux.HandleFunc("POST /orders/{id}/exchange", s.web(s.webExchange))
}

// webExchange is the exchange form's Continue: with operations (the
// join declared the extension) the shop answers a proposal, which the
// platform makes an operation, and performs the request the platform
// sends once it is approved. Without them it asks for approval itself:
// here, by sending the User to the Personal Agent.
func (s *Shop) webExchange(w http.ResponseWriter, r *http.Request, c *verified.Claims) {
	if s.needPageScope(w, c, ScopeRead, ScopeWrite) {
		return
	}
	if err := r.ParseForm(); err != nil {
		s.render(w, http.StatusBadRequest, "message", page{Title: "Form not readable", Message: "The exchange form could not be read."})
		return
	}
	orderID, itemID, sku := r.PathValue("id"), r.PostForm.Get("item_id"), r.PostForm.Get("replacement_sku")
	if itemID == "" || sku == "" {
		s.render(w, http.StatusBadRequest, "message", page{Title: "Choose a replacement", Message: "Choose the item and its replacement."})
		return
	}
	if c.OperationID == "" && c.Extensions["operations"] != "3" {
		s.render(w, http.StatusForbidden, "message", page{Title: "Approval needed",
			Message: "Exchanges need your approval of the terms in your personal agent, which must support the Operations extension."})
		return
	}
	out := s.exchange(c, r.Header.Get("Idempotency-Key"), orderID, itemID, sku)
	switch {
	case out.problem != nil:
		s.render(w, out.problem.status, "message", page{Title: "Not exchanged", Message: out.problem.desc})
	case out.proposal != nil, out.decline != nil:
		s.writeOutcome(w, r, out, 0)
	default:
		if out.stall {
			hold(r.Context())
		}
		// The stored answer for every repeat: see the order.
		w.Header().Set("Location", "/orders/"+orderID)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusSeeOther)
	}
}

// web reads the website request's Poppy-Verified: none for an ordinary
// visitor (c nil), refused when it fails a check.
func (s *Shop) web(h func(http.ResponseWriter, *http.Request, *verified.Claims)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(verified.Header) == "" {
			h(w, r, nil)
			return
		}
		c, err := s.verify(r, s.WebOrigin())
		if err != nil {
			s.refused(w, r, err)
			return
		}
		h(w, r, c)
	}
}

// needPageScope answers a page that needs scopes the browser lacks, with
// the missing scopes named in the page.
func (s *Shop) needPageScope(w http.ResponseWriter, c *verified.Claims, scopes ...string) bool {
	var missing []string
	for _, sc := range scopes {
		if c == nil || c.Account == "" || !slices.Contains(c.Scopes, sc) {
			missing = append(missing, sc)
		}
	}
	if len(missing) == 0 {
		return false
	}
	msg := "Sign in to see this page: have your personal agent sign in with the scopes below and join this browser."
	if c != nil && c.Account != "" {
		msg = "This browser's sign-in lacks the scopes below: have your personal agent request them and join this browser again."
	}
	s.render(w, http.StatusForbidden, "message", page{Title: "Sign-in needed", Message: msg, Missing: missing})
	return true
}

// findOrder returns a copy of the account's order id.
func (s *Shop) findOrder(account, id string) *Order {
	for _, o := range s.Orders(account) {
		if o.ID == id {
			return o
		}
	}
	return nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// page is what the templates show.
type page struct {
	Title   string
	Message string
	Missing []string
	Claims  *verified.Claims
	Orders  []*Order
	Order   *Order
	Item    *Item
	Options []Product
}

func (s *Shop) render(w http.ResponseWriter, status int, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, p); err != nil {
		s.o.Logger.Error("demo shop: page", "page", name, "err", err)
	}
}

var pages = template.Must(template.New("").Parse(`
{{define "top"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · Stormline Outfitters</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse}td,th{padding:.3rem .6rem;border-bottom:1px solid #ddd;text-align:left}</style></head>
<body><header><a href="/">Stormline Outfitters</a> · <a href="/orders">Orders</a></header>
<h1>{{.Title}}</h1>{{end}}
{{define "bottom"}}</body></html>{{end}}

{{define "home"}}{{template "top" .}}
<p>Rain gear for the long way round.</p>
{{if and .Claims .Claims.Account}}<p id="signed-in">Signed in through your personal agent. See <a href="/orders">your orders</a>.</p>
{{else}}<p id="signed-out">Your personal agent can sign this browser in to see your orders.</p>{{end}}
{{template "bottom" .}}{{end}}

{{define "orders"}}{{template "top" .}}
<table id="orders"><tr><th>Order</th><th>Status</th><th>Items</th></tr>
{{range .Orders}}<tr><td><a href="/orders/{{.ID}}">{{.ID}}</a></td><td>{{.Status}}</td>
<td>{{range .Items}}{{.Name}}<br>{{end}}</td></tr>{{end}}</table>
{{template "bottom" .}}{{end}}

{{define "order"}}{{template "top" .}}{{$o := .Order}}
<p>Status: {{$o.Status}}. Ships to {{$o.ShippingAddress.Name}}, {{$o.ShippingAddress.City}}.</p>
<table id="items"><tr><th>Item</th><th>Price</th><th>Status</th><th></th></tr>
{{range $o.Items}}<tr id="item-{{.ID}}"><td>{{.Name}}</td><td>${{.Price.Amount}}</td><td>{{.Status}}</td>
<td>{{if eq .Status "delivered"}}<a href="/orders/{{$o.ID}}/exchange?item={{.ID}}">Exchange</a>{{end}}</td></tr>{{end}}</table>
{{if $o.Exchanges}}<h2>Exchanges</h2><ul id="exchanges">{{range $o.Exchanges}}
<li id="exchange-{{.ID}}">{{.ItemID}} for {{.ReplacementName}} ({{.PriceDifference.Amount}} {{.PriceDifference.Currency}} difference)</li>{{end}}</ul>{{end}}
{{if $o.Returns}}<h2>Returns</h2><ul id="returns">{{range $o.Returns}}
<li id="return-{{.ID}}">{{.ItemID}}, refund {{.Refund.Amount}} {{.Refund.Currency}}</li>{{end}}</ul>{{end}}
{{template "bottom" .}}{{end}}

{{define "exchange"}}{{template "top" .}}
<form id="exchange" method="post" action="/orders/{{.Order.ID}}/exchange">
<input type="hidden" name="item_id" value="{{.Item.ID}}">
<p>Exchange your {{.Item.Name}} (${{.Item.Price.Amount}}) for:</p>
{{range $i, $p := .Options}}<p><label><input type="radio" name="replacement_sku" value="{{$p.SKU}}"{{if eq $i 0}} checked{{end}}>
{{$p.Name}}, ${{$p.Price.Amount}}</label></p>{{end}}
<p>Your personal agent will ask you to approve the exact terms before anything changes.</p>
<button type="submit">Continue</button>
</form>
{{template "bottom" .}}{{end}}

{{define "message"}}{{template "top" .}}
<p>{{.Message}}</p>
{{if .Missing}}<ul id="missing-scopes">{{range .Missing}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{template "bottom" .}}{{end}}
`))
