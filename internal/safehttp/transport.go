package safehttp

import (
	"fmt"
	"net/http"
)

// RoundTripper returns a transport for requests the caller builds itself,
// such as the gateway's forwarded calls. Each request's URL must pass
// Get's checks (https, a host, no user info) and its connection the same
// address rules. Being a transport, it follows no redirects and sets no
// timeout: the caller bounds each request with its context.
func (c *Client) RoundTripper() http.RoundTripper { return checkedTransport{c} }

type checkedTransport struct{ c *Client }

func (t checkedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := checkURL(r.URL); err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("%s %s: %w", r.Method, redact(r.URL), err)
	}
	return t.c.transport.RoundTrip(r)
}
