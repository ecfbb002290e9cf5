package console_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// readBody reads and closes resp's body.
func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
