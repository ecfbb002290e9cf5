package demoshop

import (
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// APIRegistration is the body of PUT /company/v1/apis/orders that
// registers the orders API with the gateway (docs/gateway.md section 2).
func (s *Shop) APIRegistration() map[string]any {
	return map[string]any{"origin": s.APIOrigin(), "description": "Stormline orders: see them, exchange or return an item",
		"openapi": s.OpenAPI(), "timeout_seconds": 10}
}

// accountID is an account's ID as Poppy-Verified states it.
var accountID = regexp.MustCompile(`^[0-9]{1,19}$`)

// Control is the test and operator handler of a shop run on its own
// (cmd/demo-origin serves it on a separate, loopback address):
//
//	POST /seed {"account": "42"}   gives the account the demo orders (204)
//	POST /stall-next-exchange {}   StallNextExchange (204)
//	GET  /registration             what to register with the platform:
//	                               {"api": PUT /company/v1/apis/orders body,
//	                                "tools": {name: PUT /company/v1/tools/{name} body},
//	                                "web_origin": web.origin}
//	GET  /last-verified            the facts of the Poppy-Verified of the
//	                               last API call (404 before the first)
//
// It has no authentication of its own: serve it only where the operator
// alone can reach it. So that a web page the operator visits cannot use it
// either, it refuses a Host that is not loopback (403; DNS rebinding) and
// a POST whose Content-Type is not application/json (415), which a page
// cannot send across origins without a CORS preflight that this handler
// never grants.
func (s *Shop) Control() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /seed", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Account string `json:"account"`
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if !readJSON(w, r, &body) {
			return
		}
		if !accountID.MatchString(body.Account) {
			writeJSON(w, "application/json", http.StatusBadRequest, problemBody("invalid_request", "account must be an account ID in decimal"))
			return
		}
		s.Seed(body.Account)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /stall-next-exchange", func(w http.ResponseWriter, r *http.Request) {
		var body struct{}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if !readJSON(w, r, &body) {
			return
		}
		s.StallNextExchange()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /last-verified", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		last := s.last
		s.mu.Unlock()
		if last == nil {
			writeJSON(w, "application/json", http.StatusNotFound, problemBody("not_found", "no API call has arrived yet"))
			return
		}
		writeJSON(w, "application/json", http.StatusOK, last)
	})
	mux.HandleFunc("GET /registration", func(w http.ResponseWriter, _ *http.Request) {
		tools := map[string]Tool{}
		for _, t := range s.Tools() {
			tools[t.Name] = t
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"api": s.APIRegistration(), "tools": tools, "web_origin": s.WebOrigin()})
	})
	return localOnly(mux)
}

// localOnly refuses requests that a web page could have sent h: a Host
// that is not loopback, and a POST that is not JSON.
func localOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			writeJSON(w, "application/json", http.StatusForbidden, problemBody("forbidden", "the control handler answers loopback hosts only"))
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); r.Method == http.MethodPost && (err != nil || mt != "application/json") {
			writeJSON(w, "application/json", http.StatusUnsupportedMediaType,
				problemBody("invalid_request", "the body must be application/json"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine:
// localhost or a loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
