package httpx

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// AnswerClasses are the values of a metric's class label: the class of
// an HTTP answer's status, or error when there was none (the call failed,
// or the client went away before it was answered).
var AnswerClasses = [...]string{"error", "1xx", "2xx", "3xx", "4xx", "5xx"}

// ClassCounters are the counters of one CounterVec's children, one per
// answer class, resolved once so that counting an answer looks nothing up.
type ClassCounters [len(AnswerClasses)]prometheus.Counter

// NewClassCounters resolves vec's children for every answer class: vec's
// last label is the class, labels are the values of the ones before it.
// Every child is exported from the start, 0 until counted.
func NewClassCounters(vec *prometheus.CounterVec, labels ...string) *ClassCounters {
	var c ClassCounters
	for i, class := range AnswerClasses {
		c[i] = vec.WithLabelValues(append(labels[:len(labels):len(labels)], class)...)
	}
	return &c
}

// Count counts an answer with status; 0, or a status out of range, counts
// as error.
func (c *ClassCounters) Count(status int) {
	i := 0
	if status >= 100 && status <= 599 {
		i = status / 100
	}
	c[i].Inc()
}

// AnsweredStatus returns the status Instrument's recorder saw written to
// w, a writer it wrapped, once the handler has returned, as Instrument
// counts it: the status the client got (200 when the handler wrote
// nothing), or 0 when the client went away before a successful answer.
// ok is false when w is not wrapped by Instrument, which then knows
// nothing of it.
func AnsweredStatus(w http.ResponseWriter, r *http.Request) (status int, ok bool) {
	for {
		if rec, is := w.(*statusRecorder); is {
			status = rec.status
			switch {
			case ClientGone(r) && (status == 0 || status >= 500):
				status = 0
			case status == 0:
				status = http.StatusOK
			}
			return status, true
		}
		u, is := w.(interface{ Unwrap() http.ResponseWriter })
		if !is {
			return 0, false
		}
		w = u.Unwrap()
	}
}
