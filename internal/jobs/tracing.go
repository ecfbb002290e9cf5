package jobs

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/poppyhost/poppyhost/internal/tracing"
)

// traceKey is the job metadata key holding the traceparent of the
// request that inserted the job.
const traceKey = "poppyhost_traceparent"

// traced links a job to the request that inserted it, when tracing is on:
// on insert the request's traceparent goes into the job's metadata, and
// working the job is a span of a new trace named "job {kind}", linked to
// it. Jobs without a traceparent (sweeps) are not traced. The span
// records the kind and the attempt, never the job's arguments or its
// error's text.
type traced struct{ river.MiddlewareDefaults }

var (
	_ rivertype.JobInsertMiddleware = (*traced)(nil)
	_ rivertype.WorkerMiddleware    = (*traced)(nil)
)

// InsertMany writes the inserting request's traceparent into each job's
// metadata.
func (*traced) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams,
	doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	if !tracing.Enabled() || !trace.SpanContextFromContext(ctx).IsValid() {
		return doInner(ctx)
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	value, _ := json.Marshal(carrier.Get("traceparent"))
	for _, p := range params {
		meta := map[string]json.RawMessage{}
		if len(p.Metadata) > 0 {
			if err := json.Unmarshal(p.Metadata, &meta); err != nil {
				// Not an object: leave it as it is, untraced.
				continue
			}
		}
		meta[traceKey] = value
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		p.Metadata = b
	}
	return doInner(ctx)
}

// Work runs the job within its span.
func (*traced) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if !tracing.Enabled() {
		return doInner(ctx)
	}
	var meta map[string]json.RawMessage
	var parent string
	if json.Unmarshal(job.Metadata, &meta) == nil {
		_ = json.Unmarshal(meta[traceKey], &parent)
	}
	from := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": parent})
	link := trace.SpanContextFromContext(from)
	if !link.IsValid() {
		// No request inserted it (a sweep): untraced, as database work
		// outside a request is.
		return doInner(ctx)
	}
	ctx, span := tracing.StartLinked(ctx, "job "+job.Kind, trace.SpanKindConsumer, link)
	defer span.End()
	span.SetAttributes(attribute.String("poppyhost.job.kind", job.Kind), attribute.Int("poppyhost.job.attempt", job.Attempt))
	err := doInner(ctx)
	if err != nil {
		span.SetStatus(codes.Error, "job failed")
	}
	return err
}
