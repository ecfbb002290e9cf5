package safehttp

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// LocalhostResolver resolves localhost and every name under .localhost
// to 127.0.0.1 (RFC 6761 section 6.3), which the system resolver may not,
// so that a client reaches a dev-mode demo served on this machine as
// *.localhost. Other names go to the system resolver. It only names the
// address: a Client still refuses loopback unless AllowPrivate is set.
type LocalhostResolver struct{}

// LookupNetIP implements Resolver.
func (LocalhostResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}
