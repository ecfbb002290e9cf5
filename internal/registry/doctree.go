package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Limits of a description's shape, checked in one pass before kin-openapi
// reads it: its loader, validator and encoder recurse once per level, and
// its encoder re-reads every nested schema once per enclosing one, so
// depth costs quadratic time there (9,000 levels of "items" took seconds).
const (
	// MaxOpenAPIDepth bounds how deeply objects and arrays nest: room for
	// schemas nested about a hundred levels under a path's response.
	MaxOpenAPIDepth = 128
	// MaxOpenAPINodes bounds the values (objects, arrays, scalars,
	// members' keys not counted) a description holds, YAML aliases
	// counted each time they are used.
	MaxOpenAPINodes = 250_000
)

// docTree reads a description, JSON or YAML, into plain values
// (map[string]any, []any, string, json.Number, bool, nil), visiting each
// value once: the gateway keeps and rewrites descriptions as plain values,
// whose encoding is linear, not as kin-openapi's types.
type docTree struct {
	// visits counts the values read, for the limit and for tests.
	visits int
}

// parse reads raw, a JSON or YAML document, within the limits.
func (d *docTree) parse(raw []byte) (any, error) {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		v, err := d.parseJSON(raw)
		var syn *json.SyntaxError
		if err == nil || !errors.As(err, &syn) {
			return v, err
		}
		// Not JSON: perhaps a YAML flow mapping.
		d.visits = 0
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return d.yamlValue(&doc, 0, nil)
}

func (d *docTree) parseJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := d.jsonValue(dec, 0, nil)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("the document holds more than one JSON value")
	}
	return v, nil
}

// visit counts a value at depth under path, and refuses it past a limit.
func (d *docTree) visit(depth int, path []string) error {
	d.visits++
	if d.visits > MaxOpenAPINodes {
		return fmt.Errorf("it holds more than %d values", MaxOpenAPINodes)
	}
	if depth > MaxOpenAPIDepth {
		return fmt.Errorf("it nests objects and arrays more than %d levels deep, under %s", MaxOpenAPIDepth, pointer(path))
	}
	return nil
}

// text refuses a string or member name holding NUL, which the stored
// description (jsonb) cannot hold: YAML writes it as "\0", JSON as
// "\u0000".
func text(s string, path []string) error {
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("a string or member name under %s holds NUL (U+0000)", pointer(path))
	}
	return nil
}

// pointer names the start of path as a JSON pointer.
func pointer(path []string) string {
	const shown = 8
	var b strings.Builder
	for i, seg := range path {
		if i == shown {
			b.WriteString("/…")
			break
		}
		b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(seg, "~", "~0"), "/", "~1"))
	}
	if b.Len() == 0 {
		return "the top"
	}
	return b.String()
}

func (d *docTree) jsonValue(dec *json.Decoder, depth int, path []string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		if s, ok := tok.(string); ok {
			if err := text(s, path); err != nil {
				return nil, err
			}
		}
		return tok, d.visit(depth, path)
	}
	if err := d.visit(depth+1, path); err != nil {
		return nil, err
	}
	switch delim {
	case '{':
		m := map[string]any{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			if err := text(key, path); err != nil {
				return nil, err
			}
			if m[key], err = d.jsonValue(dec, depth+1, append(path, key)); err != nil {
				return nil, err
			}
		}
		_, err = dec.Token()
		return m, err
	default: // '['
		a := []any{}
		for dec.More() {
			v, err := d.jsonValue(dec, depth+1, append(path, fmt.Sprint(len(a))))
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err = dec.Token()
		return a, err
	}
}

func (d *docTree) yamlValue(n *yaml.Node, depth int, path []string) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, errors.New("the document is empty")
		}
		return d.yamlValue(n.Content[0], depth, path)
	case yaml.AliasNode:
		// Each use counts: a chain of aliases cannot multiply the work
		// past the limit.
		return d.yamlValue(n.Alias, depth, path)
	case yaml.MappingNode:
		if err := d.visit(depth+1, path); err != nil {
			return nil, err
		}
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Value == "<<" {
				return nil, fmt.Errorf("a key under %s is not a plain string", pointer(path))
			}
			if err := text(k.Value, path); err != nil {
				return nil, err
			}
			v, err := d.yamlValue(n.Content[i+1], depth+1, append(path, k.Value))
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		if err := d.visit(depth+1, path); err != nil {
			return nil, err
		}
		a := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			v, err := d.yamlValue(c, depth+1, append(path, fmt.Sprint(i)))
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	default: // ScalarNode
		if err := d.visit(depth, path); err != nil {
			return nil, err
		}
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool", "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, err
			}
			if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
				return nil, fmt.Errorf("%s under %s is not a JSON number", n.Value, pointer(path))
			}
			return v, nil
		default:
			// Strings, and timestamps and the like as written: JSON has
			// only strings for them.
			return n.Value, text(n.Value, path)
		}
	}
}
