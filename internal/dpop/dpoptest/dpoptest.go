package dpoptest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// Key is a proof key.
type Key struct {
	Private jwk.Key
	Public  jwk.Key
	// JKT is the RFC 7638 thumbprint of Public, base64url.
	JKT string
}

// NewKey returns a fresh P-256 key.
func NewKey() *Key {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	priv, err := jwk.FromRaw(raw)
	if err != nil {
		panic(err)
	}
	return FromPrivate(priv)
}

// FromPrivate returns the proof key of priv, a private JWK: a fixed key
// signs the same proofs in every process, as fuzzing needs.
func FromPrivate(priv jwk.Key) *Key {
	pub, err := priv.PublicKey()
	if err != nil {
		panic(err)
	}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		panic(err)
	}
	return &Key{Private: priv, Public: pub, JKT: base64.RawURLEncoding.EncodeToString(tp)}
}

// Proof is a proof's parts; Make signs it. Zero fields are left out.
type Proof struct {
	Typ    string
	Alg    string
	JWK    any // the public key unless set; a jwk.Key or raw members
	Claims map[string]any
}

// For returns the parts of a valid proof for method and htu at time now,
// with ath for token when it is not "".
func (k *Key) For(method, htu, token string, now time.Time) *Proof {
	jti := make([]byte, 16)
	_, _ = rand.Read(jti)
	cl := map[string]any{"jti": base64.RawURLEncoding.EncodeToString(jti), "htm": method, "htu": htu, "iat": now.Unix()}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		cl["ath"] = base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return &Proof{Typ: "dpop+jwt", Alg: "ES256", JWK: k.Public, Claims: cl}
}

// Make signs p with k's ES256 key, whatever alg p claims.
func (k *Key) Make(p *Proof) string {
	h := map[string]any{}
	if p.Typ != "" {
		h["typ"] = p.Typ
	}
	if p.Alg != "" {
		h["alg"] = p.Alg
	}
	if p.JWK != nil {
		h["jwk"] = p.JWK
	}
	hdr, err := json.Marshal(h)
	must(err)
	payload, err := json.Marshal(p.Claims)
	must(err)
	input := base64.RawURLEncoding.EncodeToString(hdr) + "." + base64.RawURLEncoding.EncodeToString(payload)
	signer, err := jws.NewSigner(jwa.ES256)
	must(err)
	sig, err := signer.Sign([]byte(input), k.Private)
	must(err)
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// Valid returns a valid proof for method and htu at now, with ath for
// token when it is not "".
func (k *Key) Valid(method, htu, token string, now time.Time) string {
	return k.Make(k.For(method, htu, token, now))
}

// WithNonce returns a valid proof for method and htu at now carrying the
// server nonce, with ath for token when it is not "".
func (k *Key) WithNonce(method, htu, token, nonce string, now time.Time) string {
	p := k.For(method, htu, token, now)
	p.Claims["nonce"] = nonce
	return k.Make(p)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Replays is an in-memory dpop.ReplayStore.
type Replays struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Seen implements dpop.ReplayStore.
func (r *Replays) Seen(_ context.Context, companyID int64, jkt, jti string, _ time.Time) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	k, _ := json.Marshal([]any{companyID, jkt, jti})
	if r.seen[string(k)] {
		return false, nil
	}
	r.seen[string(k)] = true
	return true, nil
}
