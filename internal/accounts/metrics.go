package accounts

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Sign-in results, the values of poppyhost_sign_ins_total's result label.
const (
	signedIn = iota
	signInRefused
	signInLocked
	signInBusy
	signInError
)

var signInResults = [...]string{signedIn: "signed_in", signInRefused: "refused", signInLocked: "locked",
	signInBusy: "busy", signInError: "error"}

// signIns counts sign-in attempts by result, each child resolved once.
type signIns [len(signInResults)]prometheus.Counter

func newSignIns(reg prometheus.Registerer) *signIns {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_sign_ins_total",
		Help: "Username and password sign-ins, by result: signed_in, refused (wrong username or password), locked (too many failures, not checked), busy (hashing at its limit, not checked), error.",
	}, []string{"result"})
	var s signIns
	for i, r := range signInResults {
		s[i] = vec.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(vec)
	}
	return &s
}

// count counts the attempt Authenticate ended with err.
func (s *signIns) count(err error) {
	i := signInError
	switch {
	case err == nil:
		i = signedIn
	case errors.Is(err, ErrNotFound):
		i = signInRefused
	case errors.Is(err, ErrThrottled):
		i = signInLocked
	case errors.Is(err, ErrBusy):
		i = signInBusy
	}
	s[i].Inc()
}
