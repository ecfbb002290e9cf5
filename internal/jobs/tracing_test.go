package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
	"github.com/poppyhost/poppyhost/internal/tracing"
)

// tracedArgs is a job a traced request inserts.
type tracedArgs struct {
	Secret string `json:"secret"`
}

func (tracedArgs) Kind() string { return "traced_test" }

// TestJobLinkedToInsertingRequest: with tracing on, a job a request
// inserted is worked in a span of its own trace, "job {kind}", linked to
// the request's span, and its arguments are not recorded.
func TestJobLinkedToInsertingRequest(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	tracing.Use(tp)
	pool := testdb.NewPool(t)
	workers := river.NewWorkers()
	worked := make(chan trace.SpanContext, 1)
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, _ *river.Job[tracedArgs]) error {
		worked <- trace.SpanContextFromContext(ctx)
		return nil
	}))
	q, err := jobs.New(pool, jobs.Options{Workers: workers})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, q.Client.Stop(context.Background())) })

	reqCtx, request := tp.Tracer("test").Start(ctx, "request")
	_, err = q.Client.Insert(reqCtx, tracedArgs{Secret: "hunter2"}, nil)
	require.NoError(t, err)
	request.End()

	var job trace.SpanContext
	select {
	case job = <-worked:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run")
	}
	require.True(t, job.IsValid(), "the job is worked within a span")
	require.NotEqual(t, request.SpanContext().TraceID(), job.TraceID(), "a job is a trace of its own")
	var span tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.SpanID() == job.SpanID() {
				span = s
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "job traced_test", span.Name)
	require.Equal(t, trace.SpanKindConsumer, span.SpanKind)
	require.Len(t, span.Links, 1)
	require.Equal(t, request.SpanContext().TraceID(), span.Links[0].SpanContext.TraceID())
	require.Equal(t, request.SpanContext().SpanID(), span.Links[0].SpanContext.SpanID())
	for _, kv := range span.Attributes {
		require.NotContains(t, kv.Value.Emit(), "hunter2", "%s carries the job's arguments", kv.Key)
	}
}
