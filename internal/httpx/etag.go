package httpx

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// ETag returns a strong entity tag (RFC 9110 8.8.3) for v's JSON
// representation: a digest of the bytes WriteJSON sends for it, so equal
// representations share a tag and any change to one changes it.
func ETag(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`, nil
}

// WriteJSONTagged writes v as WriteJSON does, with its ETag.
func WriteJSONTagged(w http.ResponseWriter, status int, v any) {
	if tag, err := ETag(v); err == nil {
		w.Header().Set("ETag", tag)
	}
	WriteJSON(w, status, v)
}

type ifMatchRequiredKey struct{}

// RequireIfMatch returns middleware that, when required, makes If-Match
// required on the writes behind it that check one (Precondition.Check):
// such a write to an existing resource without If-Match is refused with
// precondition_required (428). When not required the middleware changes
// nothing, so clients that never send If-Match keep working.
func RequireIfMatch(required bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if !required {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ifMatchRequiredKey{}, true)))
		})
	}
}

// Precondition is a write's If-Match header field (RFC 9110 13.1.1),
// checked against the resource's current ETag where the write happens, in
// its transaction with the resource's row locked, so that of two writers
// sending the same tag only the first succeeds.
type Precondition struct {
	given    bool
	any      bool     // "*"
	tags     []string // the strong tags listed, quotes included
	required bool
}

// IfMatch reads r's If-Match header fields.
func IfMatch(r *http.Request) Precondition {
	p := Precondition{}
	p.required, _ = r.Context().Value(ifMatchRequiredKey{}).(bool)
	for _, line := range r.Header.Values("If-Match") {
		p.given = true
		for _, tag := range entityTags(line) {
			switch {
			case tag == "*":
				p.any = true
			case strings.HasPrefix(tag, `"`):
				p.tags = append(p.tags, tag)
			}
			// A weak tag (W/"...") never matches: If-Match compares
			// strongly.
		}
	}
	return p
}

// entityTags splits an If-Match field value into its members: "*",
// quoted tags (which may hold commas) and weak tags; anything else
// malformed comes out as is and matches nothing.
func entityTags(s string) []string {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return out
		}
		start := 0
		if strings.HasPrefix(s, "W/") {
			start = 2
		}
		end := strings.IndexByte(s, ',')
		if start < len(s) && s[start] == '"' {
			if q := strings.IndexByte(s[start+1:], '"'); q >= 0 {
				end = start + 1 + q + 1
			}
		}
		if end < 0 {
			end = len(s)
		}
		out = append(out, strings.TrimRight(s[:end], " \t"))
		s = s[end:]
	}
}

// MatchTag is the Precondition of If-Match naming tag alone, for a write
// that carries the version it was read at otherwise than in a header (a
// form's hidden field). An empty tag names no version, so every check of
// it fails.
func MatchTag(tag string) Precondition {
	p := Precondition{given: true}
	if strings.HasPrefix(tag, `"`) {
		p.tags = []string{tag}
	}
	return p
}

// Given reports whether the request had an If-Match header field.
func (p Precondition) Given() bool { return p.given }

// Check decides whether the write may go ahead on the resource whose
// current ETag is current ("" when the resource does not exist): nil when
// it may, precondition_failed (412) when If-Match names no current
// version (for "*", when there is none), and precondition_required (428)
// when If-Match is required and missing on a write to an existing
// resource. Creating a resource never requires If-Match.
func (p Precondition) Check(current string) error {
	if !p.given {
		if p.required && current != "" {
			return Errorf(CodePreconditionRequired,
				"this server requires If-Match on writes to an existing resource: send the ETag of the resource as last read")
		}
		return nil
	}
	if current != "" && (p.any || slices.Contains(p.tags, current)) {
		return nil
	}
	if current == "" {
		return Errorf(CodePreconditionFailed, "If-Match names a version, but the resource does not exist")
	}
	return Errorf(CodePreconditionFailed,
		"the resource changed since the version If-Match names: read it again and apply the change to what it is now")
}
