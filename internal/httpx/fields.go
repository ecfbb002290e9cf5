package httpx

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Fields collects the field errors of a request body, so that one answer
// lists every bad field rather than the first. The zero value is ready to
// use.
type Fields struct {
	errs []FieldError
}

// Add records that field is invalid, with a message formatted as by
// fmt.Sprintf. Messages speak after the field's name: "is required".
func (f *Fields) Add(field, format string, a ...any) {
	f.errs = append(f.errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
}

// Failed reports whether field already has an error.
func (f *Fields) Failed(field string) bool {
	for _, e := range f.errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

// Len is how many field errors were added.
func (f *Fields) Len() int { return len(f.errs) }

// Err is nil when no error was added, and otherwise the invalid_request
// error (Invalid) listing them in the order they were added.
func (f *Fields) Err() error {
	if len(f.errs) == 0 {
		return nil
	}
	return Invalid(f.errs...)
}

// Text checks free text with TextProblem, unless field already has an
// error: a value that failed to read is not judged again as text.
func (f *Fields) Text(field, s string, required bool, max int, multiline bool) {
	if f.Failed(field) {
		return
	}
	if msg := TextProblem(s, required, max, multiline); msg != "" {
		f.Add(field, "%s", msg)
	}
}

// TextProblem says what is wrong with s as free text, or returns "": it
// must be UTF-8 of at most max characters without control characters,
// bar newlines and tabs where multiline, nor disguising ones (Disguising),
// and not empty where required.
func TextProblem(s string, required bool, max int, multiline bool) string {
	switch {
	case s == "" && required:
		return "is required"
	case !utf8.ValidString(s):
		return "must be UTF-8 text"
	case utf8.RuneCountInString(s) > max:
		return fmt.Sprintf("must be at most %d characters", max)
	case strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t'))
	}) >= 0:
		if multiline {
			return "must not contain control characters other than newlines and tabs"
		}
		return "must not contain control characters"
	}
	return DisguiseProblem(s)
}
