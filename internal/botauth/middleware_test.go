package botauth

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRecognize: a verified operator reaches the handler and is counted;
// a refused signature is logged and counted, and the request goes on
// without an operator.
func TestRecognize(t *testing.T) {
	fx := newFixture(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var seen *Operator
	calls := 0
	h := Recognize(fx.v, m, slog.New(slog.NewTextHandler(&logs, nil)))(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen, calls = FromContext(r.Context()), calls+1
	}))
	serve := func(r *http.Request) *Operator {
		h.ServeHTTP(httptest.NewRecorder(), r)
		return seen
	}
	if op := serve(fx.request(t, signOpts{})); op == nil || op.Host != "agent.example" {
		t.Fatalf("valid: %v", op)
	}
	if op := serve(fx.request(t, signOpts{components: []string{"@method", "signature-agent"}})); op != nil {
		t.Fatalf("refused signature recognised %v", op)
	}
	if op := serve(httptest.NewRequest("GET", "https://shop.example/", nil)); op != nil {
		t.Fatalf("unsigned recognised %v", op)
	}
	if calls != 3 {
		t.Fatalf("%d of 3 requests went on", calls)
	}
	if !strings.Contains(logs.String(), "cover @authority") {
		t.Fatalf("refusal not logged: %s", logs.String())
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("verified", "agent.example")); v != 1 {
		t.Fatalf("verified count %v", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("invalid", "")); v != 1 {
		t.Fatalf("invalid count %v", v)
	}
	// Past the first 100 operators, the rest count as "other".
	for i := range maxOperatorLabels + 5 {
		m.count(&Operator{Host: "op" + strings.Repeat("x", i)})
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("verified", "other")); v != 6 {
		t.Fatalf("other count %v", v)
	}
}
