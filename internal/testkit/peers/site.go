package peers

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyhost/poppyhost/internal/devca"
)

// Site is a handler served over HTTPS on one port for every host name, as
// the platform serves its own host and the Companies' domains: a test of
// one package's handlers routes by Host as the platform does.
type Site struct {
	// Client reaches every host name on the site.
	Client *http.Client
	// Port is the site's TCP port.
	Port string
}

// StartSite serves h over HTTPS with certificates from ca until the test
// ends.
func StartSite(t testing.TB, ca *devca.CA, h http.Handler) *Site {
	t.Helper()
	return ServeSite(t, ca, Listen(t), h)
}

// ServeSite is StartSite on ln, for a handler built once its port is
// known.
func ServeSite(t testing.TB, ca *devca.CA, ln net.Listener, h http.Handler) *Site {
	t.Helper()
	StartOn(t, ca, ln, h)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &Site{Client: Client(t, ca, ln.Addr().String()), Port: port}
}

// URL returns the https URL of path on host as the site serves it.
func (s *Site) URL(host, path string) string {
	return "https://" + host + ":" + s.Port + path
}

// Do sends a request. body is as for [NewRequest]. headers are name, value
// pairs; "Host" sets the Host header the server sees.
func (s *Site) Do(t testing.TB, method, rawURL string, body any, headers ...string) *Response {
	t.Helper()
	req := NewRequest(t, method, rawURL, body)
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Host") {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	return Send(t, s.Client, req)
}

// Browser returns a new form-filling browser on the site.
func (s *Site) Browser(t testing.TB) *Browser { return NewBrowser(t, s.Client.Transport) }
