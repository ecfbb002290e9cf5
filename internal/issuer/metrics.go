package issuer

import (
	"errors"
	"net/http"

	"github.com/ory/fosite"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// grantLabels are the values of poppyhost_token_grants_total's grant_type
// label, by the grant_type they stand for: the spec's grant types, the
// device code's URN shortened.
var grantLabels = map[string]string{
	tenant.GrantAuthorizationCode: "authorization_code",
	tenant.GrantDeviceCode:        "device_code",
	tenant.GrantRefreshToken:      "refresh_token",
}

// metrics count what the token and revocation endpoints did. Every child
// is resolved once, when the Server is made.
type metrics struct {
	limited     *prometheus.CounterVec
	grants      map[string]prometheus.Counter
	revocations prometheus.Counter
	reuse       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_login_rate_limited_total",
		Help: "Sign-in attempts refused with 429 before any check, by the limit they went over: address (one client address at one Company) or company (everyone at one Company).",
	}, []string{"limit"})
	grants := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_token_grants_total",
		Help: "Tokens issued by the token endpoint, by grant type: authorization_code, device_code (sign-ins) and refresh_token (refreshes).",
	}, []string{"grant_type"})
	m := &metrics{limited: limited, grants: map[string]prometheus.Counter{},
		revocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poppyhost_token_revocations_total",
			Help: "Revocation requests (RFC 7009) answered 200: the token's grant is revoked, or the token was unknown.",
		}),
		reuse: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poppyhost_refresh_token_reuse_total",
			Help: "Refresh tokens used again after their rotation or revocation: each revokes its whole grant (spec 4.4).",
		}),
	}
	for grant, label := range grantLabels {
		m.grants[grant] = grants.WithLabelValues(label)
	}
	if reg != nil {
		reg.MustRegister(limited, grants, m.revocations, m.reuse)
	}
	return m
}

// granted counts tokens issued with grant.
func (m *metrics) granted(grant string) {
	if c, ok := m.grants[grant]; ok {
		c.Inc()
	}
}

// refused counts what a refused token request says: a refresh token used
// again, which fosite answers by revoking its grant.
func (m *metrics) refused(r *http.Request, err error) {
	if r.PostForm.Get("grant_type") == tenant.GrantRefreshToken && errors.Is(err, fosite.ErrInactiveToken) {
		m.reuse.Inc()
	}
}
