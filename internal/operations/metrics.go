package operations

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics count what became of approvals and the operations left
// unknown.
type metrics struct {
	outcomes *prometheus.CounterVec
	unknown  prometheus.Counter
}

// outcomeNames label poppyhost_operations_outcomes_total.
var outcomeNames = map[OutcomeKind]string{
	OutcomePerformed: "performed", OutcomePerforming: "performing", OutcomeDeclined: "declined",
	OutcomeNewTerms: "new_terms", OutcomeRetry: "retry",
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poppyhost_operations_outcomes_total",
			Help: "Sends of approved operations by what the origin's answer meant: performed, performing (unknown yet), declined, new_terms, retry.",
		}, []string{"outcome"}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poppyhost_operations_unknown_total",
			Help: "Operations whose settle job gave up learning the outcome; each waits for the Company to resolve it.",
		}),
	}
	// Every outcome is exported from the start, 0 until it happens, so
	// that rates and alerts see it.
	for _, name := range outcomeNames {
		m.outcomes.WithLabelValues(name)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.outcomes, m.unknown} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) outcome(k OutcomeKind) {
	if name, ok := outcomeNames[k]; ok {
		m.outcomes.WithLabelValues(name).Inc()
	}
}
