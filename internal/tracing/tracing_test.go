package tracing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/poppyhost/poppyhost/internal/tracing"
)

// env is a getenv reading vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestSetupOffWithoutOTELVariables: with no OTEL_* variable set, Setup
// leaves tracing off: the provider is the no-op one, and Start makes no
// span and leaves the context as it was.
func TestSetupOffWithoutOTELVariables(t *testing.T) {
	tp, shutdown, err := tracing.Setup(context.Background(), env(nil))
	require.NoError(t, err)
	require.IsType(t, noop.TracerProvider{}, tp)
	require.NoError(t, shutdown(context.Background()))
	require.False(t, tracing.Enabled())

	ctx := context.Background()
	got, span := tracing.Start(ctx, "x", trace.SpanKindInternal)
	require.Equal(t, ctx, got)
	require.False(t, span.IsRecording())
	require.False(t, span.SpanContext().IsValid())

	allocs := testing.AllocsPerRun(100, func() {
		_, span := tracing.StartRoot(ctx, "HTTP", trace.SpanKindServer)
		span.End()
		tracing.SetCompany(ctx, "shop")
	})
	require.Zero(t, allocs, "tracing costs no allocation when off")
}

// TestConfigured: the standard variables that turn traces on and off.
func TestConfigured(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "poppyhost"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		require.Equal(t, c.want, tracing.Configured(env(c.vars)), "%v", c.vars)
	}
}
