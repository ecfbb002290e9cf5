package safehttp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// LocalhostResolver sends localhost and names under .localhost to
// loopback (RFC 6761), whatever their case or a trailing dot.
func TestLocalhostResolver(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"localhost", "agent.stormline.localhost", "Agent.Stormline.Localhost."} {
		ips, err := LocalhostResolver{}.LookupNetIP(t.Context(), "ip", host)
		require.NoError(t, err, host)
		require.Equal(t, "127.0.0.1", ips[0].String(), host)
	}
}
