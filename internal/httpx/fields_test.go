package httpx

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFieldsCollectsInOrder(t *testing.T) {
	t.Parallel()
	var f Fields
	require.NoError(t, f.Err(), "no error added")
	require.Zero(t, f.Len())

	f.Add("name", "is required")
	f.Add("items[%d]", "must list at most %d items", 3)
	require.True(t, f.Failed("name"))
	require.False(t, f.Failed("items"))
	require.Equal(t, 2, f.Len())

	var e *Error
	require.True(t, errors.As(f.Err(), &e))
	require.Equal(t, http.StatusBadRequest, e.Status())
	require.Equal(t, CodeInvalidRequest, e.Code)
	require.Equal(t, []FieldError{
		{Field: "name", Message: "is required"},
		{Field: "items[%d]", Message: "must list at most 3 items"},
	}, e.Fields, "the field name is not a format")
	require.Equal(t, "name: is required (and 1 more)", e.Description)
}

func TestFieldsText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		s         string
		required  bool
		multiline bool
		want      string
	}{
		{"empty optional", "", false, false, ""},
		{"empty required", "", true, false, "is required"},
		{"plain", "Gift wrap", true, false, ""},
		{"bad UTF-8", "a\xffb", false, false, "must be UTF-8 text"},
		{"too long in characters", strings.Repeat("é", 11), false, false, "must be at most 10 characters"},
		{"ten runes of two bytes", strings.Repeat("é", 10), false, false, ""},
		{"newline on one line", "a\nb", false, false, "must not contain control characters"},
		{"newline and tab multiline", "a\n\tb", false, true, ""},
		{"NUL multiline", "a\x00b", false, true, "must not contain control characters other than newlines and tabs"},
		{"carriage return multiline", "a\rb", false, true, "must not contain control characters other than newlines and tabs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, TextProblem(tc.s, tc.required, 10, tc.multiline))
			var f Fields
			f.Text("note", tc.s, tc.required, 10, tc.multiline)
			if tc.want == "" {
				require.NoError(t, f.Err())
				return
			}
			var e *Error
			require.True(t, errors.As(f.Err(), &e))
			require.Equal(t, []FieldError{{Field: "note", Message: tc.want}}, e.Fields)
		})
	}
}

func TestFieldsTextSkipsFailedField(t *testing.T) {
	t.Parallel()
	var f Fields
	f.Add("description", "must be a string")
	// What failed to read reads as "", which is not "required" again.
	f.Text("description", "", true, 10, false)
	f.Text("title", "", true, 10, false)
	var e *Error
	require.True(t, errors.As(f.Err(), &e))
	require.Equal(t, []FieldError{
		{Field: "description", Message: "must be a string"},
		{Field: "title", Message: "is required"},
	}, e.Fields)
}
