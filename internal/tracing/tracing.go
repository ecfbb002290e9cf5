package tracing

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scope names the instrumentation in every span.
const scope = "github.com/poppyhost/poppyhost"

// enabled is whether spans are made; Use sets it.
var enabled atomic.Bool

// Enabled reports whether tracing is on.
func Enabled() bool { return enabled.Load() }

// Configured reports whether the environment asks for traces: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none.
func Configured(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exporter {
	case "otlp":
		return true
	case "":
	default:
		// "none", or an exporter we do not ship.
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup turns tracing on when the environment asks for it (Configured):
// spans go in batches over OTLP/HTTP to the collector the standard
// OTEL_EXPORTER_OTLP_* variables name, and the resource is described by
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name defaults to
// poppyhost). Otherwise it leaves tracing off and returns the no-op
// provider. getenv decides whether tracing is on; the exporter itself
// reads the process's environment. shutdown flushes the spans not yet
// sent.
func Setup(ctx context.Context, getenv func(string) string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !Configured(getenv) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "poppyhost")), resource.Default())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, nil, err
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	Use(provider)
	return provider, provider.Shutdown, nil
}

// Use turns tracing on with tp and the W3C TraceContext propagator. Setup
// calls it; tests call it with a provider that records in memory.
func Use(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	enabled.Store(true)
}

// Start opens a span named name of kind as a child of ctx's span, when
// tracing is on. When it is off it returns ctx and a span that records
// nothing, without allocating.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return otel.Tracer(scope).Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// StartRoot is Start for a new trace: a request from outside the
// platform starts one, whatever trace context it claims to carry.
func StartRoot(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return otel.Tracer(scope).Start(ctx, name, trace.WithSpanKind(kind), trace.WithNewRoot())
}

// SetCompany names the Company on ctx's span, when tracing is on.
func SetCompany(ctx context.Context, slug string) {
	if !enabled.Load() || slug == "" {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String(CompanyKey, slug))
}

// CompanyKey is the attribute naming a request's Company by its slug.
const CompanyKey = "poppyhost.company"

// StartLinked is StartRoot for work done on behalf of an earlier trace
// (a job a request inserted): the new trace links to from.
func StartLinked(ctx context.Context, name string, kind trace.SpanKind, from trace.SpanContext) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return otel.Tracer(scope).Start(ctx, name, trace.WithSpanKind(kind), trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: from}))
}
