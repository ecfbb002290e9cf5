package demoshop

import (
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
