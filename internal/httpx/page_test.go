package httpx

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPageHeaders: a page is never framed, sniffed, stored, referred or
// kept by its opener, under the policy it is given.
func TestPageHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	PageHeaders(h, "default-src 'none'")
	require.Equal(t, http.Header{
		"Content-Security-Policy":    {"default-src 'none'"},
		"X-Frame-Options":            {"DENY"},
		"X-Content-Type-Options":     {"nosniff"},
		"Referrer-Policy":            {"no-referrer"},
		"Cross-Origin-Opener-Policy": {"same-origin"},
		"Cache-Control":              {"no-store"},
	}, h)
}
