package httpx

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/poppyhost/poppyhost/internal/tracing"
)

type ctxKey int

const (
	requestKey ctxKey = iota
	loggerKey
)

// request is what Instrument keeps of a request for the handlers under
// it, in one context value: the context net/http gave it (ClientGone), its
// ID, the route pattern the router matched, and its logger, made on first
// use (most requests log nothing but the access line, which needs none).
type request struct {
	server  context.Context
	id      string
	pattern string // set by RecordRoute, read once the handlers returned
	base    *slog.Logger
	logger  atomic.Pointer[slog.Logger]
}

func requestOf(ctx context.Context) *request {
	rq, _ := ctx.Value(requestKey).(*request)
	return rq
}

// log returns the request's logger: base's, carrying the request ID, whose
// errors after the client hung up are logged at debug level.
func (rq *request) log() *slog.Logger {
	if l := rq.logger.Load(); l != nil {
		return l
	}
	l := slog.New(hangupHandler{rq.base.Handler(), rq.server}).With(slog.String("request_id", rq.id))
	if rq.logger.CompareAndSwap(nil, l) {
		return l
	}
	return rq.logger.Load()
}

// RecordRoute is a chi middleware that reports the matched route pattern
// to Instrument. Use it first on every top-level router.
func RecordRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Deferred so that a panicking handler is still labelled.
		defer func() {
			if rq := requestOf(r.Context()); rq != nil {
				if rctx := chi.RouteContext(r.Context()); rctx != nil {
					rq.pattern = rctx.RoutePattern()
				}
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// RequestID returns the request's ID, or "" outside a request.
func RequestID(ctx context.Context) string {
	if rq := requestOf(ctx); rq != nil {
		return rq.id
	}
	return ""
}

// Logger returns the request's logger (carrying its request ID), or the
// default logger outside a request.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey).(*slog.Logger); ok {
		return l
	}
	if rq := requestOf(ctx); rq != nil {
		return rq.log()
	}
	return slog.Default()
}

// WithLogger returns ctx carrying logger; used where work outside a request
// should log like one.
func WithLogger(ctx context.Context, logger *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey, logger)
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newRequestID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// validRequestID accepts an incoming X-Request-ID only when it is short and
// plain, so a stranger cannot inject text into our logs.
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Metrics are the HTTP metrics every request updates. Labels are route
// patterns, never raw paths, so IDs and tokens cannot become label values.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	conns    prometheus.Gauge
}

// NewMetrics registers the HTTP metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poppyhost_http_requests_total",
			Help: "HTTP requests served, by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "poppyhost_http_request_duration_seconds",
			Help:    "Time to serve HTTP requests, by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poppyhost_http_connections_open",
			Help: "Connections the public listener holds open, idle ones included.",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.conns)
	return m
}

// ConnState counts the connections a server holds open in m, as an
// http.Server's ConnState hook.
func (m *Metrics) ConnState(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		m.conns.Inc()
	case http.StateClosed, http.StateHijacked:
		m.conns.Dec()
	}
}

// knownMethod keeps the method label bounded.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// Instrument wraps the whole server: request ID, request logger, panic
// recovery, access log and metrics. The route label is filled in by the
// router that matched (chi's route pattern). A request whose client went
// away before a successful answer is counted and logged with status 499
// (StatusClientClosedRequest), and what its handlers log as errors after
// the hang-up is logged at debug level.
func Instrument(base *slog.Logger, m *Metrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-ID")
		if !validRequestID(id) {
			id = newRequestID()
		}
		rq := &request{server: r.Context(), id: id, base: base}
		ctx := context.WithValue(r.Context(), requestKey, rq)
		ctx, span := tracing.StartRoot(ctx, "HTTP", trace.SpanKindServer)
		r = r.WithContext(ctx)
		w.Header().Set("X-Request-ID", id)
		rec := &statusRecorder{ResponseWriter: w}

		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				// A panic is a bug whoever hung up.
				base.With(slog.String("request_id", id)).ErrorContext(ctx, "panic", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				if !rec.wroteHeader {
					WriteError(rec, r, Errorf(CodeInternal, "internal error"))
				}
			}
			pattern := rq.pattern
			if pattern == "" {
				pattern = "unmatched"
			}
			status := rec.status
			if ClientGone(r) && (status == 0 || status >= 500) {
				status = StatusClientClosedRequest
			} else if status == 0 {
				status = http.StatusOK
			}
			elapsed := time.Since(start)
			method := knownMethod(r.Method)
			if span.IsRecording() {
				endServerSpan(span, method, pattern, status)
			}
			m.requests.WithLabelValues(pattern, method, strconv.Itoa(status)).Inc()
			m.duration.WithLabelValues(pattern, method).Observe(elapsed.Seconds())
			// The access line is logged at info level, which the request
			// logger's hang-up rule never changes: base logs it, with the
			// request ID first as that logger would put it.
			base.LogAttrs(ctx, slog.LevelInfo, "request",
				slog.String("request_id", id),
				slog.String("method", r.Method),
				slog.String("host", r.Host),
				slog.String("path", r.URL.Path),
				slog.String("route", pattern),
				slog.Int("status", status),
				slog.Int64("bytes", rec.bytes),
				slog.Duration("duration", elapsed),
			)
		}()
		next.ServeHTTP(rec, r)
	})
}

// endServerSpan names a request's span by its route pattern and records
// how it ended; the raw path and query are left out, since they can carry
// identifiers and tokens.
func endServerSpan(span trace.Span, method, pattern string, status int) {
	span.SetName(method + " " + pattern)
	outcome := "success"
	switch {
	case status == StatusClientClosedRequest:
		outcome = "client_gone"
	case status >= 500:
		outcome = "server_error"
		span.SetStatus(codes.Error, "server error")
	case status >= 400:
		outcome = "client_error"
	}
	span.SetAttributes(
		attribute.String("http.request.method", method),
		attribute.String("http.route", pattern),
		attribute.Int("http.response.status_code", status),
		attribute.String("poppyhost.outcome", outcome))
	span.End()
}

// handlerFrame is how much stack GrowStack asks for: the runtime then
// gives the goroutine a 32 KiB stack, about what a gateway call's
// handlers reach (the Session's JSON, pgx, the origin call).
const handlerFrame = 16 << 10

// GrowStack is a middleware that grows the request goroutine's stack to
// what short, deep handlers need in one step, before they run. net/http
// runs every HTTP/2 request on a new goroutine with a small stack, which
// otherwise grows by doubling deep in the handlers (the routers' tree
// search, the Session's JSON, pgx), each time copying every frame: about
// a tenth of a gateway call's CPU (issue 19). Mount it as far out as
// possible, where the stack is shallow and copying it cheap, but inside
// conversations.ParkStreams: a stream that waits there would otherwise
// keep the larger stack while it waits, until a garbage collection
// shrinks it.
func GrowStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		growStack()
		next.ServeHTTP(w, r)
	})
}

// growStack needs a frame of handlerFrame bytes, so calling it grows
// the stack at once.
//
//go:noinline
func growStack() {
	var frame [handlerFrame]byte
	touch(frame[:])
}

// touch keeps growStack's frame from being optimized away.
//
//go:noinline
func touch(b []byte) { b[len(b)-1] = 0 }

type statusRecorder struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.status = code
		s.wroteHeader = true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wroteHeader {
		s.WriteHeader(http.StatusOK)
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// OneAuthorization refuses a request with more than one Authorization
// header field: 400 invalid_request. Readers of credentials take the first
// field (Header.Get, Request.BasicAuth), so with two, which one counts
// would depend on the reader, and a proxy in front may have checked
// another one. RFC 9110 §5.3 allows repeating only fields whose value is a
// list, and Authorization is not one. Use it on every top-level router.
func OneAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values("Authorization")) > 1 {
			WriteError(w, r, Errorf(CodeInvalidRequest, "the request has more than one Authorization header; send one"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// DiscoveryCacheControl is sent with every discovery document (poppy.json
// and the metadata documents). One minute bounds how long a settings
// change can take to reach Personal Agents.
const DiscoveryCacheControl = "public, max-age=60"
