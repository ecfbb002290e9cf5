package safehttp

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// registrationMissed are the literals the gateway's registration check
// (netip's IsLoopback, IsPrivate, IsLinkLocalUnicast, IsUnspecified,
// IsMulticast) accepted and the dialler then refused on every call.
var registrationMissed = []string{
	"0.1.2.3", "100.64.0.1", "100.127.255.255", "192.0.0.1", "192.0.2.1", "192.88.99.1",
	"198.18.0.1", "198.19.255.255", "198.51.100.1", "203.0.113.1", "240.0.0.1", "255.255.255.255",
	"::ffff:100.64.0.1", "::127.0.0.1", "::10.0.0.1", "100::1", "fec0::1", "2001::1", "2001:2::1",
	"2001:10::1", "2001:db8::1", "2002:7f00:1::1", "2002:a00:1::1", "3fff::1", "5f00::1",
	"64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::808:808",
	"2606:4700:4700::1111%eth0",
}

// TestCheckHostIsTheDialRule: for an IP literal, CheckHost refuses
// exactly what the dialler refuses, including every range registration
// used to accept, and with AllowPrivate nothing.
func TestCheckHostIsTheDialRule(t *testing.T) {
	t.Parallel()
	c := New(Options{})
	for _, s := range append(blockedLiterals, registrationMissed...) {
		require.ErrorIs(t, CheckHost(s, false), ErrBlockedAddress, s)
		require.NoError(t, CheckHost(s, true), s)
		_, err := c.dialContext(t.Context(), "tcp", net.JoinHostPort(s, "443"))
		require.ErrorIs(t, err, ErrBlockedAddress, "the dialler refuses %s too", s)
	}
	for _, s := range allowedLiterals {
		require.NoError(t, CheckHost(s, false), s)
		require.False(t, blockedAddr(netip.MustParseAddr(s)), "the dialler allows %s too", s)
	}
}

func TestCheckHostNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host    string
		refused bool
	}{
		{"localhost", true},
		{"LOCALHOST.", true},
		{"orders.localhost", true},
		{"127.0.0.1.", true}, // a trailing dot names the same host
		{"100.64.0.1.", true},
		// Names that need DNS are checked when dialled, on what they
		// resolve to then.
		{"orders.example.com", false},
		{"localhost.example.com", false},
		{"internal.test", false},
	} {
		err := CheckHost(tc.host, false)
		if tc.refused {
			require.ErrorIs(t, err, ErrBlockedAddress, tc.host)
		} else {
			require.NoError(t, err, tc.host)
		}
		require.NoError(t, CheckHost(tc.host, true), tc.host)
	}
}

// TestValidPath is the one path rule. before records what the three
// checks it replaces said: gw is the gateway's (calls and CheckRequest),
// prop a conversation proposal's perform.path, rule a website scope
// rule's path (webPath and dotSegments on the decoded path), as "gw prop
// rule" with y for accepted and n for refused. Rows where they
// disagreed, or all accepted what is now refused, are the reason for the
// rule.
func TestValidPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path   string
		before string
		ok     bool
	}{
		{"/orders/1", "y y y", true},
		{"/", "y y y", true},
		{"/a%20b", "y y y", true},
		{"/..a", "y y y", true},
		{"/a..", "y y y", true},
		{"/a;b=1", "y y y", true},
		{"/a/.well-known/x", "y y y", true},
		// An empty segment is no dot segment (scope rules add their own
		// check: they compare paths with repeated slashes merged).
		{"/a//b", "y y n", true},

		{"/..", "n n n", false},
		{"/a/../b", "n n n", false},
		{"/.", "n n n", false},
		{"/%2e%2e/x", "n n n", false},
		{"/%2E./x", "n n n", false},
		{"/%zz", "n n n", false},
		// Path parameters on dot segments: servers that drop them before
		// resolving read "..;x" as "..".
		{"/..;/x", "n y y", false},
		{"/..;x/y", "n y y", false},
		{"/%2e%2e;x=1/y", "n y y", false},
		{"/..%3B", "n y y", false},
		{"/.;", "n y y", false},
		{"/a/.;x", "n y y", false},
		// Encoded slashes and backslashes, and literal backslashes.
		{"/a/%2f/b", "n n n", false},
		{"/a%2Fb", "n n y", false},
		{"/a%5Cb", "n n y", false},
		{`/a\b`, "y n n", false},
		{`/a/..\x`, "y n n", false},
		// NUL and other control characters.
		{"/a%00b", "y n y", false},
		{"/a%0d%0ab", "y y y", false},
		{"/a%09b", "y y y", false},
		{"/a%7fb", "y y y", false},
		// An encoded ? or # is a query or fragment to a server that
		// decodes before it parses.
		{"/a%3Fb", "y n y", false},
		{"/a%23b", "y n y", false},
		{"/a?b", "y n y", false},
		// Encoded twice: what a second decoding makes of it.
		{"/%252e%252e/x", "y y y", false},
		{"/a/%252E./b", "y y y", false},
		{"/a%252fb", "y y y", false},
		{"/a%255cb", "y y y", false},
		{"/a%2500b", "y y y", false},
		{"/%252e%252e%253bx/y", "y y y", false},
		// A second decoding that keeps what it cannot decode, as lenient
		// decoders do, still decodes the rest.
		{"/a%252fb%25zz", "y y y", false},
		{"/a%2500b%25zz", "y y y", false},
		{"/%252E%252e;%25/x", "y y y", false},
		// A literal percent sign, and a name that is an encoded space
		// (a second decoding gives a plain name), stay allowed.
		{"/100%25", "y y y", true},
		{"/a%2520b", "y y y", true},
		{"/a%25zz", "y y y", true},
		// A leading // is a host to URL resolution.
		{"//evil.example/x", "y n n", false},
		// Not an absolute path.
		{"a/b", "y n n", false},
		{"", "y n n", false},
	} {
		require.Equal(t, tc.ok, ValidPath(tc.path), "%q (before: %s)", tc.path, tc.before)
	}
}
