package demoshop

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Money is an amount in a currency, as the spec's examples write it.
type Money struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
}

// usd is cents as US dollars.
func usd(cents int64) Money {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return Money{Amount: fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100), Currency: "USD"}
}

// Product is one thing the shop sells, in one size.
type Product struct {
	SKU   string `json:"sku"`
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Size  string `json:"size"`
	Price Money  `json:"price"`
	// cents is Price in cents, for arithmetic.
	cents   int64
	InStock bool `json:"in_stock"`
}

func product(sku, name, kind, size string, cents int64, inStock bool) Product {
	return Product{SKU: sku, Name: name, Kind: kind, Size: size, Price: usd(cents), cents: cents, InStock: inStock}
}

// The products of the spec's jacket exchange.
const (
	JacketSKU          = "stormline-jacket-m"
	InsulatedJacketSKU = "stormline-insulated-m"
)

// catalog is what the shop sells. An item can be exchanged for a product
// of the same kind that is in stock.
var catalog = []Product{
	product("stormline-jacket-s", "Stormline Jacket (S)", "jacket", "S", 18000, true),
	product(JacketSKU, "Stormline Jacket (M)", "jacket", "M", 18000, true),
	product("stormline-jacket-l", "Stormline Jacket (L)", "jacket", "L", 18000, true),
	product("stormline-insulated-s", "Stormline Insulated Jacket (S)", "jacket", "S", 25000, true),
	product(InsulatedJacketSKU, "Stormline Insulated Jacket (M)", "jacket", "M", 25000, true),
	product("stormline-insulated-l", "Stormline Insulated Jacket (L)", "jacket", "L", 25000, false),
	product("rain-shell-s", "Stormline Rain Shell (S)", "shell", "S", 12000, true),
	product("rain-shell-m", "Stormline Rain Shell (M)", "shell", "M", 12000, true),
	product("trail-socks", "Trail Socks", "socks", "one size", 1800, true),
}

// findProduct returns the product with sku.
func findProduct(sku string) (Product, bool) {
	for _, p := range catalog {
		if p.SKU == sku {
			return p, true
		}
	}
	return Product{}, false
}

// searchProducts returns the products where each word of query, in any
// case, begins a word of the name, kind or SKU; an empty query matches
// all.
func searchProducts(query string) []Product {
	out := []Product{}
	for _, p := range catalog {
		words := wordsOf(p.Name + " " + p.Kind + " " + p.SKU)
		if !slices.ContainsFunc(wordsOf(query), func(q string) bool {
			return !slices.ContainsFunc(words, func(w string) bool { return strings.HasPrefix(w, q) })
		}) {
			out = append(out, p)
		}
	}
	return out
}

// wordsOf is the lowercase words of s: runs of letters and digits.
func wordsOf(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// sizeFor is the Stormline size for a chest measurement, and advice that
// takes height into account (long torsos size up in shells and jackets).
func sizeFor(heightCM, chestCM float64) (size, advice string) {
	switch {
	case chestCM < 92:
		size = "S"
	case chestCM < 104:
		size = "M"
	default:
		size = "L"
	}
	advice = fmt.Sprintf("For a %.0f cm chest, Stormline size %s fits with room for a fleece underneath.", chestCM, size)
	if heightCM >= 188 && size != "L" {
		advice += " At your height, size up for sleeve length if you are between sizes."
	}
	return size, advice
}
