package botauth

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type ctxKey struct{}

// FromContext returns the operator Recognize verified on the request, or
// nil.
func FromContext(ctx context.Context) *Operator {
	op, _ := ctx.Value(ctxKey{}).(*Operator)
	return op
}

// WithOperator returns ctx carrying a verified operator, as Recognize
// leaves it.
func WithOperator(ctx context.Context, op *Operator) context.Context {
	return context.WithValue(ctx, ctxKey{}, op)
}

// maxOperatorLabels caps the operators metrics name one by one; the rest
// count as "other", so strangers cannot grow the series without bound.
const maxOperatorLabels = 100

// Metrics counts Web Bot Auth outcomes.
type Metrics struct {
	requests *prometheus.CounterVec
	mu       sync.Mutex
	named    map[string]bool
}

// NewMetrics registers the counters on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{named: map[string]bool{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poppyhost_web_bot_auth_requests_total",
			Help: "Requests carrying an HTTP message signature, by result (verified, invalid) and verified operator (the key directory's host; \"other\" past the first 100, \"\" when invalid).",
		}, []string{"result", "operator"}),
	}
	if reg != nil {
		if err := reg.Register(m.requests); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) count(verified *Operator) {
	if m == nil {
		return
	}
	if verified == nil {
		m.requests.WithLabelValues("invalid", "").Inc()
		return
	}
	op := verified.Host
	m.mu.Lock()
	if !m.named[op] {
		if len(m.named) >= maxOperatorLabels {
			op = "other"
		} else {
			m.named[op] = true
		}
	}
	m.mu.Unlock()
	m.requests.WithLabelValues("verified", op).Inc()
}

// Recognize is middleware that verifies the Web Bot Auth signature of a
// signed request and leaves the verified Operator in its context. A
// refused signature is logged and counted and the request goes on,
// unrecognised: whether that is fatal is the caller's decision (spec 5.3).
func Recognize(v *Verifier, m *Metrics, logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !Signed(r) {
				next.ServeHTTP(w, r)
				return
			}
			op, err := v.Verify(r.Context(), r)
			if op == nil && err == nil {
				next.ServeHTTP(w, r)
				return
			}
			m.count(op)
			if err != nil {
				if logger != nil {
					logger.InfoContext(r.Context(), "web bot auth signature refused", "path", r.URL.Path, "reason", err.Error())
				}
				next.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithOperator(r.Context(), op)))
		})
	}
}
