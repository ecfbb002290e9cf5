package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// calls counts the gateway's calls by interface (api: the API proxy, mcp:
// the MCP server) and by the class of the answer the caller got. The API
// a call was for is not a label: a Company registers any number of them.
type calls struct {
	api, mcp *httpx.ClassCounters
}

func newCalls(reg prometheus.Registerer) *calls {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_gateway_calls_total",
		Help: "Calls to the gateway, by interface (api: registered APIs, mcp: the MCP endpoint) and by the class of the answer: 1xx to 5xx, or error when the caller went away unanswered.",
	}, []string{"interface", "class"})
	if reg != nil {
		reg.MustRegister(vec)
	}
	return &calls{api: httpx.NewClassCounters(vec, "api"), mcp: httpx.NewClassCounters(vec, "mcp")}
}

// counted is middleware that counts each call on c once it is answered,
// by the status httpx.Instrument saw written.
func counted(c *httpx.ClassCounters) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			if status, ok := httpx.AnsweredStatus(w, r); ok {
				c.Count(status)
			}
		})
	}
}

// CountMCP is middleware for the MCP endpoint that counts its calls as
// the gateway's, interface mcp.
func (g *Gateway) CountMCP(next http.Handler) http.Handler { return counted(g.calls.mcp)(next) }
