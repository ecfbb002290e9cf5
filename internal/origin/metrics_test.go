package origin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// answering is a transport that answers status, or fails when it is 0.
type answering struct{ resp *http.Response }

func (a answering) RoundTrip(*http.Request) (*http.Response, error) {
	if a.resp == nil {
		return nil, http.ErrHandlerTimeout
	}
	return a.resp, nil
}

// TestMetered: every call is timed and counted by its answer's class, a
// failure as error, without an allocation (the warm-up run and ten
// measured: eleven); every call's series are exported from the start.
func TestMetered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newOriginMetrics(reg)
	req, err := http.NewRequest(http.MethodGet, "https://origin.example/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := m.transport(answering{&http.Response{StatusCode: http.StatusCreated}}, callAPI)
	failing := m.transport(answering{}, callTool)
	if n := testing.AllocsPerRun(10, func() { _, _ = ok.RoundTrip(req) }); n != 0 {
		t.Errorf("%v allocations a call", n)
	}
	if _, err := failing.RoundTrip(req); err == nil {
		t.Fatal("the failure was lost")
	}
	m.transport(answering{}, callWeb)
	m.transport(answering{}, callOperation)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP poppyhost_origin_responses_total Calls to Company origins, by call (api, web, tool, operation) and by the class of the origin's answer: 1xx to 5xx, or error when it did not answer (unreachable, timeout, refused address).
# TYPE poppyhost_origin_responses_total counter
poppyhost_origin_responses_total{call="api",class="1xx"} 0
poppyhost_origin_responses_total{call="api",class="2xx"} 11
poppyhost_origin_responses_total{call="api",class="3xx"} 0
poppyhost_origin_responses_total{call="api",class="4xx"} 0
poppyhost_origin_responses_total{call="api",class="5xx"} 0
poppyhost_origin_responses_total{call="api",class="error"} 0
poppyhost_origin_responses_total{call="operation",class="1xx"} 0
poppyhost_origin_responses_total{call="operation",class="2xx"} 0
poppyhost_origin_responses_total{call="operation",class="3xx"} 0
poppyhost_origin_responses_total{call="operation",class="4xx"} 0
poppyhost_origin_responses_total{call="operation",class="5xx"} 0
poppyhost_origin_responses_total{call="operation",class="error"} 0
poppyhost_origin_responses_total{call="tool",class="1xx"} 0
poppyhost_origin_responses_total{call="tool",class="2xx"} 0
poppyhost_origin_responses_total{call="tool",class="3xx"} 0
poppyhost_origin_responses_total{call="tool",class="4xx"} 0
poppyhost_origin_responses_total{call="tool",class="5xx"} 0
poppyhost_origin_responses_total{call="tool",class="error"} 1
poppyhost_origin_responses_total{call="web",class="1xx"} 0
poppyhost_origin_responses_total{call="web",class="2xx"} 0
poppyhost_origin_responses_total{call="web",class="3xx"} 0
poppyhost_origin_responses_total{call="web",class="4xx"} 0
poppyhost_origin_responses_total{call="web",class="5xx"} 0
poppyhost_origin_responses_total{call="web",class="error"} 0
`), "poppyhost_origin_responses_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.latency); n != 4 {
		t.Errorf("%d latency series, want one per call", n)
	}
}
