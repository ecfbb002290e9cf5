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

// IsLocalhost names localhost and the names under it, with or without a
// port, in any case and with a trailing dot; nothing else.
func TestIsLocalhost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST.": true, "shop.localhost": true, "shop.localhost:8443": true,
		"Agent.Stormline.Localhost.": true, "localhost:443": true,
		"localhost.example": false, "notlocalhost": false, "example.com": false, "127.0.0.1": false,
		"[::1]:443": false, "": false, "xlocalhost:80": false,
	} {
		require.Equal(t, want, IsLocalhost(host), host)
	}
}
