package gateway_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/tracing"
)

// tracedSpans records the spans of every test once one turned tracing
// on: the provider is the process's, so the tests share it and each
// picks its own trace.
var (
	tracedOnce  sync.Once
	tracedSpans *tracetest.InMemoryExporter
)

// traced turns tracing on, recording in memory.
func traced() *tracetest.InMemoryExporter {
	tracedOnce.Do(func() {
		tracedSpans = tracetest.NewInMemoryExporter()
		tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracedSpans)))
	})
	return tracedSpans
}

// traceOf returns the trace id of the traceparent the origin received,
// with its parent span's id.
func traceOf(t *testing.T, got peers.Received) (trace.TraceID, string) {
	t.Helper()
	parts := strings.Split(got.Header.Get("Traceparent"), "-")
	require.Len(t, parts, 4, "the origin receives a traceparent: %q", got.Header.Get("Traceparent"))
	id, err := trace.TraceIDFromHex(parts[1])
	require.NoError(t, err)
	return id, parts[2]
}

// spansOf waits for the server span of trace id to end and returns the
// trace's spans.
func spansOf(t *testing.T, exporter *tracetest.InMemoryExporter, id trace.TraceID) []tracetest.SpanStub {
	t.Helper()
	var spans []tracetest.SpanStub
	// The server span ends once the answer is written, maybe after the
	// caller read it.
	require.Eventually(t, func() bool {
		spans = nil
		server := false
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.TraceID() == id {
				spans = append(spans, s)
				server = server || s.SpanKind == trace.SpanKindServer
			}
		}
		return server
	}, 10*time.Second, 10*time.Millisecond)
	return spans
}

// forgedTraceparent is a trace context a Personal Agent made up; the
// platform starts its own trace instead, and the origin never sees it.
const forgedTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestTracingGatewayCall: with tracing on, one gateway call is one trace:
// a server span named by the route, with the Company and the outcome; a
// Session span and database spans under it; an origin client span; and the
// origin receives a traceparent of that trace, not the one the caller
// sent. No attribute carries the query, the token or the Session.
func TestTracingGatewayCall(t *testing.T) {
	exporter := traced()
	env := testkit.SetupWith(t, testkit.Options{Tracer: tracing.DB{}})
	r := addCompany(t, env, env.StartAgent(t, "agent-traced.test"), "shop", "origin-traced.test")
	token := r.signIn(t, r.agent, "ada", "orders:read")

	resp := r.call(t, http.MethodGet, api("/orders?secret=q1"), nil,
		opts{token: token, header: []string{"Traceparent", forgedTraceparent, "Tracestate", "forged=1"}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	got := r.origin.Last()
	require.Empty(t, got.Header.Values("Tracestate"), "the caller's trace state does not reach the origin")
	traceID, parent := traceOf(t, got)
	require.NotEqual(t, strings.Split(forgedTraceparent, "-")[1], traceID.String(), "the platform starts its own trace")

	var server, session, origin tracetest.SpanStub
	var statements []tracetest.SpanStub
	for _, s := range spansOf(t, exporter, traceID) {
		switch {
		case s.SpanKind == trace.SpanKindServer:
			server = s
		case s.Name == "session verify":
			session = s
		case s.Name == "origin":
			origin = s
		case attrs(s)["db.system.name"] == "postgresql":
			statements = append(statements, s)
		}
	}

	require.Equal(t, "GET /t/{slug}/api/{name}/*", server.Name)
	require.False(t, server.Parent.IsValid(), "the server span starts the trace")
	sa := attrs(server)
	require.Equal(t, "shop", sa[tracing.CompanyKey])
	require.Equal(t, "/t/{slug}/api/{name}/*", sa["http.route"])
	require.Equal(t, "200", sa["http.response.status_code"])
	require.Equal(t, "success", sa["poppyhost.outcome"])

	require.Equal(t, server.SpanContext.SpanID(), session.Parent.SpanID(), "the Session span is the request's")
	require.Equal(t, codes.Unset, session.Status.Code)
	require.NotEmpty(t, statements, "the database calls are traced")
	var underSession bool
	for _, s := range statements {
		require.Regexp(t, `^[A-Z]+$`, s.Name, "a statement's span is named by its first word")
		underSession = underSession || s.Parent.SpanID() == session.SpanContext.SpanID()
	}
	require.True(t, underSession, "the Session's lookup is under the Session span")

	require.Equal(t, trace.SpanKindClient, origin.SpanKind)
	require.Equal(t, origin.SpanContext.SpanID().String(), parent, "the origin's parent is the client span")
	require.Equal(t, "200", attrs(origin)["http.response.status_code"])

	for _, s := range spansOf(t, exporter, traceID) {
		for k, v := range attrs(s) {
			require.NotContains(t, v, "secret", "%s: %s carries the query", s.Name, k)
			require.NotContains(t, v, token, "%s: %s carries the token", s.Name, k)
		}
	}
}

// TestTracingApprovedOperation: the call that performs an approved
// operation is traced to the origin like any other: the origin's
// traceparent belongs to the approving request's trace.
func TestTracingApprovedOperation(t *testing.T) {
	exporter := traced()
	r, x := newOperationsRig(t, "ops-traced")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	exchange := func(approvalHeader string) *peers.Response {
		o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
		if approvalHeader != "" {
			o.header = append(o.header, "Poppy-Approval", approvalHeader)
		}
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	}
	op := opstest.RequireOperation(t, exchange(""))
	done := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	require.Equal(t, int32(1), x.Performed.Load())

	traceID, parent := traceOf(t, r.origin.Last())
	var server, origin tracetest.SpanStub
	for _, s := range spansOf(t, exporter, traceID) {
		switch {
		case s.SpanKind == trace.SpanKindServer:
			server = s
		case s.Name == "origin" && s.SpanContext.SpanID().String() == parent:
			origin = s
		}
	}
	require.Equal(t, "POST /t/{slug}/api/{name}/*", server.Name)
	require.Equal(t, "201", attrs(server)["http.response.status_code"])
	require.Equal(t, "shop", attrs(server)[tracing.CompanyKey])
	require.Equal(t, trace.SpanKindClient, origin.SpanKind, "the perform call's client span is the origin's parent")
	require.Equal(t, "201", attrs(origin)["http.response.status_code"])
}

// attrs are a span's attributes as text.
func attrs(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}
