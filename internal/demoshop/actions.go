package demoshop

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The scopes the shop's actions need (dev mode's auth.scopes).
const (
	ScopeRead  = "orders:read"
	ScopeWrite = "orders:write"
)

// problem is a refusal: status, error code and description.
type problem struct {
	status int
	code   string
	desc   string
}

func (p *problem) body() map[string]string { return problemBody(p.code, p.desc) }

// Proposal is an application/poppy-proposal+json body
// (docs/operations-extension.md section 3).
type Proposal struct {
	ActionKey string `json:"action_key"`
	Terms     any    `json:"terms"`
	Summary   string `json:"summary,omitempty"`
	ExpiresIn int    `json:"expires_in,omitempty"`
}

// decline is an application/poppy-decline+json body (docs/operations-extension.md 6).
type decline struct {
	Reason      string `json:"reason,omitempty"`
	Alternative any    `json:"alternative,omitempty"`
}

// outcome is what became of a request for an action: exactly one member
// is set. stall asks the surface to hold the answer (StallNextExchange).
type outcome struct {
	problem  *problem
	proposal *Proposal
	decline  *decline
	result   any
	stall    bool
}

// ExchangeTerms are the terms of an exchange: everything the User approves.
type ExchangeTerms struct {
	OrderID         string `json:"order_id"`
	ItemID          string `json:"item_id"`
	ReplacementSKU  string `json:"replacement_sku"`
	PriceDifference Money  `json:"price_difference"`
}

// ReturnTerms are the terms of a return.
type ReturnTerms struct {
	OrderID  string `json:"order_id"`
	ItemID   string `json:"item_id"`
	Refund   Money  `json:"refund"`
	RefundTo string `json:"refund_to"`
}

// approval is what an approved request carries: Poppy-Verified's
// operation claims, with the approved terms, and the Idempotency-Key,
// {operation_id}.{revision}.
type approval struct {
	approver string
	key      string
	terms    json.RawMessage
}

// approvedAs reports whether the approved terms are exactly want: the
// shop performs only what was approved, never what it would compute now
// (Operations extension 3).
func (a *approval) approvedAs(want any) bool {
	b, err := json.Marshal(want)
	return err == nil && operations.SameJSON(a.terms, b)
}

// changed declines an approved request whose terms the shop can no longer
// honour: nothing is performed, and the Personal Agent asks the User
// about the new terms the next request gets.
func changed(why string) outcome {
	return outcome{decline: &decline{Reason: "The approved terms can no longer be honoured: " + why +
		" Nothing was done; ask again for the current terms."}}
}

// approvalOf reads the approval of a request; nil without one.
func approvalOf(c *verified.Claims, key string) (*approval, *problem) {
	if c.OperationID == "" {
		return nil, nil
	}
	if key != c.OperationID+"."+c.Revision {
		return nil, &problem{http.StatusBadRequest, "invalid_request",
			"an approved request needs Idempotency-Key {operation_id}.{revision} of its approval"}
	}
	return &approval{approver: c.Approver, key: key, terms: c.Terms}, nil
}

// needScope refuses a request signed out or without scope.
func needScope(c *verified.Claims, scope string) *problem {
	if c.Account == "" || !slices.Contains(c.Scopes, scope) {
		return &problem{http.StatusForbidden, "insufficient_scope", "this needs a sign-in with the scope " + scope}
	}
	return nil
}

// replay returns the answer recorded for the approval's key; s.mu is held.
func (s *Shop) replay(account string, a *approval, actionKey string) (outcome, bool) {
	if a == nil {
		return outcome{}, false
	}
	ans, ok := s.answers[account+" "+a.key]
	if !ok {
		return outcome{}, false
	}
	if ans.actionKey != actionKey {
		return outcome{problem: &problem{http.StatusUnprocessableEntity, "invalid_request",
			"this Idempotency-Key was used for another action"}}, true
	}
	return outcome{result: ans.result}, true
}

// exchange proposes or performs the exchange of an item (the spec's
// jacket example): the API, the exchange_item tool and the website call it.
func (s *Shop) exchange(c *verified.Claims, key, orderID, itemID, sku string) outcome {
	return s.itemAction(c, key, "exchange", orderID, itemID, func(a *approval, order *Order, item *Item) outcome {
		return s.exchangeItem(c, a, order, item, sku)
	})
}

// itemAction is what every action on an order's item shares: the scope,
// the approval and its Idempotency-Key, the answer to a key already
// performed, and an item that can still be acted on. act then proposes
// (a nil) or performs, with s.mu held; what it performs is recorded as the
// key's answer.
func (s *Shop) itemAction(c *verified.Claims, key, verb, orderID, itemID string,
	act func(a *approval, order *Order, item *Item) outcome) outcome {
	if p := needScope(c, ScopeWrite); p != nil {
		return outcome{problem: p}
	}
	a, p := approvalOf(c, key)
	if p != nil {
		return outcome{problem: p}
	}
	actionKey := verb + " " + orderID + " " + itemID
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, ok := s.replay(c.Account, a, actionKey); ok {
		return out
	}
	order, item, p := s.deliveredItem(c.Account, orderID, itemID)
	if p != nil && a != nil && p.status == http.StatusConflict {
		// No longer delivered: the approved action cannot be done.
		return changed(p.desc + ".")
	}
	if p != nil {
		return outcome{problem: p}
	}
	out := act(a, order, item)
	if a != nil && out.result != nil {
		s.answers[c.Account+" "+a.key] = answer{actionKey: actionKey, result: out.result}
	}
	return out
}

// exchangeItem proposes or performs the exchange of item for sku.
func (s *Shop) exchangeItem(c *verified.Claims, a *approval, order *Order, item *Item, sku string) outcome {
	orderID, itemID := order.ID, item.ID
	current, _ := findProduct(item.SKU)
	repl, ok := findProduct(sku)
	switch {
	case !ok || repl.Kind != current.Kind || repl.SKU == current.SKU:
		return outcome{problem: &problem{http.StatusBadRequest, "invalid_request",
			fmt.Sprintf("replacement_sku must be another %s of the catalog", current.Kind)}}
	case !repl.InStock && a != nil:
		return changed(repl.Name + " is out of stock.")
	case !repl.InStock:
		return outcome{problem: &problem{http.StatusConflict, "out_of_stock", repl.Name + " is out of stock"}}
	}
	diff := repl.cents - current.cents
	prop := exchangeProposal(orderID, itemID, current, repl)
	terms := prop.Terms.(ExchangeTerms)
	if a == nil {
		return outcome{proposal: prop}
	}
	if !a.approvedAs(terms) {
		return changed("the exchange's price or items changed since they were approved.")
	}
	if a.approver != "user" && diff > 0 {
		return outcome{decline: &decline{
			Reason: "An exchange that costs more needs the account holder's own approval.",
			Alternative: map[string]any{
				"instructions": "The account holder can approve the exchange themselves, or exchange the item on the order page.",
				"references":   []any{map[string]string{"type": "web", "url": s.o.SiteURL + "/orders/" + orderID}},
			}}}
	}
	ex := Exchange{ID: newID("exc_"), OrderID: orderID, ItemID: itemID, ReplacementSKU: sku, ReplacementName: repl.Name,
		PriceDifference: terms.PriceDifference, OperationID: c.OperationID, Approver: a.approver, CreatedAt: s.o.Now().UTC()}
	order.Exchanges = append(order.Exchanges, ex)
	item.Status = "exchange requested"
	out := outcome{result: ex}
	if s.stalls > 0 {
		s.stalls--
		out.stall = true
	}
	return out
}

// ExchangeProposal is the proposal the shop answers for exchanging item
// itemID of order orderID, a product itemSKU, for replacementSKU: the
// one the demo Company Agent proposes in a conversation. ok is false for
// SKUs the catalog does not have.
func ExchangeProposal(orderID, itemID, itemSKU, replacementSKU string) (p *Proposal, ok bool) {
	current, ok1 := findProduct(itemSKU)
	repl, ok2 := findProduct(replacementSKU)
	if !ok1 || !ok2 {
		return nil, false
	}
	return exchangeProposal(orderID, itemID, current, repl), true
}

func exchangeProposal(orderID, itemID string, current, repl Product) *Proposal {
	diff := repl.cents - current.cents
	return &Proposal{ActionKey: "exchange " + orderID + " " + itemID, ExpiresIn: 20 * 60,
		Terms:   ExchangeTerms{OrderID: orderID, ItemID: itemID, ReplacementSKU: repl.SKU, PriceDifference: usd(diff)},
		Summary: exchangeSummary(current.Name, orderID, repl.Name, diff)}
}

func exchangeSummary(item, orderID, replacement string, diff int64) string {
	cost := "at no extra cost"
	switch {
	case diff > 0:
		cost = "for $" + usd(diff).Amount + " more, charged to the card used for the order"
	case diff < 0:
		cost = "with $" + usd(-diff).Amount + " refunded to the card used for the order"
	}
	return fmt.Sprintf("Exchange the %s on order %s for the %s, %s.", item, orderID, replacement, cost)
}

// returnItem proposes or performs the return of an item for a refund.
func (s *Shop) returnItem(c *verified.Claims, key, orderID, itemID string) outcome {
	return s.itemAction(c, key, "return", orderID, itemID, func(a *approval, order *Order, item *Item) outcome {
		terms := ReturnTerms{OrderID: orderID, ItemID: itemID, Refund: item.Price, RefundTo: "the card used for the order"}
		if a == nil {
			return outcome{proposal: &Proposal{ActionKey: "return " + orderID + " " + itemID, Terms: terms, ExpiresIn: 60 * 60,
				Summary: fmt.Sprintf("Return the %s on order %s for a refund of $%s to the card used for the order, "+
					"once it arrives back. Return shipping is free.", item.Name, orderID, item.Price.Amount)}}
		}
		if !a.approvedAs(terms) {
			return changed("the refund changed since it was approved.")
		}
		ret := Return{ID: newID("ret_"), OrderID: orderID, ItemID: itemID, Refund: item.Price, OperationID: c.OperationID,
			Approver: a.approver, CreatedAt: s.o.Now().UTC()}
		order.Returns = append(order.Returns, ret)
		item.Status = "return requested"
		return outcome{result: ret}
	})
}

// deliveredItem returns the account's order and its item that can still
// be exchanged or returned; s.mu is held.
func (s *Shop) deliveredItem(account, orderID, itemID string) (*Order, *Item, *problem) {
	order := s.order(account, orderID)
	if order == nil {
		return nil, nil, &problem{http.StatusNotFound, "not_found", "no order " + orderID + " on this account"}
	}
	item := order.item(itemID)
	if item == nil {
		return nil, nil, &problem{http.StatusNotFound, "not_found", "no item " + itemID + " on order " + orderID}
	}
	if item.Status != "delivered" {
		return nil, nil, &problem{http.StatusConflict, "conflict", "item " + itemID + " is no longer delivered: " + item.Status}
	}
	return order, item, nil
}

// setAddress changes an order's shipping address: a plain update.
func (s *Shop) setAddress(c *verified.Claims, orderID string, addr Address) (*Order, *problem) {
	if p := needScope(c, ScopeWrite); p != nil {
		return nil, p
	}
	if addr.Name == "" || addr.Line1 == "" || addr.City == "" || addr.PostalCode == "" || len(addr.Country) != 2 {
		return nil, &problem{http.StatusBadRequest, "invalid_request",
			"the address needs name, line1, city, postal_code and a two-letter country"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	order := s.order(c.Account, orderID)
	if order == nil {
		return nil, &problem{http.StatusNotFound, "not_found", "no order " + orderID + " on this account"}
	}
	order.ShippingAddress = addr
	return order.clone(), nil
}

// newID is prefix and 12 random characters.
func newID(prefix string) string { return prefix + rand.Text()[:12] }
