package bearer

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/notify"
)

// tokenKey names a verified access token as revocations name it: its
// Company and the hash of its signature (issuer.SignatureHash).
type tokenKey struct {
	companyID int64
	sig       [32]byte
}

// verifiedToken is an access token whose signature verified and which was
// active when it was read.
type verifiedToken struct {
	hash   [32]byte // of the whole token: a hit must be this very token
	claims *issuer.AccessClaims
}

// CacheTokens has v keep the access tokens it verified, so that a token
// used again costs neither a signature verification nor the revocation
// query until it expires. A revocation on this replica drops the
// Company's tokens when it commits (issuer.Store.OnAccessRevoked, which
// platform wires to ForgetCompany); one on another arrives by
// notification (issuer.AccessRevokedChannel). The notify.Cache bounds the
// rest: nothing is served while l is not connected. Call before l starts
// and before v serves.
func (v *Validator) CacheTokens(l *notify.Listener, opts notify.CacheOptions, reg prometheus.Registerer) error {
	v.cached = notify.NewCache[tokenKey, *verifiedToken](l, opts)
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "poppyhost_access_token_cache_lookups_total",
		Help: "Access token verifications, by result: hit (verified before and not revoked since), miss (verified and kept), bypass (verified, not kept: the notification listener was not connected).",
	}, []string{"result"})
	if reg != nil {
		if err := reg.Register(lookups); err != nil {
			return err
		}
	}
	v.count = notify.ResultCounter(lookups)
	l.Handle(issuer.AccessRevokedChannel, v.revoked)
	return nil
}

// ForgetCompany drops every cached token of a Company.
func (v *Validator) ForgetCompany(companyID int64) {
	if v.cached != nil {
		v.cached.Forget(func(k tokenKey, _ *verifiedToken) bool { return k.companyID == companyID })
	}
}

// revoked handles a revocation notification: "{company_id} {hex hash}".
func (v *Validator) revoked(payload string) {
	company, sig, ok := strings.Cut(payload, " ")
	id, err := strconv.ParseInt(company, 10, 64)
	raw, herr := hex.DecodeString(sig)
	if !ok || err != nil || herr != nil || len(raw) != 32 {
		v.cached.Clear()
		return
	}
	k := tokenKey{companyID: id}
	copy(k.sig[:], raw)
	v.cached.Delete(k)
}

// tokenHash is the hash that ties a cache entry to one token.
func tokenHash(token string) [32]byte { return sha256.Sum256([]byte(token)) }
