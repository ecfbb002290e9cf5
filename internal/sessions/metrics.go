package sessions

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Refusal reasons, the values of poppyhost_session_verifications_refused_total's
// reason label: the spec's error codes (5.3, 5.5), and error for a
// verification that could not be completed (a database failure).
const (
	reasonInvalid = iota
	reasonEnded
	reasonError
)

var refusalReasons = [...]string{reasonInvalid: httpx.CodeInvalidSession, reasonEnded: httpx.CodeSessionEnded,
	reasonError: "error"}

// metrics count Sessions started, verifications refused and replays.
// Every child is resolved once: counting on a request looks nothing up.
type metrics struct {
	started prometheus.Counter
	refused [len(refusalReasons)]prometheus.Counter
	replays prometheus.Counter
}

// Option configures a Manager.
type Option func(*Manager)

// WithMetrics registers the Manager's metrics on reg; without it they are
// counted unregistered.
func WithMetrics(reg prometheus.Registerer) Option { return func(m *Manager) { m.reg = reg } }

func newMetrics(reg prometheus.Registerer) *metrics {
	started := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "poppyhost_sessions_started_total",
		Help: "Sessions started: a Session's first request passed every check (spec 5.3, 5.5).",
	})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_session_verifications_refused_total",
		Help: "Session headers refused, by reason: the spec's error code (invalid_session, session_ended), or error when verification could not be completed.",
	}, []string{"reason"})
	replays := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "poppyhost_session_replays_refused_total",
		Help: "Session JWTs refused because their jti was already used (also counted as invalid_session).",
	})
	m := &metrics{started: started, replays: replays}
	for i, r := range refusalReasons {
		m.refused[i] = refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(started, refused, replays)
	}
	return m
}

// refusal counts a refused Session header.
func (m *metrics) refusal(err error) {
	var he *httpx.Error
	switch {
	case !errors.As(err, &he):
		m.refused[reasonError].Inc()
	case he.Code == httpx.CodeInvalidSession:
		m.refused[reasonInvalid].Inc()
	case he.Code == httpx.CodeSessionEnded:
		m.refused[reasonEnded].Inc()
	default:
		m.refused[reasonError].Inc()
	}
}
