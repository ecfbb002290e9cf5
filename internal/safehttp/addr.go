package safehttp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// blockedV4 are the IPv4 ranges that are not the public internet (IANA
// special-purpose registry). Documentation and benchmarking ranges are
// blocked too: nothing public is served from them, and some networks use
// them internally, so allowing them could only reach something internal.
var blockedV4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"; 0.0.0.0 reaches localhost on Linux
	netip.MustParsePrefix("10.0.0.0/8"),      // private (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT shared space (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, incl. cloud metadata 169.254.169.254
	netip.MustParsePrefix("172.16.0.0/12"),   // private (RFC 1918)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),  // private (RFC 1918)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, incl. broadcast 255.255.255.255
}

var (
	// globalV6 is the IPv6 global unicast space. Everything outside it is
	// refused: unspecified, loopback, IPv4-compatible, discard-only,
	// unique-local fc00::/7, link-local fe80::/10, site-local, multicast,
	// NAT64 local-use 64:ff9b:1::/48. The one exception, NAT64 well-known
	// 64:ff9b::/96, is judged by the IPv4 address it embeds.
	globalV6 = netip.MustParsePrefix("2000::/3")
	nat64    = netip.MustParsePrefix("64:ff9b::/96")

	// blockedV6 are the non-public ranges inside globalV6.
	blockedV6 = []netip.Prefix{
		netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments: Teredo, benchmarking, ORCHID
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("2002::/16"),     // deprecated 6to4, embeds any IPv4 address
		netip.MustParsePrefix("3fff::/20"),     // documentation (RFC 9637)
	}
)

// blockedAddr reports whether ip is anything but a public unicast address:
// spec 3 "Redirects and addresses" forbids connecting to loopback, private
// and link-local addresses for a URL a stranger gave us.
func blockedAddr(ip netip.Addr) bool {
	if !ip.IsValid() || ip.Zone() != "" {
		// A zone only makes sense for a scoped (link-local) address.
		return true
	}
	// ::ffff:10.0.0.1 is 10.0.0.1 on the wire.
	ip = ip.Unmap()
	if ip.Is6() {
		if nat64.Contains(ip) {
			b := ip.As16()
			return blockedAddr(netip.AddrFrom4([4]byte(b[12:])))
		}
		if !globalV6.Contains(ip) {
			return true
		}
		for _, p := range blockedV6 {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	for _, p := range blockedV4 {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// minDialPerAddr is the least time a dial attempt gets before the next
// address is tried, as net.Dialer does with several addresses.
const minDialPerAddr = 2 * time.Second

// dialContext is the transport's DialContext. It resolves host itself,
// refuses the name when any resolved address is blocked, and dials only the
// checked IPs, so what was checked is what is connected to.
func (c *Client) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port: %w", address, err)
	}
	// DialTimeout covers resolution and connecting, as net.Dialer.Timeout.
	ctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()

	ips := make([]netip.Addr, 1)
	literal := false
	if ips[0], err = netip.ParseAddr(host); err == nil {
		literal = true
	} else {
		ips, err = c.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	for i, ip := range ips {
		// Resolvers return IPv4 as ::ffff:a.b.c.d; dial what was checked.
		ip = ip.Unmap()
		ips[i] = ip
		if c.blocked != nil && c.blocked(ip) {
			if literal {
				return nil, fmt.Errorf("%w: %s", ErrBlockedAddress, host)
			}
			// One bad address spoils the name: a stranger's DNS chooses
			// the order and the transport may try any of them.
			return nil, fmt.Errorf("%w: %s resolves to %s", ErrBlockedAddress, host, ip)
		}
	}

	var firstErr error
	for i, ip := range ips {
		conn, err := c.dialOne(ctx, network, netip.AddrPortFrom(ip, uint16(port)), len(ips)-i)
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s: %w", host, firstErr)
}

// dialOne connects to one checked address. With several addresses left it
// gets its share of the remaining time (at least minDialPerAddr), so one
// unresponsive address does not use up the whole budget.
func (c *Client) dialOne(ctx context.Context, network string, ap netip.AddrPort, left int) (net.Conn, error) {
	if deadline, ok := ctx.Deadline(); ok && left > 1 {
		per := max(time.Until(deadline)/time.Duration(left), minDialPerAddr)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, per)
		// The context only bounds connecting; cancelling it after
		// success does not affect the connection.
		defer cancel()
	}
	return c.dialer.DialContext(ctx, network, ap.String())
}

// control is the net.Dialer's Control func: a second check, on the socket
// address itself, in case anything ever dials without dialContext's check.
func (c *Client) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrBlockedAddress, address)
	}
	if c.blocked(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, ap.Addr())
	}
	return nil
}
