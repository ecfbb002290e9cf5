package sessions_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Unit-level Verifier tests run without HTTP or a database: a stub
// resolver stands for agentid, and a fixed clock makes iat windows and
// delegation lifetimes exact. The keys are fixed so that the fuzz corpus in
// testdata/ keeps verifying.
var (
	unitNow      = time.Unix(1790900000, 0)
	unitClientID = "https://agent.example/agent.json"
	unitAud      = "https://poppyhost.test/t/shop"
	unitURL      = "https://poppyhost.test/t/shop/poppy/feedback"
	unitRequest  = sessions.Request{Audience: unitAud, Method: "POST", URL: mustURL(unitURL)}

	// jwksKey is in the agent's jwks_uri; delegatedKey signs Session JWTs.
	jwksKey      = mustKey("a095e4742bfd497ec86d33fc92d7f858e5ce4084ba5cacb97300255123f84e1a")
	delegatedKey = mustKey("7ba11cfe034f6426a90d03f74a17f54b09eabe2637c55427ef95ac65993e03b1")
	otherKey     = mustKey("25b592e055f5fd3489bf9ddba3046b3b6a09889ac5352dd449708cab642fabef")
)

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func mustKey(d string) *ecdsa.PrivateKey {
	raw, err := hex.DecodeString(d)
	if err != nil {
		panic(err)
	}
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		panic(err)
	}
	return k
}

// stubResolver resolves one client with a key set of its own; it counts
// key lookups, which happen only when a delegation is verified afresh.
type stubResolver struct {
	client   *agentid.Client
	keyCalls atomic.Int64

	mu   sync.Mutex
	keys map[string]jwk.Key
}

func newStubResolver(tb testing.TB) *stubResolver {
	tb.Helper()
	r := &stubResolver{
		client: &agentid.Client{ClientID: unitClientID, JWKSURI: "https://agent.example/jwks.json", Extensions: map[string]string{}},
		keys:   map[string]jwk.Key{},
	}
	r.addKey(tb, jwksKey)
	return r
}

func (r *stubResolver) addKey(tb testing.TB, k *ecdsa.PrivateKey) {
	tb.Helper()
	pub, err := jwk.PublicKeyOf(&k.PublicKey)
	require.NoError(tb, err)
	kid := peers.JWKThumbprint(tb, &k.PublicKey)
	require.NoError(tb, pub.Set(jwk.KeyIDKey, kid))
	require.NoError(tb, pub.Set(jwk.KeyUsageKey, "sig"))
	r.mu.Lock()
	r.keys[kid] = pub
	r.mu.Unlock()
}

func (r *stubResolver) removeKeys() {
	r.mu.Lock()
	clear(r.keys)
	r.mu.Unlock()
}

func (r *stubResolver) Client(_ context.Context, clientID string) (*agentid.Client, error) {
	if clientID != r.client.ClientID {
		return nil, &agentid.InvalidError{Reason: "unknown client"}
	}
	return r.client, nil
}

func (r *stubResolver) Key(_ context.Context, _ *agentid.Client, kid string) (jwk.Key, error) {
	r.keyCalls.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[kid]
	if !ok {
		return nil, agentid.ErrUnknownKey
	}
	return k, nil
}

// clock is a settable fake clock.
type clock struct{ t atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) set(t time.Time)     { c.t.Store(t.UnixNano()) }
func (c *clock) now() time.Time      { return time.Unix(0, c.t.Load()) }
func (c *clock) add(d time.Duration) { c.t.Add(int64(d)) }

// tokenSpec describes a Session JWT; zero values make a valid one for
// unitRequest at unitNow.
type tokenSpec struct {
	iat          time.Time     // [unitNow]
	dlgIAT       time.Time     // [unitNow - 1m]
	dlgLifetime  time.Duration // [1h]
	delegatedKey *ecdsa.PrivateKey
	// delegation, when set, is used as pap_dlg as is.
	delegation  string
	jti         string
	accessToken string

	mutateHeader, mutateClaims       func(map[string]any)
	mutateDlgHeader, mutateDlgClaims func(map[string]any)
}

// delegationFor returns a delegation of s's delegated key signed by jwksKey.
func delegationFor(tb testing.TB, s tokenSpec) string {
	tb.Helper()
	dk := s.delegatedKey
	if dk == nil {
		dk = delegatedKey
	}
	iat := s.dlgIAT
	if iat.IsZero() {
		iat = unitNow.Add(-time.Minute)
	}
	life := s.dlgLifetime
	if life == 0 {
		life = time.Hour
	}
	pub, err := jwk.PublicKeyOf(&dk.PublicKey)
	require.NoError(tb, err)
	raw, err := json.Marshal(pub)
	require.NoError(tb, err)
	var cnf map[string]any
	require.NoError(tb, json.Unmarshal(raw, &cnf))
	header := map[string]any{"typ": "pap-delegation+jwt", "alg": "ES256", "kid": peers.JWKThumbprint(tb, &jwksKey.PublicKey)}
	claims := map[string]any{"iss": unitClientID, "cnf": map[string]any{"jwk": cnf},
		"iat": iat.Unix(), "exp": iat.Add(life).Unix(), "jti": "dlg-" + hex.EncodeToString(raw[:8])}
	if s.mutateDlgHeader != nil {
		s.mutateDlgHeader(header)
	}
	if s.mutateDlgClaims != nil {
		s.mutateDlgClaims(claims)
	}
	return peers.SignJWT(tb, "ES256", jwksKey, header, claims)
}

// unitToken returns the Session JWT s describes.
func unitToken(tb testing.TB, s tokenSpec) string {
	tb.Helper()
	dk := s.delegatedKey
	if dk == nil {
		dk = delegatedKey
	}
	dlg := s.delegation
	if dlg == "" {
		dlg = delegationFor(tb, s)
	}
	iat := s.iat
	if iat.IsZero() {
		iat = unitNow
	}
	jti := s.jti
	if jti == "" {
		jti = "jti-" + hex.EncodeToString([]byte(iat.String()))[:16]
	}
	header := map[string]any{"typ": "poppy-session+jwt", "alg": "ES256", "kid": peers.JWKThumbprint(tb, &dk.PublicKey), "pap_dlg": dlg}
	claims := map[string]any{"iss": unitClientID, "aud": unitAud, "sid": "Yx2b7Qd_Kp8mR3vT1nWc4A", "sub": "usr_Q7c1vK",
		"htm": "POST", "htu": unitURL, "iat": iat.Unix(), "jti": jti}
	if s.accessToken != "" {
		claims["ath"] = athOf(s.accessToken)
	}
	if s.mutateHeader != nil {
		s.mutateHeader(header)
	}
	if s.mutateClaims != nil {
		s.mutateClaims(claims)
	}
	return peers.SignJWT(tb, "ES256", dk, header, claims)
}

// newUnitVerifier returns a Verifier on a fresh stub resolver and clock.
func newUnitVerifier(tb testing.TB) (*sessions.Verifier, *stubResolver, *clock) {
	tb.Helper()
	r := newStubResolver(tb)
	c := newClock(unitNow)
	return sessions.NewVerifier(r, sessions.VerifierOptions{Now: c.now}), r, c
}
