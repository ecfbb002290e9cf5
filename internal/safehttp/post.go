package safehttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// defaultPostMaxBytes is how much of a POST's response is kept.
const defaultPostMaxBytes = 64 << 10

// PostRequest is one POST of a body we built, such as a webhook delivery to
// a URL a Company configured.
type PostRequest struct {
	// URL must be an absolute https URL with a host and no user info.
	URL string
	// Header is sent as given (Content-Type, signatures); the client sets
	// User-Agent.
	Header http.Header
	Body   []byte
	// MaxBytes is how much of the response body is kept; 0 means 64 KiB.
	// A longer body is cut, not refused: a POST's answer is its status.
	MaxBytes int64
	// AnyStatus returns a 4xx or 5xx response with its body instead of
	// ErrStatus, for a caller that reads the error a server sent.
	AnyStatus bool
}

// Post sends req.Body to req.URL with the same address rules as Get. It
// never follows a redirect, which would drop or resend the body to
// another URL: a 3xx is ErrRedirect. Any other status outside 2xx is
// ErrStatus, unless req.AnyStatus.
func (c *Client) Post(ctx context.Context, req PostRequest) (*Response, error) {
	u, err := target(http.MethodPost, req.URL)
	if err != nil {
		return nil, err
	}
	limit := req.MaxBytes
	if limit <= 0 {
		limit = defaultPostMaxBytes
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", redact(u), err)
	}
	hreq.Header = req.Header.Clone()
	if hreq.Header == nil {
		hreq.Header = http.Header{}
	}
	hreq.Header.Set("User-Agent", c.userAgent)
	hc := &http.Client{
		Transport:     c.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("POST %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, fmt.Errorf("POST %s: %w: status %d", redact(u), ErrRedirect, resp.StatusCode)
	case (resp.StatusCode < 200 || resp.StatusCode >= 300) && !req.AnyStatus:
		return nil, fmt.Errorf("POST %s: %w: %d", redact(u), ErrStatus, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("POST %s: read body: %w", redact(u), err)
	}
	return &Response{URL: u.String(), Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}
