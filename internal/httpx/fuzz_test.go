package httpx

import (
	stdjson "encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// fuzzBody has the shapes API bodies have: nested objects, lists, maps,
// pointers, numbers and raw members decoded later.
type fuzzBody struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	Rate  float64 `json:"rate"`
	On    *bool   `json:"on"`
	Org   struct {
		Domain string   `json:"domain"`
		Tags   []string `json:"tags"`
	} `json:"organization"`
	Items []struct {
		ID string `json:"id"`
	} `json:"items"`
	Scopes map[string]string             `json:"scopes"`
	Ext    map[string]stdjson.RawMessage `json:"extensions"`
	Raw    stdjson.RawMessage            `json:"raw"`
}

// FuzzUnmarshal feeds bodies to Unmarshal, the one JSON decoder of
// everything a client sends, and to CheckText: a refusal is
// invalid_request (400) with a description or a field; a body it takes is
// one valid UTF-8 JSON value, and its raw members are JSON too.
// testdata/fuzz holds more seeds and every finding.
func FuzzUnmarshal(f *testing.F) {
	for _, seed := range []string{
		`{"name": "Acme", "count": 3, "rate": 1.5, "on": true, "organization": {"domain": "acme.example", "tags": ["a"]},
			"items": [{"id": "i1"}], "scopes": {"orders": "Orders"}, "extensions": {"x": {"v": 1}}, "raw": [1, "two"]}`,
		`{"NAME": "a"}`,
		`{"name": "a", "name": "b"}`,
		"{\"name\": \"a\xff\"}",
		`{"name": "\ud800"}`,
		`{"name": "a\u0000b"}`,
		`{"scopes": {"a\u0000": "x"}}`,
		`{"raw": {"k": "\u0000"}}`,
		`{"count": 1e400}`,
		`{"count": 1.5}`,
		`{"items": [{"id": 1}]}`,
		`{"organization": {"tags": [null, 1]}}`,
		`{"extensions": {"1": [], "": null}}`,
		`{} {}`,
		`{"name": `,
		`null`,
		``,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		var b fuzzBody
		err := Unmarshal(data, &b, DecodeOptions{Strict: strict})
		if err == nil {
			err = CheckText(&b)
			if err == nil {
				if !utf8.Valid(data) || !stdjson.Valid(data) {
					t.Fatalf("took %q", data)
				}
				for name, raw := range b.Ext {
					if !stdjson.Valid(raw) {
						t.Fatalf("extensions.%s is %q", name, raw)
					}
				}
				if len(b.Raw) > 0 && !stdjson.Valid(b.Raw) {
					t.Fatalf("raw is %q", b.Raw)
				}
				return
			}
		}
		var he *Error
		if !errors.As(err, &he) || he.Code != CodeInvalidRequest || he.Status() != 400 ||
			(he.Description == "" && len(he.Fields) == 0) {
			t.Fatalf("error %T %v", err, err)
		}
	})
}
