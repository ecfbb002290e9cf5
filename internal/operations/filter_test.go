package operations_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
)

// TestParseFilter: every parameter is read, a date until includes its
// whole day, and every bad parameter is named in one error.
func TestParseFilter(t *testing.T) {
	f, err := operations.ParseFilter(url.Values{"status": {"unknown"}, "interface": {"mcp"},
		"client_id": {" https://agent.test/c "}, "target": {"orders"}, "since": {"2026-03-01"}, "until": {"2026-03-02"}})
	require.NoError(t, err)
	require.Equal(t, operations.Filter{Status: "unknown", Interface: "mcp", ClientID: "https://agent.test/c",
		Target: "orders", Since: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		Until: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)}, f)

	f, err = operations.ParseFilter(url.Values{"since": {"2026-03-01T10:00:00+02:00"}})
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC), f.Since)

	f, err = operations.ParseFilter(url.Values{})
	require.NoError(t, err)
	require.Zero(t, f)

	_, err = operations.ParseFilter(url.Values{"status": {"done"}, "interface": {"fax"}, "client_id": {"a\x00"},
		"since": {"yesterday"}, "until": {"0000-01-01T00:00:00Z"}})
	e, ok := errors.AsType[*httpx.Error](err)
	require.True(t, ok, "got %v", err)
	var names []string
	for _, fe := range e.Fields {
		names = append(names, fe.Field)
	}
	require.Equal(t, []string{"status", "interface", "client_id", "since", "until"}, names)
}
