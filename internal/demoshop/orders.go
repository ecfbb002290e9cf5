package demoshop

import (
	"crypto/rand"
	"time"
)

// Address is a shipping address.
type Address struct {
	Name       string `json:"name"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2,omitempty"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	Country    string `json:"country"`
}

// Item is one line of an order.
type Item struct {
	ID    string `json:"id"`
	SKU   string `json:"sku"`
	Name  string `json:"name"`
	Price Money  `json:"price"`
	// Status is "delivered", "exchange requested" or "return requested".
	Status string `json:"status"`
}

// Exchange is a performed exchange of an item.
type Exchange struct {
	ID              string    `json:"id"`
	OrderID         string    `json:"order_id"`
	ItemID          string    `json:"item_id"`
	ReplacementSKU  string    `json:"replacement_sku"`
	ReplacementName string    `json:"replacement_name"`
	PriceDifference Money     `json:"price_difference"`
	OperationID     string    `json:"operation_id"`
	Approver        string    `json:"approver"`
	CreatedAt       time.Time `json:"created_at"`
}

// Return is a performed return of an item.
type Return struct {
	ID          string    `json:"id"`
	OrderID     string    `json:"order_id"`
	ItemID      string    `json:"item_id"`
	Refund      Money     `json:"refund"`
	OperationID string    `json:"operation_id"`
	Approver    string    `json:"approver"`
	CreatedAt   time.Time `json:"created_at"`
}

// Order is one of an account's orders, with what was done to it.
type Order struct {
	ID              string     `json:"id"`
	Status          string     `json:"status"`
	PlacedAt        time.Time  `json:"placed_at"`
	Items           []Item     `json:"items"`
	ShippingAddress Address    `json:"shipping_address"`
	Exchanges       []Exchange `json:"exchanges"`
	Returns         []Return   `json:"returns"`
	// Fresh marks a copy of the jacket's order made by FreshOrder.
	Fresh bool `json:"-"`
}

// The spec's jacket example: order ord_7Hk2, item itm_4Qa.
const (
	JacketOrderID = "ord_7Hk2"
	JacketItemID  = "itm_4Qa"
)

// seedOrders are the orders every seeded account starts with.
func seedOrders(now time.Time) []*Order {
	jacket, _ := findProduct(JacketSKU)
	shell, _ := findProduct("rain-shell-s")
	socks, _ := findProduct("trail-socks")
	home := Address{Name: "Ada Lovelace", Line1: "12 St James's Square", City: "London", PostalCode: "SW1Y 4JH", Country: "GB"}
	return []*Order{
		{ID: JacketOrderID, Status: "delivered", PlacedAt: now.Add(-9 * 24 * time.Hour), ShippingAddress: home,
			Items: []Item{
				{ID: JacketItemID, SKU: jacket.SKU, Name: jacket.Name, Price: jacket.Price, Status: "delivered"},
				{ID: "itm_8Rc", SKU: socks.SKU, Name: socks.Name, Price: socks.Price, Status: "delivered"},
			}, Exchanges: []Exchange{}, Returns: []Return{}},
		{ID: "ord_3Mp8", Status: "delivered", PlacedAt: now.Add(-40 * 24 * time.Hour), ShippingAddress: home,
			Items: []Item{
				{ID: "itm_2Ls", SKU: shell.SKU, Name: shell.Name, Price: shell.Price, Status: "delivered"},
			}, Exchanges: []Exchange{}, Returns: []Return{}},
	}
}

// MaxFreshOrders bounds the fresh jacket orders (FreshOrder) an account
// keeps: a new one beyond it replaces the oldest.
const MaxFreshOrders = 20

// FreshOrder gives a seeded account a new copy of the jacket's order, with
// an ID of its own, so that each run of the demo's story has an item to
// exchange (docs/demo.md). An account the shop has not seeded gets none
// (ok false): the route that calls it is the demo's, not a way for any
// account to grow the shop's memory. The account keeps at most
// MaxFreshOrders of them, the oldest dropped first.
func (s *Shop) FreshOrder(account string) (order *Order, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	orders, seeded := s.orders[account]
	if !seeded {
		return nil, false
	}
	o := seedOrders(s.o.Now())[0]
	o.ID = "ord_" + rand.Text()[:10]
	o.PlacedAt = s.o.Now()
	o.Fresh = true
	fresh := 0
	for _, x := range orders {
		if x.Fresh {
			fresh++
		}
	}
	if fresh >= MaxFreshOrders {
		for i, x := range orders {
			if x.Fresh {
				orders = append(orders[:i:i], orders[i+1:]...)
				break
			}
		}
	}
	s.orders[account] = append(orders, o)
	return o.clone(), true
}

// clone is a deep copy of o, safe to encode outside the lock.
func (o *Order) clone() *Order {
	c := *o
	c.Items = append([]Item{}, o.Items...)
	c.Exchanges = append([]Exchange{}, o.Exchanges...)
	c.Returns = append([]Return{}, o.Returns...)
	return &c
}

// item returns the order's item with id.
func (o *Order) item(id string) *Item {
	for i := range o.Items {
		if o.Items[i].ID == id {
			return &o.Items[i]
		}
	}
	return nil
}
