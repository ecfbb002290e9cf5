package httpx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// DefaultMaxBody is the body limit when DecodeOptions.MaxBytes is zero.
const DefaultMaxBody = 64 << 10

// DecodeOptions says how strictly to read a JSON body.
type DecodeOptions struct {
	// MaxBytes caps the body; zero means DefaultMaxBody.
	MaxBytes int64
	// Strict rejects unknown fields. Use it for our own APIs only: what a
	// Personal Agent sends may carry fields we do not know (spec 3.3).
	Strict bool
}

// DecodeJSON reads one JSON value from the request body into dst, as
// Unmarshal does, and refuses a string with NUL anywhere in it. Errors
// are *Error values ready for WriteError: 415 for another media type, 413
// for an oversized body, 400 naming the offending field otherwise.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any, opts DecodeOptions) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !IsJSON(ct) {
		return Errorf(CodeUnsupportedMediaType, "the body must be application/json")
	}
	limit := opts.MaxBytes
	if limit == 0 {
		limit = DefaultMaxBody
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Errorf(CodeRequestTooLarge, "the body is larger than %d bytes", limit)
		}
		return &Error{Code: CodeInvalidRequest, Description: "the body could not be read", Cause: err}
	}
	if err := Unmarshal(raw, dst, opts); err != nil {
		return err
	}
	// A body's text reaches PostgreSQL, which cannot store NUL: refused
	// here, once for every API body (CheckText).
	return CheckText(dst)
}

// Unmarshal decodes data, which must be exactly one JSON value, into dst.
// It is the one JSON decoder for everything a client sends, at every
// level: a json.RawMessage taken from a body and decoded later goes
// through it too. Unlike encoding/json it reads JSON exactly:
//
//   - member names match struct fields case-sensitively, so {"SLUG": ...}
//     is not slug but an unknown member;
//   - a member name twice in one object is refused;
//   - invalid UTF-8, and escapes of lone surrogates, are refused rather
//     than replaced with U+FFFD;
//   - with opts.Strict, unknown members are refused; otherwise ignored.
//
// Otherwise it decodes as encoding/json does (a null leaves a struct,
// string, number or bool as it was). opts.MaxBytes is not used here.
// Errors are *Error: invalid_request naming the field by its path
// (organization.name, domains[0]) where there is one.
func Unmarshal(data []byte, dst any, opts DecodeOptions) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return Errorf(CodeInvalidRequest, "the body is empty")
	}
	err := json.Unmarshal(data, dst,
		jsonv1.MergeWithLegacySemantics(true),
		json.RejectUnknownMembers(opts.Strict))
	if err != nil {
		return decodeError(data, err)
	}
	return nil
}

// decodeError turns an error of json.Unmarshal on data into an *Error.
func decodeError(data []byte, err error) error {
	var (
		syn *jsontext.SyntacticError
		sem *json.SemanticError
	)
	switch {
	case errors.As(err, &syn):
		field := fieldPath(data, syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return &Error{Code: CodeInvalidRequest, Description: "the body is not complete JSON", Cause: err}
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return Invalid(FieldError{Field: field, Message: "appears twice in one object: each member name may appear once"})
		case invalidText(data, syn):
			if field == "" {
				field = "(body)"
			}
			return Invalid(FieldError{Field: field, Message: "must be valid UTF-8 text: invalid bytes and lone surrogates (\\ud800) are refused"})
		}
		if strings.Contains(syn.Err.Error(), "after top-level value") {
			return &Error{Code: CodeInvalidRequest, Description: "the body must hold exactly one JSON value", Cause: err}
		}
		return &Error{Code: CodeInvalidRequest, Description: fmt.Sprintf("malformed JSON at byte %d", syn.ByteOffset), Cause: err}
	case errors.As(err, &sem):
		field := fieldPath(data, sem.JSONPointer)
		if errors.Is(sem.Err, json.ErrUnknownName) {
			return Invalid(FieldError{Field: field, Message: "unknown field"})
		}
		if field == "" {
			field = "(body)"
		}
		return Invalid(FieldError{Field: field, Message: "must be " + jsonKind(sem.GoType)})
	}
	return &Error{Code: CodeInvalidRequest, Description: "malformed JSON", Cause: err}
}

// invalidText reports whether syn is about invalid UTF-8 or a lone
// surrogate: jsontext's error for these is not exported, so this checks
// the bytes themselves and then the message.
func invalidText(data []byte, syn *jsontext.SyntacticError) bool {
	if !utf8.Valid(data) {
		return true
	}
	msg := syn.Err.Error()
	return strings.Contains(msg, "UTF-8") || strings.Contains(msg, "surrogate")
}

// fieldPath names the value at ptr in data as the API's fields are named:
// object members joined by dots, array elements as [i]
// (feedback.alternatives[0].task). It walks data to tell an array index
// from a member named by digits; "" is the whole body.
func fieldPath(data []byte, ptr jsontext.Pointer) string {
	if ptr == "" {
		return ""
	}
	var tokens []string
	for tok := range ptr.Tokens() {
		tokens = append(tokens, tok)
	}
	// Read tokens up to the one ptr names; duplicates and bad UTF-8 are
	// let through here, since errors about them are named too.
	dec := jsontext.NewDecoder(bytes.NewReader(data),
		jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	inArray := make([]bool, len(tokens))
	for dec.StackPointer() != ptr {
		if _, err := dec.ReadToken(); err != nil {
			break
		}
	}
	if dec.StackPointer() == ptr {
		for i := range tokens {
			kind, _ := dec.StackIndex(i + 1)
			inArray[i] = kind == '['
		}
	}
	var b strings.Builder
	for i, tok := range tokens {
		switch {
		case inArray[i]:
			b.WriteString("[" + tok + "]")
		case i > 0:
			b.WriteString("." + tok)
		default:
			b.WriteString(tok)
		}
	}
	return b.String()
}

// jsonKind says what JSON a Go type takes.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "valid JSON"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "valid JSON of another type"
	}
}

// QueryInt reads the optional integer query parameter name, def when
// absent; outside [lo, hi] it is an invalid_request naming the parameter.
func QueryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, Invalid(FieldError{Field: name, Message: fmt.Sprintf("must be a number from %d to %d", lo, hi)})
	}
	return n, nil
}
