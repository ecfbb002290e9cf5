package httpx

import "net/http"

// PageHeaders sets the headers every HTML page we serve carries, with csp
// as its Content-Security-Policy: never framed, never sniffed, no Referer
// (page URLs can carry codes and OAuth parameters), no window reference
// kept by an opener, and never stored (pages carry CSRF tokens and
// account details). The console, the issuer's pages and the browser-join
// page share it, so a hardening of one reaches all.
func PageHeaders(h http.Header, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}
