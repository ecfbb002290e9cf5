package tracing

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Transport wraps rt so that, when tracing is on, every request it sends
// is a client span named "origin" and carries the span's W3C traceparent,
// so the origin can join the trace. Trace headers the caller sent are
// dropped first: the origin sees only ours. When tracing is off requests
// pass through untouched.
func Transport(rt http.RoundTripper) http.RoundTripper { return transport{rt} }

type transport struct{ next http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !enabled.Load() {
		return t.next.RoundTrip(req)
	}
	ctx, span := Start(req.Context(), "origin", trace.SpanKindClient,
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()))
	defer span.End()
	// RoundTrip may not change the caller's request: a copy carries the
	// context, and the headers are cloned before they change.
	req = req.Clone(ctx)
	req.Header.Del("Traceparent")
	req.Header.Del("Tracestate")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		span.SetStatus(codes.Error, "unreachable")
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	return resp, nil
}
