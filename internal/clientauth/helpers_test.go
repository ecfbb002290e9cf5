package clientauth_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// testIssuer is the Company issuer assertions are addressed to.
const testIssuer = "https://poppyhost.test/t/acme"

// testNow is the verifier's fake clock.
var testNow = time.Unix(1_800_000_000, 0)

// memReplays is an in-memory ReplayStore; the issuer's is on PostgreSQL.
type memReplays struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[[3]string]time.Time
}

func newMemReplays(now func() time.Time) *memReplays {
	return &memReplays{now: now, m: map[[3]string]time.Time{}}
}

func (s *memReplays) Use(_ context.Context, issuer, clientID, jti string, exp time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [3]string{issuer, clientID, jti}
	if until, ok := s.m[k]; ok && s.now().Before(until) {
		return false, nil
	}
	s.m[k] = exp
	return true, nil
}

// failingReplays is a ReplayStore whose database is down.
type failingReplays struct{ err error }

func (s failingReplays) Use(context.Context, string, string, string, time.Time) (bool, error) {
	return false, s.err
}

// bundle is a verifier that resolves a real HTTPS test Personal Agent.
type bundle struct {
	ca       *devca.CA
	hosts    *peers.Hosts
	agent    *peers.Agent
	resolver *agentid.Resolver
	replays  *memReplays
	verifier *clientauth.Verifier
}

func setup(t testing.TB) *bundle {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	b := &bundle{ca: ca, hosts: &peers.Hosts{}}
	b.agent = b.startAgent(t, "")
	b.resolver = agentid.NewResolver(safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: b.hosts}), agentid.Options{})
	b.replays = newMemReplays(func() time.Time { return testNow })
	b.verifier = clientauth.NewVerifier(b.resolver, clientauth.Options{Now: func() time.Time { return testNow }, Replays: b.replays})
	return b
}

// startAgent starts another Personal Agent the resolver can reach.
func (b *bundle) startAgent(t testing.TB, host string) *peers.Agent {
	t.Helper()
	a := peers.StartAgent(t, b.ca, peers.AgentOptions{Host: host})
	b.hosts.Add(a.Host)
	return a
}

// spec shapes an assertion. Zero values are a valid ES256 assertion from
// the bundle's agent; each other field breaks one thing.
type spec struct {
	agent   *peers.Agent  // [the bundle's agent]
	alg     string        // the agent key to sign with ["ES256"]
	signAlg string        // JWS algorithm of the signature [alg]
	key     crypto.Signer // signs instead of the agent's key; kid unchanged
	header  func(h map[string]any)
	claims  func(c map[string]any)
}

func (b *bundle) assertion(t testing.TB, s spec) string {
	t.Helper()
	h, c, key := b.parts(s)
	if s.header != nil {
		s.header(h)
	}
	if s.claims != nil {
		s.claims(c)
	}
	signAlg := s.signAlg
	if signAlg == "" {
		signAlg = h["alg"].(string)
	}
	return peers.SignJWT(t, signAlg, key, h, c)
}

// parts returns the default header, claims and signing key of s.
func (b *bundle) parts(s spec) (map[string]any, map[string]any, crypto.Signer) {
	a := s.agent
	if a == nil {
		a = b.agent
	}
	alg := s.alg
	if alg == "" {
		alg = "ES256"
	}
	key, kid := a.Key(alg)
	if s.key != nil {
		key = s.key
	}
	h := map[string]any{"alg": alg, "kid": kid}
	c := map[string]any{
		"iss": a.ClientID,
		"sub": a.ClientID,
		"aud": testIssuer,
		"iat": testNow.Unix(),
		"exp": testNow.Add(2 * time.Minute).Unix(),
		"jti": randomID(),
	}
	return h, c, key
}

// unsigned returns a compact JWS of header and claims with sig as its
// signature, for algorithms SignJWT cannot sign with.
func unsigned(t testing.TB, h, c map[string]any, sig []byte) string {
	t.Helper()
	hj, err := json.Marshal(h)
	require.NoError(t, err)
	cj, err := json.Marshal(c)
	require.NoError(t, err)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(hj) + "." + enc.EncodeToString(cj) + "." + enc.EncodeToString(sig)
}

// form returns token endpoint form values carrying assertion.
func form(assertion string) url.Values {
	return url.Values{
		"grant_type":            {"refresh_token"},
		"client_assertion_type": {clientauth.AssertionType},
		"client_assertion":      {assertion},
	}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// requireRefused asserts err is an invalid_client *Error whose description
// contains want.
func requireRefused(t testing.TB, err error, want string) {
	t.Helper()
	var e *clientauth.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, clientauth.CodeInvalidClient, e.Code, "%v", err)
	require.Equal(t, 401, e.Status())
	require.Contains(t, e.Description, want)
}
