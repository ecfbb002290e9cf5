package httpx

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies describes the TLS-terminating proxies in front of the server.
// Forwarded headers are honoured only on connections from them; from anyone
// else they are ignored, so a stranger cannot choose the Host we route by
// or the address we rate-limit.
type Proxies struct {
	Trusted []netip.Prefix
}

func (p Proxies) trusts(a netip.Addr) bool {
	for _, pre := range p.Trusted {
		if pre.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

func remoteAddr(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err == nil
}

// Middleware rewrites r.Host from X-Forwarded-Host and r.RemoteAddr from
// X-Forwarded-For when the connection comes from a trusted proxy. The
// client is the right-most X-Forwarded-For address that is not itself a
// trusted proxy.
func (p Proxies) Middleware(next http.Handler) http.Handler {
	if len(p.Trusted) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, ok := remoteAddr(r)
		if !ok || !p.trusts(peer) {
			next.ServeHTTP(w, r)
			return
		}
		if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
			if first, _, _ := strings.Cut(fh, ","); strings.TrimSpace(first) != "" {
				r.Host = strings.TrimSpace(first)
			}
		}
		client := peer
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			client = a.Unmap()
			if !p.trusts(client) {
				break
			}
		}
		r.RemoteAddr = netip.AddrPortFrom(client, 0).String()
		next.ServeHTTP(w, r)
	})
}

// HostOnly returns the host of a Host header value without its port,
// lowercased, with any trailing dot removed.
func HostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
