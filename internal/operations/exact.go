package operations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Exact comparison of JSON by meaning (extension 3: never two sets of
// terms under one revision; check 3: a request asks for exactly what its
// revision describes). Decoding into any would turn numbers into float64,
// so 9007199254740993 would equal 9007199254740992 and one amount could be
// approved and another performed; and it would keep only the last of two
// members of the same name. Here a document becomes a canonical text:
// members sorted by name, numbers as their exact decimal value, strings
// re-encoded, so two documents mean the same exactly when their texts are
// equal. Duplicate member names make a document malformed.

// ErrDuplicateMember: a JSON object names one member twice, which says
// two things at once.
var ErrDuplicateMember = errors.New("operations: a JSON object has two members of the same name")

// ErrNotJSON: the text is not one JSON value.
var ErrNotJSON = errors.New("operations: not a JSON value")

// maxJSONDepth bounds nesting, so a hostile document costs little.
const maxJSONDepth = 64

// Canonical returns the canonical text of the JSON document raw: equal
// for two documents exactly when they mean the same. It fails with
// ErrDuplicateMember or ErrNotJSON.
func Canonical(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrNotJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonicalValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: text after the value", ErrNotJSON)
	}
	return out.Bytes(), nil
}

// SameJSON reports whether a and b are JSON documents of the same meaning.
// A document that is malformed, or has a duplicate member, is the same
// only as its own bytes.
func SameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		_, err := Canonical(a)
		return err == nil
	}
	ca, err := Canonical(a)
	if err != nil {
		return false
	}
	cb, err := Canonical(b)
	return err == nil && bytes.Equal(ca, cb)
}

func canonicalValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrNotJSON, maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return canonicalObject(dec, out, depth)
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := canonicalValue(dec, out, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("%w: %v", ErrNotJSON, err)
			}
			out.WriteByte(']')
			return nil
		}
		return fmt.Errorf("%w: unexpected %v", ErrNotJSON, v)
	case json.Number:
		n, err := canonicalNumber(string(v))
		if err != nil {
			return err
		}
		out.WriteString(n)
	case string:
		writeString(out, v)
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case nil:
		out.WriteString("null")
	}
	return nil
}

func canonicalObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	type member struct {
		name  string
		value []byte
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotJSON, err)
		}
		name, _ := tok.(string)
		var v bytes.Buffer
		if err := canonicalValue(dec, &v, depth+1); err != nil {
			return err
		}
		members = append(members, member{name, v.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.name, b.name) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			if members[i-1].name == m.name {
				return fmt.Errorf("%w: %q", ErrDuplicateMember, m.name)
			}
			out.WriteByte(',')
		}
		writeString(out, m.name)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}

// writeString writes s as a JSON string in one fixed form.
func writeString(out *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	out.Write(b)
}

// canonicalNumber writes a JSON number as its exact decimal value:
// digits without leading or trailing zeros and a power of ten, so 1, 1.0,
// 10e-1 and 0.1e1 are one number and 9007199254740993 stays itself.
func canonicalNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.ParseInt(strings.TrimPrefix(s[i+1:], "+"), 10, 32)
		if err != nil {
			return "", fmt.Errorf("%w: number %q", ErrNotJSON, s)
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp -= int64(len(frac))
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	if exp < math.MinInt32 || exp > math.MaxInt32 {
		// The same bound as on the exponent read, so a canonical text
		// is its own canonical text.
		return "", fmt.Errorf("%w: number %q", ErrNotJSON, s)
	}
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + strconv.FormatInt(exp, 10), nil
}
