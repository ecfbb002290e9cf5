package browserjoin

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestValidCode: a code is our prefix and letters and digits, within the
// length bound; anything else is refused before the database is asked.
func TestValidCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code string
		want bool
	}{
		{codePrefix + "abcXYZ0189", true},
		{codePrefix, true},
		{codePrefix + strings.Repeat("a", maxCode-len(codePrefix)), true},
		{codePrefix + strings.Repeat("a", maxCode-len(codePrefix)+1), false},
		{"abcXYZ0189", false},
		{codePrefix + "abc-def", false},
		{codePrefix + "abc def", false},
		{codePrefix + "abc%00", false},
		{codePrefix + "é", false},
		{"", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, validCode(tt.code), "%q", tt.code)
	}
}

// TestIdleLimit: a web session ends with its Session's idle timeout, plus
// the slack the Session check allows its last use (a quarter, at most a
// minute); no timeout, no limit.
func TestIdleLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		seconds int
		want    time.Duration
	}{
		{0, 0},
		{-5, 0},
		{60, 75 * time.Second},
		{240, 5 * time.Minute},
		{7200, 2*time.Hour + time.Minute},
	}
	for _, tt := range tests {
		c := &tenant.Company{Settings: tenant.Settings{Sessions: tenant.SessionSettings{IdleTimeoutSeconds: tt.seconds}}}
		require.Equal(t, tt.want, idleLimit(c), "%d s", tt.seconds)
	}
}
