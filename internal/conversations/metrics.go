package conversations

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Message authors, the values of poppyhost_conversation_messages_total's
// author label: the Personal Agent's messages come in, the Company's
// (its agent's or a person's) go out.
const (
	authorPersonalAgent = iota
	authorAgent
	authorHuman
)

var authorNames = [...]string{authorPersonalAgent: "personal_agent", authorAgent: ResponderAgent,
	authorHuman: ResponderHuman}

// Metrics are the conversations' counters and gauges, shared by the
// Store, the handlers and the webhook delivery; NewMetrics makes them.
// Every child is resolved once.
type Metrics struct {
	messages   [len(authorNames)]prometheus.Counter
	readers    [2]prometheus.Gauge
	deliveries [len(deliveryResults)]prometheus.Counter
}

// Readers, the values of poppyhost_conversation_readers' mode label.
const (
	readerStream = iota
	readerLongPoll
)

// Webhook delivery results, the values of
// poppyhost_webhook_deliveries_total's result label.
const (
	deliveryOK = iota
	deliveryRefused
	deliveryFailed
)

var deliveryResults = [...]string{deliveryOK: "delivered", deliveryRefused: "refused", deliveryFailed: "failed"}

// NewMetrics returns the conversations' metrics, registered on reg when
// it is set.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	messages := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_conversation_messages_total",
		Help: "Conversation messages stored, by author: personal_agent (in), agent or human (out: the Company Agent or a person). Retries of a message are not counted again.",
	}, []string{"author"})
	readers := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "poppyhost_conversation_readers",
		Help: "Personal Agents reading a conversation's events on this replica now, by mode: stream (text/event-stream) or long_poll (waiting for an event).",
	}, []string{"mode"})
	deliveries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_webhook_deliveries_total",
		Help: "Posts of conversation events to Company Agent webhooks, by result: delivered (2xx), refused (another answer), failed (no answer: unreachable, timeout).",
	}, []string{"result"})
	m := &Metrics{readers: [2]prometheus.Gauge{readerStream: readers.WithLabelValues("stream"),
		readerLongPoll: readers.WithLabelValues("long_poll")}}
	for i, a := range authorNames {
		m.messages[i] = messages.WithLabelValues(a)
	}
	for i, r := range deliveryResults {
		m.deliveries[i] = deliveries.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(messages, readers, deliveries)
	}
	return m
}

// message counts a message stored by author (a Message's Author.Type, or
// "" for the Personal Agent's).
func (m *Metrics) message(author string) {
	switch author {
	case "":
		m.messages[authorPersonalAgent].Inc()
	case ResponderHuman:
		m.messages[authorHuman].Inc()
	default:
		m.messages[authorAgent].Inc()
	}
}

// delivered counts a webhook post that ended with err.
func (m *Metrics) delivered(err error) {
	switch {
	case err == nil:
		m.deliveries[deliveryOK].Inc()
	case errors.Is(err, safehttp.ErrStatus), errors.Is(err, safehttp.ErrRedirect):
		m.deliveries[deliveryRefused].Inc()
	default:
		m.deliveries[deliveryFailed].Inc()
	}
}

// orDefault returns m, or unregistered metrics when m is nil.
func (m *Metrics) orDefault() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
