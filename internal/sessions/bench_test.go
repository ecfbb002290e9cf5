package sessions_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// BenchmarkVerifyWarm is Verify on a warm delegation cache with an
// in-memory resolver: the common request. It does exactly one signature
// verification, the Session JWT's ES256 with the delegated key; the
// delegation is found by its hash, and its jwks_uri key is looked up once
// in the resolver's cache to see that it still signs (spec 10.7).
func BenchmarkVerifyWarm(b *testing.B) {
	v, r, _ := newUnitVerifier(b)
	tok := unitToken(b, tokenSpec{})
	ctx := context.Background()
	_, err := v.Verify(ctx, tok, unitRequest)
	require.NoError(b, err)
	calls := r.keyCalls.Load()

	b.ReportAllocs()
	var n int64
	for b.Loop() {
		if _, err := v.Verify(ctx, tok, unitRequest); err != nil {
			b.Fatal(err)
		}
		n++
	}
	require.Equal(b, calls+n, r.keyCalls.Load(), "one key lookup a request: the delegation was not verified again")
}

// BenchmarkVerifyColdDelegation is Verify with a delegation it has not
// seen (a new Verifier, so an empty cache, each time): two signature
// verifications, the delegation's and the Session JWT's, plus parsing
// cnf.jwk and its thumbprint.
func BenchmarkVerifyColdDelegation(b *testing.B) {
	r := newStubResolver(b)
	opts := sessions.VerifierOptions{Now: func() time.Time { return unitNow }}
	tok := unitToken(b, tokenSpec{})
	ctx := context.Background()

	b.ReportAllocs()
	for b.Loop() {
		if _, err := sessions.NewVerifier(r, opts).Verify(ctx, tok, unitRequest); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkES256Verify is one bare P-256 ECDSA verification, the floor
// under the two above: warm ≈ 1×, cold ≈ 2× this plus parsing.
func BenchmarkES256Verify(b *testing.B) {
	sum := sha256.Sum256([]byte("header.claims"))
	sig, err := ecdsa.SignASN1(rand.Reader, delegatedKey, sum[:])
	require.NoError(b, err)

	b.ReportAllocs()
	for b.Loop() {
		if !ecdsa.VerifyASN1(&delegatedKey.PublicKey, sum[:], sig) {
			b.Fatal("signature does not verify")
		}
	}
}

// sessionSigner signs Session JWTs for one Session under one delegation,
// as a Personal Agent does between delegations, so the server's
// delegation cache stays warm.
type sessionSigner struct {
	agent  *peers.Agent
	c      *company
	cl     peers.SessionClaims
	header map[string]any
	n      atomic.Int64
}

func newSessionSigner(b *testing.B, a *peers.Agent, c *company) *sessionSigner {
	cl := c.claims(newSID())
	tok := a.SessionJWT(b, cl, peers.SessionOptions{})
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	require.NoError(b, err)
	var header map[string]any
	require.NoError(b, json.Unmarshal(raw, &header))
	return &sessionSigner{agent: a, c: c, cl: cl, header: header}
}

func (s *sessionSigner) sign(b *testing.B) string {
	claims := map[string]any{"iss": s.agent.ClientID, "aud": s.cl.Aud, "sid": s.cl.SID, "sub": s.cl.Sub,
		"htm": http.MethodPost, "htu": s.c.FeedbackURL, "iat": time.Now().Unix(),
		"jti": "bench-" + strconv.FormatInt(s.n.Add(1), 10) + "-" + randHex(4)}
	return peers.SignJWT(b, "ES256", s.agent.DelegatedKey(s.cl.Sub), s.header, claims)
}

// BenchmarkFeedbackHTTP posts feedback reports in one known Session end to
// end, on the kit's routes (the platform's, without its request logging
// and metrics): HTTPS (HTTP/2, one connection), the Company lookup, the
// address, agent and Session rate limits, Verify with a warm delegation,
// the jti insert and the Session lookup in one statement, and the report's
// insert. The client signs each Session JWT in the same process, so its
// ES256 signing is in the figures too.
func BenchmarkFeedbackHTTP(b *testing.B) {
	env := setup(b)
	a := env.StartAgent(b, "")
	c := newCompany(b, env, map[string]any{"rate_limits": map[string]any{
		"per_address": 1_000_000, "per_agent": 1_000_000, "per_session": 1_000_000}})
	s := newSessionSigner(b, a, c)
	post := func(b *testing.B) int {
		req, err := http.NewRequest(http.MethodPost, c.FeedbackURL, strings.NewReader(feedbackBody))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Poppy-Session", s.sign(b))
		resp, err := env.Client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(b, http.StatusAccepted, post(b), "warm-up")

	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if status := post(b); status != http.StatusAccepted {
				b.Errorf("status %d", status)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkReplayInsert is the database half of a verified request: the
// jti insert and the Session lookup in one statement, one round trip.
func BenchmarkReplayInsert(b *testing.B) {
	env := setup(b)
	c := newCompany(b, env, nil)
	store := sessions.NewStore(env.Pool)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	prefix := randHex(4)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		n++
		fresh, err := store.RecordJTI(ctx, c.ID, "https://agent.test/agent.json", "sid", prefix+strconv.Itoa(n), until)
		if err != nil || !fresh {
			b.Fatal(fresh, err)
		}
	}
}
