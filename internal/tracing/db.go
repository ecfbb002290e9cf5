package tracing

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// DB is a pgx.QueryTracer and pgx.BatchTracer that makes a client span of
// each statement, and of each batch, run within a traced request. A
// statement's span is named by its first word (SELECT, INSERT, WITH, ...),
// a batch's is BATCH; neither the statements' text nor their arguments
// are recorded. Statements outside a trace (background work) make no span.
type DB struct{}

var (
	_ pgx.QueryTracer = DB{}
	_ pgx.BatchTracer = DB{}
)

// TraceQueryStart opens the statement's span.
func (DB) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op := operation(data.SQL)
	return startDB(ctx, op, attribute.String("db.operation.name", op))
}

// TraceQueryEnd closes the statement's span.
func (DB) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	endDB(ctx, data.Err)
}

// TraceBatchStart opens the batch's span.
func (DB) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	return startDB(ctx, "BATCH", attribute.Int("db.operation.batch.size", data.Batch.Len()))
}

// TraceBatchQuery records nothing: the batch's span stands for its
// statements.
func (DB) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd closes the batch's span.
func (DB) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	endDB(ctx, data.Err)
}

// startDB opens a database span named name under ctx's span, when that
// one is recording.
func startDB(ctx context.Context, name string, attr attribute.KeyValue) context.Context {
	if !enabled.Load() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	ctx, _ = Start(ctx, name, trace.SpanKindClient, attribute.String("db.system.name", "postgresql"), attr)
	return ctx
}

// endDB closes the span startDB opened.
func endDB(ctx context.Context, err error) {
	if !enabled.Load() {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if err != nil {
		// The error's text may quote the statement's arguments.
		span.SetStatus(codes.Error, "statement failed")
	}
	span.End()
}

// operation is the statement's first word in upper case, or "SQL".
func operation(sql string) string {
	sql = strings.TrimLeft(sql, " \t\r\n(")
	end := strings.IndexFunc(sql, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if end < 0 {
		end = len(sql)
	}
	if end == 0 || end > 16 {
		return "SQL"
	}
	return strings.ToUpper(sql[:end])
}
