package gateway

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// strippedHeaders never reach an origin: the Personal Agent's credentials,
// our cookies (the gateway is on the platform's host, so every cookie
// there is ours), a Poppy-Verified the caller made up, and claims about
// the connection the origin could mistake for ours. Hop-by-hop headers
// are dropped by httputil.ReverseProxy, as is every X-Forwarded-* header
// (stripForwarded). Poppy-Approval and Idempotency-Key are stripped too:
// an approval reaches an origin only as the platform states it in
// Poppy-Verified, and only the platform sets Idempotency-Key, for an
// approved revision (operations.Engine), so an origin can trust both.
var strippedHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Poppy-Session", "DPoP",
	verified.Header, "Forwarded", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", operations.ApprovalHeader,
	IdempotencyKeyHeader}

// IdempotencyKeyHeader is the header an origin may trust to name one
// approved revision (draft-ietf-httpapi-idempotency-key-header).
const IdempotencyKeyHeader = "Idempotency-Key"

// stripForwarded removes every X-Forwarded-* header: Personal Agents
// could otherwise tell the origin where a request came from.
func stripForwarded(h http.Header) {
	for name := range h {
		if strings.HasPrefix(name, "X-Forwarded-") {
			delete(h, name)
		}
	}
}

// errResponseTooLarge: the origin's answer is larger than the API allows.
var errResponseTooLarge = errors.New("gateway: origin response too large")

// forward sends r to target with Poppy-Verified jwt and streams the answer
// back, without the origin's cookies and within the API's limits.
// modify, when set, may change the origin's final response.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, api *API, target *url.URL, jwt string,
	modify func(*http.Response) error) {
	c := &relay{
		modify:      modify,
		transport:   g.transport,
		errorLog:    g.errorLog,
		target:      target,
		timeout:     time.Duration(api.TimeoutSeconds) * time.Second,
		maxResponse: api.MaxResponseBytes,
		rewrite: func(out *http.Request) {
			for _, h := range strippedHeaders {
				out.Header.Del(h)
			}
			out.Header.Set(verified.Header, jwt)
		},
		// An origin may not set cookies on the platform's host, where they
		// would reach other Companies' pages.
		head: func(_ int, h http.Header) { h.Del("Set-Cookie") },
		fail: func(w http.ResponseWriter, r *http.Request, code string, cause error) {
			switch code {
			case httpx.CodeRequestTooLarge:
				httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRequestTooLarge, "the body is larger than this API's %d bytes", api.MaxRequestBytes))
			case CodeOriginTooLarge:
				g.originError(w, r, api, http.StatusBadGateway, code,
					"the Company's origin answered with more than this API allows", cause)
			case CodeOriginTimeout:
				g.originError(w, r, api, http.StatusGatewayTimeout, code,
					"the Company's origin did not answer in time", cause)
			default:
				g.originError(w, r, api, http.StatusBadGateway, code,
					"the Company's origin could not be reached", cause)
			}
		},
	}
	c.serve(w, r)
}

// relay is one request forwarded to an origin with httputil.ReverseProxy:
// an API gateway call (forward) or a website request (Website). The
// timeout bounds each wait for the origin: for its response headers, and
// then between reads of its body, so an origin that stops answering ends
// the call instead of holding it.
type relay struct {
	transport http.RoundTripper
	errorLog  *log.Logger
	target    *url.URL
	timeout   time.Duration
	// maxResponse bounds the origin's answer; 0 leaves it unbounded.
	maxResponse int64
	// upgrades lets a 101 Switching Protocols answer through (WebSocket):
	// the connection then belongs to the two ends, without the timeout.
	upgrades bool
	// rewrite finishes the request to the origin, whose X-Forwarded-*
	// headers are already gone.
	rewrite func(out *http.Request)
	// modify, when set, checks or changes the origin's final response
	// head; an error fails the call as unreachable.
	modify func(resp *http.Response) error
	// head, when set, changes every response head as it is written, 1xx
	// ones included: httputil.ReverseProxy forwards an origin's
	// informational responses (103 Early Hints) itself, before modify
	// sees the final one.
	head func(code int, h http.Header)
	// fail answers a failed call; code is httpx.CodeRequestTooLarge (the
	// request body passed an http.MaxBytesReader's limit),
	// CodeOriginTooLarge, CodeOriginTimeout or CodeOriginUnreachable.
	fail func(w http.ResponseWriter, r *http.Request, code string, cause error)
}

// unbounded stands for no limit on an origin's answer.
const unbounded = 1 << 62

func (c *relay) serve(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(c.timeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer timer.Stop()
	limit := c.maxResponse
	if limit <= 0 {
		limit = unbounded
	}

	proxy := &httputil.ReverseProxy{
		Transport: c.transport,
		ErrorLog:  c.errorLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = c.target
			pr.Out.Host = ""
			stripForwarded(pr.Out.Header)
			c.rewrite(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			timer.Reset(c.timeout)
			if c.modify != nil {
				if err := c.modify(resp); err != nil {
					return err
				}
			}
			if resp.StatusCode == http.StatusSwitchingProtocols && c.upgrades {
				// httputil.ReverseProxy needs the body as it is, to write
				// to; the upgraded connection is not the origin's
				// silence.
				timer.Stop()
				return nil
			}
			if resp.ContentLength > limit {
				return errResponseTooLarge
			}
			resp.Body = &originBody{r: resp.Body, left: limit, timer: timer, timeout: c.timeout}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var tooBig *http.MaxBytesError
			switch {
			case httpx.BodyTimedOut(r), httpx.ClientGone(r):
				// The caller's doing, not the origin's: request_timeout
				// or client_closed_request (httpx.PaceBodies).
				httpx.WriteError(w, r, err)
			case errors.As(err, &tooBig):
				c.fail(w, r, httpx.CodeRequestTooLarge, err)
			case errors.Is(err, errResponseTooLarge):
				c.fail(w, r, CodeOriginTooLarge, err)
			case timedOut.Load():
				c.fail(w, r, CodeOriginTimeout, err)
			default:
				c.fail(w, r, CodeOriginUnreachable, err)
			}
		},
	}
	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		// A slow upload is the caller's pace, not the origin's silence.
		out.Body = &pacedBody{r: r.Body, timer: timer, timeout: c.timeout}
	}
	var rw http.ResponseWriter = w
	if c.head != nil {
		rw = headWriter{w, c.head}
	}
	proxy.ServeHTTP(rw, out)
}

// pacedBody pushes the origin's timeout back as the request body is read.
type pacedBody struct {
	r       io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.timer.Reset(b.timeout)
	return n, err
}

func (b *pacedBody) Close() error { return b.r.Close() }

// headWriter lets a relay change each response head as it is written.
type headWriter struct {
	http.ResponseWriter
	head func(code int, h http.Header)
}

func (w headWriter) WriteHeader(code int) {
	w.head(code, w.Header())
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (flushing,
// hijacking an upgraded connection).
func (w headWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// originError answers a failed call with a JSON error and logs its cause.
func (g *Gateway) originError(w http.ResponseWriter, r *http.Request, api *API, status int, code, desc string, cause error) {
	httpx.Logger(r.Context()).WarnContext(r.Context(), "gateway: origin call failed",
		slog.String("api", api.Name), slog.String("code", code), slog.Any("err", cause))
	httpx.WriteJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// originBody streams an origin's answer: each read pushes the timeout
// back, and more than the API's limit fails the copy, which aborts the
// response rather than passing a cut body off as whole.
type originBody struct {
	r       io.ReadCloser
	left    int64
	timer   *time.Timer
	timeout time.Duration
}

func (b *originBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.timer.Reset(b.timeout)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errResponseTooLarge
	}
	return n, err
}

func (b *originBody) Close() error { return b.r.Close() }
