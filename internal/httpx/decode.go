package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
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

// DecodeJSON reads one JSON value from the request body into dst. Errors
// are *Error values ready for WriteError: 415 for another media type, 413
// for an oversized body, 400 naming the offending field otherwise.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any, opts DecodeOptions) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return Errorf(CodeUnsupportedMediaType, "the body must be application/json")
		}
	}
	limit := opts.MaxBytes
	if limit == 0 {
		limit = DefaultMaxBody
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	if opts.Strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(dst); err != nil {
		return DecodeError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return DecodeError(err, limit)
		}
		return Errorf(CodeInvalidRequest, "the body must hold exactly one JSON value")
	}
	return nil
}

// DecodeError turns an encoding/json error into an *Error naming what is
// wrong; limit is the body limit for the message on oversized bodies.
func DecodeError(err error, limit int64) error {
	var (
		mbe  *http.MaxBytesError
		syn  *json.SyntaxError
		typ  *json.UnmarshalTypeError
		desc string
	)
	switch {
	case errors.As(err, &mbe):
		return Errorf(CodeRequestTooLarge, "the body is larger than %d bytes", limit)
	case errors.Is(err, io.EOF):
		desc = "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		desc = "the body is not complete JSON"
	case errors.As(err, &syn):
		desc = fmt.Sprintf("malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		return Invalid(FieldError{Field: field, Message: "must be " + jsonKind(typ.Type.Kind().String())})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Invalid(FieldError{Field: name, Message: "unknown field"})
	default:
		desc = "malformed JSON"
	}
	return &Error{Code: CodeInvalidRequest, Description: desc, Cause: err}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	default:
		return "a number"
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
