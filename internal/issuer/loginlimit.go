package issuer

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// LoginRates are how many sign-in attempts a minute one Company's pages
// take on this replica, checked before anything is counted or hashed.
// Over a rate the login page answers 429 with Retry-After (spec 5.6).
type LoginRates struct {
	// PerAddress is from one client address; an IPv6 /64, which one
	// subscriber usually holds whole, counts as one address. Default 30.
	PerAddress int
	// PerCompany is from every address together. Default 600.
	PerCompany int
}

func (l LoginRates) withDefaults() LoginRates {
	if l.PerAddress <= 0 {
		l.PerAddress = 30
	}
	if l.PerCompany <= 0 {
		l.PerCompany = 600
	}
	return l
}

// LoginAllowed counts a sign-in attempt at the request's Company against
// the rates. Over one it sets Retry-After and returns false. The address
// is checked first, so one client's excess does not use up the Company's
// budget. The Company console's password sign-in counts against the same
// rates as the issuer's pages.
func (s *Server) LoginAllowed(w http.ResponseWriter, r *http.Request) bool {
	id := strconv.FormatInt(tenant.FromContext(r.Context()).ID, 10)
	if s.limiter.Exceeded(w, "login address "+id+" "+loginAddr(r), s.rates.PerAddress) {
		s.metrics.limited.WithLabelValues("address").Inc()
		return false
	}
	if s.limiter.Exceeded(w, "login company "+id, s.rates.PerCompany) {
		s.metrics.limited.WithLabelValues("company").Inc()
		return false
	}
	return true
}

// loginAddr is the client address an attempt counts against: the address
// itself, or its /64 for IPv6. r.RemoteAddr is already the client's when
// it came through a trusted proxy (httpx.Proxies).
func loginAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if a = a.Unmap(); a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	return a.String()
}
