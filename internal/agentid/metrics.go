package agentid

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Documents, the values of the document label: client metadata documents
// and key sets (jwks_uri).
const (
	docMetadata = iota
	docJWKS
)

var documentNames = [...]string{docMetadata: "client_metadata", docJWKS: "jwks"}

// Fetch results, the values of poppyhost_agent_metadata_fetches_total's
// result label.
const (
	fetchOK = iota
	fetchInvalid
	fetchUnavailable
)

var fetchResults = [...]string{fetchOK: "ok", fetchInvalid: "invalid", fetchUnavailable: "unavailable"}

// metrics count the Resolver's fetches and cache lookups, every child
// resolved once.
type metrics struct {
	fetches      [len(documentNames)][len(fetchResults)]prometheus.Counter
	hits, misses [len(documentNames)]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_agent_metadata_fetches_total",
		Help: "Fetches of Personal Agents' and MCP clients' documents, by document (client_metadata, jwks) and result: ok, invalid (fetched, refused), unavailable (not fetched: unreachable, timeout, not 2xx).",
	}, []string{"document", "result"})
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_agent_metadata_cache_total",
		Help: "Lookups of those documents, by document and result: hit (a fresh cached copy) or miss (fetched, waited for a fetch, or failed).",
	}, []string{"document", "result"})
	m := &metrics{}
	for d, doc := range documentNames {
		for r, result := range fetchResults {
			m.fetches[d][r] = fetches.WithLabelValues(doc, result)
		}
		m.hits[d], m.misses[d] = lookups.WithLabelValues(doc, "hit"), lookups.WithLabelValues(doc, "miss")
	}
	if reg != nil {
		reg.MustRegister(fetches, lookups)
	}
	return m
}

// fetched counts a fetch of doc that ended with err.
func (m *metrics) fetched(doc int, err error) {
	r := fetchInvalid
	switch {
	case err == nil:
		r = fetchOK
	case errors.Is(err, ErrUnavailable):
		r = fetchUnavailable
	}
	m.fetches[doc][r].Inc()
}
