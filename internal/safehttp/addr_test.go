package safehttp

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// blockedLiterals are addresses the dialler refuses; allowedLiterals
// ones it dials. CheckHost's test uses them too.
var (
	blockedLiterals = []string{
		// IPv4
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255",
		"100.64.0.1", "100.127.255.255", "127.0.0.1", "127.255.255.254",
		"169.254.0.1", "169.254.169.254", "172.16.0.1", "172.31.255.255",
		"192.0.0.1", "192.0.2.1", "192.88.99.1", "192.168.0.1", "192.168.255.255",
		"198.18.0.1", "198.19.255.255", "198.51.100.1", "203.0.113.1",
		"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		// IPv4-mapped IPv6 is the IPv4 address on the wire.
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
		"::ffff:0.0.0.0", "::ffff:100.64.0.1", "::ffff:192.168.1.1",
		// IPv6
		"::", "::1", "::127.0.0.1", "::10.0.0.1", "100::1",
		"fc00::1", "fd12:3456:789a::1", "fe80::1", "fe80::1%eth0", "febf::1", "fec0::1",
		"ff02::1", "ff05::2", "ff0e::1",
		"2001::1", "2001:2::1", "2001:10::1", "2001:db8::1", "2002:7f00:1::1",
		"2002:a00:1::1", "3fff::1", "5f00::1",
		// NAT64 is judged by the IPv4 address it embeds; local-use NAT64
		// is private.
		"64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::808:808",
		// Zones only exist for scoped addresses.
		"2606:4700:4700::1111%eth0",
	}
	allowedLiterals = []string{
		"1.1.1.1", "8.8.8.8", "93.184.216.34", "11.0.0.1", "100.63.255.255",
		"100.128.0.0", "126.255.255.255", "128.0.0.1", "169.253.255.255", "169.255.0.1",
		"172.15.255.255", "172.32.0.0", "192.0.1.1", "192.169.0.1", "198.17.255.255",
		"198.20.0.1", "223.255.255.255",
		"::ffff:8.8.8.8", "::ffff:93.184.216.34",
		"2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001::1", "2001:200::1",
		"64:ff9b::808:808",
	}
)

func TestBlockedAddr(t *testing.T) {
	t.Parallel()
	for _, s := range blockedLiterals {
		require.True(t, blockedAddr(netip.MustParseAddr(s)), "%s should be blocked", s)
	}
	for _, s := range allowedLiterals {
		require.False(t, blockedAddr(netip.MustParseAddr(s)), "%s should be allowed", s)
	}
	require.True(t, blockedAddr(netip.Addr{}), "the zero Addr")
}

func TestControlRechecksDialledAddress(t *testing.T) {
	t.Parallel()
	c := New(Options{})
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "[::ffff:10.0.0.1]:443", "169.254.169.254:80", "not-an-address"} {
		require.ErrorIs(t, c.control("tcp", addr, nil), ErrBlockedAddress, addr)
	}
	require.NoError(t, c.control("tcp4", "93.184.216.34:443", nil))
	require.NoError(t, c.control("tcp6", "[2606:4700:4700::1111]:443", nil))

	// AllowPrivate has no Control func and no predicate at all.
	open := New(Options{AllowPrivate: true})
	require.Nil(t, open.blocked)
	require.Nil(t, open.dialer.Control)
}
