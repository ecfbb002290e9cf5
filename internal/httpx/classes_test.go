package httpx

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestClassCounters: every class is exported from the start; statuses
// count in their class, and none, or one out of range, as error.
func TestClassCounters(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_calls_total", Help: "Calls."},
		[]string{"interface", "class"})
	c := NewClassCounters(vec, "api")
	for _, s := range []int{200, 204, 302, 404, 499, 503, 0, 600, 101} {
		c.Count(s)
	}
	want := `# HELP test_calls_total Calls.
# TYPE test_calls_total counter
test_calls_total{class="1xx",interface="api"} 1
test_calls_total{class="2xx",interface="api"} 2
test_calls_total{class="3xx",interface="api"} 1
test_calls_total{class="4xx",interface="api"} 2
test_calls_total{class="5xx",interface="api"} 1
test_calls_total{class="error",interface="api"} 2
`
	if err := testutil.CollectAndCompare(vec, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestAnsweredStatus: a handler behind Instrument (and a writer that
// unwraps) reads the status written, 200 when nothing was, and 0 when the
// client went away unanswered; a writer Instrument did not wrap says so.
func TestAnsweredStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  func(w http.ResponseWriter)
		cancel bool
		want   int
	}{
		{"written", func(w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) }, false, 201},
		{"nothing written", func(http.ResponseWriter) {}, false, 200},
		{"client gone", func(http.ResponseWriter) {}, true, 0},
		{"client gone after an answer", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, true, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := -1, false
			h := Instrument(slog.New(slog.DiscardHandler), NewMetrics(prometheus.NewRegistry()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.write(w)
				got, ok = AnsweredStatus(unwrapping{w}, r)
			}))
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			}
			defer cancel()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
			if !ok || got != tc.want {
				t.Errorf("AnsweredStatus = %d, %v; want %d", got, ok, tc.want)
			}
		})
	}
	if _, ok := AnsweredStatus(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)); ok {
		t.Error("a writer Instrument did not wrap has a status")
	}
}

// unwrapping is a middleware's writer over Instrument's.
type unwrapping struct{ http.ResponseWriter }

func (u unwrapping) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestCountingAllocatesNothing: counting an answer, and reading its status
// through a wrapping writer, allocate nothing, so the gateway's calls cost
// no allocation (docs/benchmarks.md, "Metrics").
func TestCountingAllocatesNothing(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_calls_total", Help: "Calls."}, []string{"class"})
	c := NewClassCounters(vec)
	rec := &statusRecorder{ResponseWriter: httptest.NewRecorder(), status: http.StatusOK, wroteHeader: true}
	var w http.ResponseWriter = unwrapping{rec}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if n := testing.AllocsPerRun(100, func() {
		status, _ := AnsweredStatus(w, r)
		c.Count(status)
	}); n != 0 {
		t.Errorf("%v allocations a call", n)
	}
}
