package safehttp

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// IsLocalhost reports whether host, a host name with or without a port,
// is localhost or a name under .localhost, which resolve to loopback
// (RFC 6761 section 6.3), in any case and with or without the trailing
// dot of a fully qualified name.
func IsLocalhost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// LocalhostResolver resolves localhost and every name under .localhost
// to 127.0.0.1 (RFC 6761 section 6.3), which the system resolver may not,
// so that a client reaches a dev-mode demo served on this machine as
// *.localhost. Other names go to the system resolver. It only names the
// address: a Client still refuses loopback unless AllowPrivate is set.
type LocalhostResolver struct{}

// LookupNetIP implements Resolver.
func (LocalhostResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if IsLocalhost(host) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}
