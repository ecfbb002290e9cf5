package httpx

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// textMessage is what a field error says of text PostgreSQL cannot store.
const textMessage = "must be UTF-8 text without NUL characters"

// ValidText reports whether s can reach PostgreSQL: valid UTF-8 without
// NUL, which text and jsonb columns refuse with an error (SQLSTATE 22021,
// 22P05) that would otherwise surface as a 500.
func ValidText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// RequireText is middleware that refuses, with 400 invalid_request, a
// request whose path or query (names and values, percent-decoded) is not
// ValidText, so that no handler behind it passes such a string on to the
// database.
func RequireText(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ValidText(r.URL.Path) {
			WriteError(w, r, Errorf(CodeInvalidRequest, "the path %s", textMessage))
			return
		}
		for name, values := range r.URL.Query() {
			if !ValidText(name) {
				WriteError(w, r, Errorf(CodeInvalidRequest, "query parameter names %s", textMessage))
				return
			}
			for _, v := range values {
				if !ValidText(v) {
					WriteError(w, r, Invalid(FieldError{Field: name, Message: textMessage}))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// CheckText returns an invalid_request *Error naming the first string in
// v that is not ValidText: a field, an element, a map key, or a string
// inside a json.RawMessage. v is what a JSON body was decoded into; fields
// are named by their JSON names, as DecodeJSON names them.
func CheckText(v any) error {
	if path, ok := textIn(reflect.ValueOf(v), ""); !ok {
		if path == "" {
			path = "(body)"
		}
		return Invalid(FieldError{Field: path, Message: textMessage})
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// textIn walks v and returns the path of the first bad string and false.
func textIn(v reflect.Value, path string) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		return path, ValidText(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", true
		}
		return textIn(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, skip := jsonName(f)
			if skip {
				continue
			}
			sub := join(path, name)
			if f.Anonymous && f.Tag.Get("json") == "" {
				// Embedded fields' members sit at this level in JSON.
				sub = path
			}
			if p, ok := textIn(v.Field(i), sub); !ok {
				return p, false
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			if k.Kind() == reflect.String && !ValidText(k.String()) {
				return path, false
			}
			if p, ok := textIn(iter.Value(), join(path, k.String())); !ok {
				return p, false
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type() == rawMessageType {
			return rawText(v.Bytes(), path)
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", true // base64 bytes, not text
		}
		for i := range v.Len() {
			if p, ok := textIn(v.Index(i), path+"["+strconv.Itoa(i)+"]"); !ok {
				return p, false
			}
		}
	}
	return "", true
}

// rawText reports whether every string in the JSON text raw, at path,
// member names included, is ValidText, and where the first that is not
// stands. encoding/json keeps a RawMessage's bytes as sent, invalid UTF-8
// and \u0000 escapes included.
func rawText(raw []byte, path string) (string, bool) {
	if len(raw) == 0 {
		return "", true
	}
	if !utf8.Valid(raw) {
		return path, false
	}
	if !bytes.Contains(raw, []byte(`\u0000`)) {
		return "", true
	}
	// Decoded only to name where the NUL is.
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return path, false
	}
	return textIn(reflect.ValueOf(v), path)
}

// jsonName is the name encoding/json gives field f, and whether it skips f.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" || (!f.IsExported() && !f.Anonymous) {
		return "", true
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name, false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
