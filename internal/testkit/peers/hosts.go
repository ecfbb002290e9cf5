package peers

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
)

// Hosts is a static resolver: every name registered resolves to loopback.
type Hosts struct {
	mu    sync.Mutex
	names map[string]bool
}

// Add registers a host name.
func (h *Hosts) Add(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names == nil {
		h.names = map[string]bool{}
	}
	h.names[strings.ToLower(name)] = true
}

// LookupNetIP resolves registered names to 127.0.0.1.
func (h *Hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names[strings.ToLower(host)] {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
