package feedback

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestCheckText: a report's task and description are required UTF-8 text
// within a bound counted in characters, without control characters other
// than line breaks and tabs (spec 9.3).
func TestCheckText(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		s    *string
		want string
	}{
		{"absent", nil, "is required"},
		{"empty", str(""), "is required"},
		{"plain", str("Gift card"), ""},
		{"at the bound in characters", str(strings.Repeat("é", 10)), ""},
		{"over the bound", str(strings.Repeat("a", 11)), "must be at most 10 characters"},
		{"line breaks and tabs", str("a\nb\r\n\tc"), ""},
		{"NUL", str("a\x00b"), "must not contain control characters"},
		{"escape", str("a\x1b[31m"), "must not contain control characters"},
		{"DEL", str("a\x7f"), "must not contain control characters"},
		{"C1 control", str("a\u0085b"), "must not contain control characters"},
		{"not UTF-8", str("a\xffb"), "must be UTF-8 text"},
		{"bidirectional override", str("a\u202eb"), "must not contain U+202E"},
		{"zero-width space", str("a\u200bb"), "must not contain U+200B"},
	}
	for _, tt := range tests {
		got := checkText(tt.s, 10)
		if tt.want == "" {
			require.Empty(t, got, tt.name)
			continue
		}
		require.True(t, strings.HasPrefix(got, tt.want), "%s: %q", tt.name, got)
	}
}

// TestAlternativeFor: a report's task finds the Company's alternative for
// the same task, compared as tenant.NormalTask compares (case and
// surrounding space aside), and no other.
func TestAlternativeFor(t *testing.T) {
	t.Parallel()
	gift := tenant.Alternative{Instructions: "Gift cards are applied at checkout."}
	closing := tenant.Alternative{Instructions: "Accounts are closed by phone."}
	c := &tenant.Company{Settings: tenant.Settings{Feedback: tenant.Feedback{Alternatives: []tenant.TaskAlternative{
		{Task: "Pay with a gift card", Alternative: gift},
		{Task: "Close an account", Alternative: closing},
	}}}}
	tests := []struct {
		task string
		want *tenant.Alternative
	}{
		{"Pay with a gift card", &gift},
		{"pay with a GIFT CARD", &gift},
		{"  Pay with a gift card\n", &gift},
		{"\tCLOSE AN ACCOUNT ", &closing},
		{"Pay with gift cards", nil},
		{"Pay in instalments", nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, alternativeFor(c, tt.task), "%q", tt.task)
	}
}
