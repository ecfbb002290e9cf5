package origin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// strippedHeaders never reach an API's origin: the Personal Agent's
// credentials, our cookies (the API proxy is on the platform's host, so
// every cookie there is ours), a Poppy-Verified the caller made up, and claims about
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

// errResponseTooLarge: the origin's answer is larger than allowed.
var errResponseTooLarge = errors.New("origin: response too large")

// Forward sends r, a call of api, to target with Poppy-Verified jwt and
// streams the answer back, without the origin's cookies and within the
// API's limits. modify, when set, may change the origin's final response.
func (c *Caller) Forward(w http.ResponseWriter, r *http.Request, api *registry.API, target *url.URL, jwt string,
	modify func(*http.Response) error) {
	c.relay(w, r, c.api, &Relay{
		Modify:      modify,
		Target:      target,
		Timeout:     time.Duration(api.TimeoutSeconds) * time.Second,
		MaxResponse: api.MaxResponseBytes,
		Rewrite: func(out *http.Request) {
			for _, h := range strippedHeaders {
				out.Header.Del(h)
			}
			out.Header.Set(verified.Header, jwt)
		},
		// An origin may not set cookies on the platform's host, where they
		// would reach other Companies' pages.
		Head: func(_ int, h http.Header) { h.Del("Set-Cookie") },
		Fail: func(w http.ResponseWriter, r *http.Request, code string, cause error) {
			switch code {
			case httpx.CodeRequestTooLarge:
				httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRequestTooLarge, "the body is larger than this API's %d bytes", api.MaxRequestBytes))
			case CodeTooLarge:
				apiError(w, r, api, http.StatusBadGateway, code,
					"the Company's origin answered with more than this API allows", cause)
			case CodeTimeout:
				apiError(w, r, api, http.StatusGatewayTimeout, code,
					"the Company's origin did not answer in time", cause)
			default:
				apiError(w, r, api, http.StatusBadGateway, code,
					"the Company's origin could not be reached", cause)
			}
		},
	})
}

// Relay is one request forwarded to an origin with
// httputil.ReverseProxy: an API call (Forward) or a website request. The
// timeout bounds each wait for the origin: for its response headers, and
// then between reads of its body, so an origin that stops answering ends
// the call instead of holding it.
type Relay struct {
	Target  *url.URL
	Timeout time.Duration
	// MaxResponse bounds the origin's answer; 0 leaves it unbounded.
	MaxResponse int64
	// Upgrades lets a 101 Switching Protocols answer through (WebSocket):
	// the connection then belongs to the two ends, without the timeout.
	Upgrades bool
	// Rewrite finishes the request to the origin, whose X-Forwarded-*
	// headers are already gone.
	Rewrite func(out *http.Request)
	// Modify, when set, checks or changes the origin's final response
	// head; an error fails the call as unreachable.
	Modify func(resp *http.Response) error
	// Head, when set, changes every response head as it is written, 1xx
	// ones included: httputil.ReverseProxy forwards an origin's
	// informational responses (103 Early Hints) itself, before Modify
	// sees the final one.
	Head func(code int, h http.Header)
	// Fail answers a failed call; code is httpx.CodeRequestTooLarge (the
	// request body passed an http.MaxBytesReader's limit), CodeTooLarge,
	// CodeTimeout or CodeUnreachable.
	Fail func(w http.ResponseWriter, r *http.Request, code string, cause error)
}

// unbounded stands for no limit on an origin's answer.
const unbounded = 1 << 62

// Relay forwards r, a website request, as rl describes and streams the
// answer back.
func (c *Caller) Relay(w http.ResponseWriter, r *http.Request, rl *Relay) { c.relay(w, r, c.web, rl) }

// relay is Relay through transport.
func (c *Caller) relay(w http.ResponseWriter, r *http.Request, transport http.RoundTripper, rl *Relay) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(rl.Timeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer timer.Stop()
	limit := rl.MaxResponse
	if limit <= 0 {
		limit = unbounded
	}

	proxy := &httputil.ReverseProxy{
		Transport:  transport,
		ErrorLog:   c.errorLog,
		BufferPool: copyBuffers,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = rl.Target
			pr.Out.Host = ""
			stripForwarded(pr.Out.Header)
			rl.Rewrite(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			timer.Reset(rl.Timeout)
			if rl.Modify != nil {
				if err := rl.Modify(resp); err != nil {
					return err
				}
			}
			if resp.StatusCode == http.StatusSwitchingProtocols && rl.Upgrades {
				// httputil.ReverseProxy needs the body as it is, to write
				// to; the upgraded connection is not the origin's
				// silence.
				timer.Stop()
				return nil
			}
			if resp.ContentLength > limit {
				return errResponseTooLarge
			}
			resp.Body = &originBody{r: resp.Body, left: limit, timer: timer, timeout: rl.Timeout}
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
				rl.Fail(w, r, httpx.CodeRequestTooLarge, err)
			case errors.Is(err, errResponseTooLarge):
				rl.Fail(w, r, CodeTooLarge, err)
			case timedOut.Load():
				rl.Fail(w, r, CodeTimeout, err)
			default:
				rl.Fail(w, r, CodeUnreachable, err)
			}
		},
	}
	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		// A slow upload is the caller's pace, not the origin's silence.
		out.Body = &pacedBody{r: r.Body, timer: timer, timeout: rl.Timeout}
	}
	var rw http.ResponseWriter = w
	if rl.Head != nil {
		rw = headWriter{w, rl.Head}
	}
	proxy.ServeHTTP(rw, out)
}

// copyBuffers lends httputil.ReverseProxy the buffers it copies answers
// through, which it otherwise allocates anew (32 KiB) for every call.
var copyBuffers = &bufferPool{}

// bufferPool is an httputil.BufferPool of 32 KiB buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == 32<<10 {
		buf = buf[:cap(buf)]
		b.p.Put(&buf)
	}
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

// headWriter lets a Relay change each response head as it is written.
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

// apiError answers a failed API call with a JSON error and logs its cause.
func apiError(w http.ResponseWriter, r *http.Request, api *registry.API, status int, code, desc string, cause error) {
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
