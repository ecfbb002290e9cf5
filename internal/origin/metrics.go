package origin

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Calls, the values of the call label of the origin metrics: what the
// platform called a Company's origin for. Each has its own transport, so
// that a call's counters are found without a lookup.
const (
	callAPI       = "api"       // an API call forwarded by the gateway (Forward)
	callWeb       = "web"       // a website request (Relay)
	callTool      = "tool"      // an MCP tool call (CallTool)
	callOperation = "operation" // an approved operation's send, or an approval hook call (Send)
)

// originMetrics are the origin calls' counters and latencies, by call.
type originMetrics struct {
	answers *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

func newOriginMetrics(reg prometheus.Registerer) *originMetrics {
	m := &originMetrics{
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poppyhost_origin_responses_total",
			Help: "Calls to Company origins, by call (api, web, tool, operation) and by the class of the origin's answer: 1xx to 5xx, or error when it did not answer (unreachable, timeout, refused address).",
		}, []string{"call", "class"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "poppyhost_origin_request_duration_seconds",
			Help:    "Time from sending a call to a Company origin to its answer's head (or the call's failure), by call.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"call"}),
	}
	if reg != nil {
		reg.MustRegister(m.answers, m.latency)
	}
	return m
}

// transport returns next, measured as call.
func (m *originMetrics) transport(next http.RoundTripper, call string) http.RoundTripper {
	return &metered{next: next, answers: httpx.NewClassCounters(m.answers, call),
		latency: m.latency.WithLabelValues(call)}
}

// metered counts and times the calls through it.
type metered struct {
	next    http.RoundTripper
	answers *httpx.ClassCounters
	latency prometheus.Observer
}

// RoundTrip implements http.RoundTripper.
func (t *metered) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.latency.Observe(time.Since(start).Seconds())
	if err != nil {
		t.answers.Count(0)
		return nil, err
	}
	t.answers.Count(resp.StatusCode)
	return resp, nil
}
