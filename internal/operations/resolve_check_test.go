package operations

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResolveRequestContentType: a resolution's response.content_type,
// replayed as the Content-Type of later retries, must be a media type of
// bounded length; an empty one is left out.
func TestResolveRequestContentType(t *testing.T) {
	t.Parallel()
	yes := true
	check := func(ct string) error {
		return (&ResolveRequest{Performed: &yes, By: "ops",
			Response: &ResolveResponse{Status: 200, ContentType: ct}}).check()
	}
	require.NoError(t, check(""))
	require.NoError(t, check("application/json"))
	require.NoError(t, check("text/plain; charset=utf-8"))
	for _, bad := range []string{"not a type", "text/plain\r\nSet-Cookie: a=b", "text/" + strings.Repeat("x", 300)} {
		err := check(bad)
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "response.content_type")
	}
}
