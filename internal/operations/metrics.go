package operations

import (
	"github.com/prometheus/client_golang/prometheus"
)

// interfaces are the interfaces an operation is proposed and approved at,
// the values of the interface label; ifaceIndex finds one without a
// lookup.
var interfaces = [...]string{InterfaceAPI, InterfaceMCP, InterfaceWeb, InterfaceConversation}

// ifaceIndex returns the index of iface in interfaces, or -1.
func ifaceIndex(iface string) int {
	switch iface {
	case InterfaceAPI:
		return 0
	case InterfaceMCP:
		return 1
	case InterfaceWeb:
		return 2
	case InterfaceConversation:
		return 3
	}
	return -1
}

// byInterface is one counter per interface, resolved once.
type byInterface [len(interfaces)]prometheus.Counter

func newByInterface(vec *prometheus.CounterVec) *byInterface {
	var b byInterface
	for i, iface := range interfaces {
		b[i] = vec.WithLabelValues(iface)
	}
	return &b
}

// inc counts one at iface.
func (b *byInterface) inc(iface string) {
	if i := ifaceIndex(iface); i >= 0 {
		b[i].Inc()
	}
}

// Decline sources, the values of poppyhost_operations_declines_total's
// by label.
const (
	declinedByHook = iota
	declinedByOrigin
)

// metrics count the engine's approvals and what became of them, and the
// operations left unknown. Every child is resolved once.
type metrics struct {
	outcomes  [len(outcomeNames)]prometheus.Counter
	unknown   prometheus.Counter
	approvals *byInterface
	declines  [2]prometheus.Counter
	settles   prometheus.Counter
}

// outcomeNames label poppyhost_operations_outcomes_total, by OutcomeKind;
// the outcomes of no send have none.
var outcomeNames = [...]string{
	OutcomePerformed: "performed", OutcomePerforming: "performing", OutcomeDeclined: "declined",
	OutcomeNewTerms: "new_terms", OutcomeRetry: "retry",
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_operations_outcomes_total",
		Help: "Sends of approved operations by what the origin's answer meant: performed, performing (unknown yet), declined, new_terms, retry.",
	}, []string{"outcome"})
	approvals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_operations_approvals_total",
		Help: "Approvals presented to the engine, by interface (api, mcp, web, conversation), retries of one approval included.",
	}, []string{"interface"})
	declines := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_operations_declines_total",
		Help: "Approved revisions declined, by who declined: approval_hook (the Company's hook, before any send) or origin (its answer to the send).",
	}, []string{"by"})
	m := &metrics{
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poppyhost_operations_unknown_total",
			Help: "Operations whose settle job gave up learning the outcome; each waits for the Company to resolve it.",
		}),
		settles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poppyhost_operations_settle_attempts_total",
			Help: "Sends of the settle job, which asks the origin again about an operation whose outcome is not known yet.",
		}),
		approvals: newByInterface(approvals),
		declines:  [2]prometheus.Counter{declinedByHook: declines.WithLabelValues("approval_hook"), declinedByOrigin: declines.WithLabelValues("origin")},
	}
	// Every series is exported from the start, 0 until it happens, so
	// that rates and alerts see it.
	for k, name := range outcomeNames {
		if name != "" {
			m.outcomes[k] = outcomes.WithLabelValues(name)
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{outcomes, m.unknown, approvals, declines, m.settles} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) outcome(k OutcomeKind) {
	if int(k) >= 0 && int(k) < len(m.outcomes) && m.outcomes[k] != nil {
		m.outcomes[k].Inc()
	}
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithMetrics registers the Store's metrics, the proposals, on reg.
func WithMetrics(reg prometheus.Registerer) StoreOption { return func(s *Store) { s.reg = reg } }

// newProposals returns the proposals' counters, registered on reg when set.
func newProposals(reg prometheus.Registerer) *byInterface {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_operations_proposals_total",
		Help: "Proposals recorded (an origin's or a Company Agent's), by interface: api, mcp, web, conversation. A proposal that keeps its operation and revision counts too.",
	}, []string{"interface"})
	if reg != nil {
		reg.MustRegister(vec)
	}
	return newByInterface(vec)
}
