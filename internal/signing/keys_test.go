package signing_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/jose"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

const typ = "poppy-test+jwt"

func TestFirstUseMakesOneKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")

	key, err := b.keys.Signer(b.ctx, alpha)
	require.NoError(t, err)
	ec, ok := key.(jwk.ECDSAPrivateKey)
	require.True(t, ok, "a private EC key, got %T", key)
	require.Equal(t, jwa.P256, ec.Crv())
	require.Equal(t, jwa.ES256, key.Algorithm())
	require.Equal(t, jwk.ForSignature.String(), key.KeyUsage())
	require.Equal(t, thumbprint(t, key), key.KeyID(), "kid is the RFC 7638 thumbprint")
	require.Len(t, key.KeyID(), 43)

	// Stored once, as the private JWK, under its kid.
	all, current := b.count(t, alpha)
	require.Equal(t, 1, all)
	require.Equal(t, 1, current)
	// Sealed, and bound to its kid.
	var (
		kid           string
		plain, sealed []byte
		private       map[string]json.RawMessage
	)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT kid, private_jwk, private_jwk_sealed FROM signing_keys WHERE company_id = $1`,
		alpha).Scan(&kid, &plain, &sealed))
	require.Equal(t, key.KeyID(), kid)
	require.Nil(t, plain)
	opened, err := testdb.Sealer(b.pool).Open(b.ctx, alpha, sealing.SigningKey, kid, sealed)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(opened, &private))
	require.True(t, jose.HasPrivateMembers(private))
	_, err = testdb.Sealer(b.pool).Open(b.ctx, alpha, sealing.SigningKey, "another kid", sealed)
	require.ErrorIs(t, err, sealing.ErrOpen)

	// The same key on later calls, on this replica and on another.
	require.Equal(t, kid, b.kid(t, b.keys, alpha))
	require.Equal(t, kid, b.kid(t, b.replica(), alpha))
	require.Equal(t, []string{kid}, b.kids(t, b.replica(), alpha))
	all, _ = b.count(t, alpha)
	require.Equal(t, 1, all)

	// PublicSet makes the first key too.
	beta := b.company(t, "beta")
	set, err := b.keys.PublicSet(b.ctx, beta)
	require.NoError(t, err)
	require.Equal(t, 1, set.Len())
	pub, _ := set.Key(0)
	require.Equal(t, b.kid(t, b.keys, beta), pub.KeyID())
	require.Equal(t, jwa.ES256, pub.Algorithm())
	require.Equal(t, jwk.ForSignature.String(), pub.KeyUsage())
	_, isPublic := pub.(jwk.ECDSAPublicKey)
	require.True(t, isPublic, "got %T", pub)
	require.Equal(t, pub.KeyID(), thumbprint(t, pub))
}

func TestConcurrentFirstUseMakesOneKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const companies, replicas, callers = 4, 4, 8
	for c := range companies {
		id := b.company(t, "race"+string(rune('a'+c)))
		kids := make([]string, replicas*callers)
		errs := make([]error, len(kids))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for r := range replicas {
			k := b.replica()
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					key, err := k.Signer(b.ctx, id)
					errs[r*callers+i] = err
					if err == nil {
						kids[r*callers+i] = key.KeyID()
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, i)
			require.Equal(t, kids[0], kids[i], "caller %d signs with another key", i)
		}
		all, current := b.count(t, id)
		require.Equal(t, 1, all)
		require.Equal(t, 1, current)
	}
}

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")
	payload := `{"sub":"alice","scope":"orders:read"}`

	tok := b.sign(t, b.keys, alpha, typ, payload)
	require.Equal(t, map[string]any{"alg": "ES256", "kid": b.kid(t, b.keys, alpha), "typ": typ}, decodeHeader(t, tok))

	got, err := b.keys.Verify(b.ctx, alpha, typ, tok)
	require.NoError(t, err)
	require.JSONEq(t, payload, string(got))

	// Another replica, its cache cold, verifies it too.
	got, err = b.replica().Verify(b.ctx, alpha, typ, tok)
	require.NoError(t, err)
	require.JSONEq(t, payload, string(got))

	// So does anyone holding the public set, with jwx alone.
	set, err := b.keys.PublicSet(b.ctx, alpha)
	require.NoError(t, err)
	got, err = jws.Verify([]byte(tok), jws.WithKeySet(set))
	require.NoError(t, err)
	require.JSONEq(t, payload, string(got))

	_, err = b.keys.Sign(b.ctx, alpha, "", []byte(payload))
	require.Error(t, err, "a token without typ")
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha, beta := b.company(t, "alpha"), b.company(t, "beta")
	payload := `{"sub":"alice"}`
	good := b.sign(t, b.keys, alpha, typ, payload)
	parts := strings.Split(good, ".")
	kid := b.kid(t, b.keys, alpha)
	signer, err := b.keys.Signer(b.ctx, alpha)
	require.NoError(t, err)

	// signWith signs payload with key and exactly the header members given
	// (jwx adds alg, and kid when key has one).
	signWith := func(key any, alg jwa.SignatureAlgorithm, members map[string]any) string {
		hdr := jws.NewHeaders()
		for name, v := range members {
			require.NoError(t, hdr.Set(name, v))
		}
		tok, err := jws.Sign([]byte(payload), jws.WithKey(alg, key, jws.WithProtectedHeaders(hdr)))
		require.NoError(t, err)
		return string(tok)
	}
	stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	strangerJWK, err := jwk.FromRaw(stranger)
	require.NoError(t, err)
	strangerKid := thumbprint(t, strangerJWK)

	tests := map[string]struct {
		typ, token string
	}{
		"wrong typ":                           {"other+jwt", good},
		"typ with application/":               {"application/" + typ, good},
		"typ in other case":                   {strings.ToUpper(typ), good},
		"tampered payload":                    {typ, parts[0] + "." + segment(t, map[string]any{"sub": "mallory"}) + "." + parts[2]},
		"tampered signature":                  {typ, parts[0] + "." + parts[1] + "." + strings.Map(flip, parts[2][:1]) + parts[2][1:]},
		"no signature":                        {typ, parts[0] + "." + parts[1] + "."},
		"unknown kid":                         {typ, signWith(stranger, jwa.ES256, map[string]any{"kid": strangerKid, "typ": typ})},
		"stranger with our kid":               {typ, signWith(stranger, jwa.ES256, map[string]any{"kid": kid, "typ": typ})},
		"alg none":                            {typ, segment(t, map[string]any{"alg": "none", "kid": kid, "typ": typ}) + "." + parts[1] + "."},
		"alg HS256 keyed with the public key": {typ, signWith(mustJSON(t, mustPublic(t, signer)), jwa.HS256, map[string]any{"kid": kid, "typ": typ})},
		"alg ES384 named":                     {typ, segment(t, map[string]any{"alg": "ES384", "kid": kid, "typ": typ}) + "." + parts[1] + "." + parts[2]},
		"no alg":                              {typ, segment(t, map[string]any{"kid": kid, "typ": typ}) + "." + parts[1] + "." + parts[2]},
		"no typ":                              {typ, signWith(signer, jwa.ES256, nil)},
		"no kid":                              {typ, signWith(mustRaw(t, signer), jwa.ES256, map[string]any{"typ": typ})},
		"kid not a thumbprint":                {typ, signWith(mustRaw(t, signer), jwa.ES256, map[string]any{"kid": "key-1", "typ": typ})},
		"crit":                                {typ, signWith(signer, jwa.ES256, map[string]any{"typ": typ, "crit": []string{"exp"}, "exp": 1})},
		"b64":                                 {typ, signWith(signer, jwa.ES256, map[string]any{"typ": typ, "b64": true})},
		"other Company's key":                 {typ, b.sign(t, b.keys, beta, typ, payload)},
		"two segments":                        {typ, parts[0] + "." + parts[1]},
		"four segments":                       {typ, good + ".x"},
		"JSON serialization":                  {typ, `{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`},
		"header not JSON":                     {typ, "bm90IGpzb24." + parts[1] + "." + parts[2]},
		"header not base64url":                {typ, "!!!." + parts[1] + "." + parts[2]},
		"payload not base64url":               {typ, parts[0] + ".!!!." + parts[2]},
		"empty":                               {typ, ""},
		"too large":                           {typ, parts[0] + "." + strings.Repeat("A", 64<<10) + "." + parts[2]},
	}
	for name, tc := range tests {
		_, err := b.keys.Verify(b.ctx, alpha, tc.typ, tc.token)
		require.ErrorIs(t, err, signing.ErrInvalid, name)
	}
	// The good token itself passes, and a Company with no keys yet verifies
	// nothing and gets none made.
	_, err = b.keys.Verify(b.ctx, alpha, typ, good)
	require.NoError(t, err)
	gamma := b.company(t, "gamma")
	_, err = b.keys.Verify(b.ctx, gamma, typ, good)
	require.ErrorIs(t, err, signing.ErrInvalid)
	all, _ := b.count(t, gamma)
	require.Zero(t, all)
}

func flip(r rune) rune {
	if r == 'A' {
		return 'B'
	}
	return 'A'
}

func mustPublic(t *testing.T, key jwk.Key) jwk.Key {
	t.Helper()
	pub, err := key.PublicKey()
	require.NoError(t, err)
	return pub
}

func mustRaw(t *testing.T, key jwk.Key) *ecdsa.PrivateKey {
	t.Helper()
	var raw ecdsa.PrivateKey
	require.NoError(t, key.Raw(&raw))
	return &raw
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestRotationKeepsOldTokensUntilRetainPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")
	old := b.kid(t, b.keys, alpha)
	oldToken := b.sign(t, b.keys, alpha, typ, `{"n":1}`)

	require.NoError(t, b.keys.Rotate(b.ctx, alpha))
	current := b.kid(t, b.keys, alpha)
	require.NotEqual(t, old, current, "this replica signs with the new key at once")
	newToken := b.sign(t, b.keys, alpha, typ, `{"n":2}`)
	require.Equal(t, current, decodeHeader(t, newToken)["kid"])
	require.Equal(t, []string{current, old}, b.kids(t, b.keys, alpha), "current key first")
	all, cur := b.count(t, alpha)
	require.Equal(t, 2, all)
	require.Equal(t, 1, cur)

	verifies := func(tok string) bool {
		t.Helper()
		_, err := b.keys.Verify(b.ctx, alpha, typ, tok)
		if err != nil {
			require.ErrorIs(t, err, signing.ErrInvalid)
		}
		return err == nil
	}
	require.True(t, verifies(oldToken))
	require.True(t, verifies(newToken))

	b.clock.Add(48*time.Hour - time.Second) // the default Retain, less a second
	require.True(t, verifies(oldToken))
	require.Equal(t, []string{current, old}, b.kids(t, b.replica(), alpha))

	b.clock.Add(time.Second)
	require.False(t, verifies(oldToken), "retired Retain ago")
	require.True(t, verifies(newToken))
	require.Equal(t, []string{current}, b.kids(t, b.keys, alpha))
	require.Equal(t, []string{current}, b.kids(t, b.replica(), alpha))
	_, err := b.replica().Verify(b.ctx, alpha, typ, oldToken)
	require.ErrorIs(t, err, signing.ErrInvalid)

	// Rotating a Company that has no key yet makes its first.
	beta := b.company(t, "beta")
	require.NoError(t, b.keys.Rotate(b.ctx, beta))
	all, cur = b.count(t, beta)
	require.Equal(t, 1, all)
	require.Equal(t, 1, cur)
}

func TestConcurrentRotationsLeaveOneCurrentKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")
	first := b.kid(t, b.keys, alpha)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		k := b.replica()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = k.Rotate(b.ctx, alpha)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	_, cur := b.count(t, alpha)
	require.Equal(t, 1, cur)
	require.NotEqual(t, first, b.kid(t, b.replica(), alpha))
}

// TestKeyRotatedOnAnotherReplica: a replica whose cache is warm verifies a
// token signed with a key made elsewhere at once, by reloading on the
// unknown kid, and goes on signing with its cached key until CacheTTL.
func TestKeyRotatedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")
	a, other := b.keys, b.replica()
	old := b.kid(t, a, alpha)
	_, err := other.Verify(b.ctx, alpha, typ, b.sign(t, a, alpha, typ, `{"n":1}`))
	require.NoError(t, err)
	require.Equal(t, old, b.kid(t, other, alpha), "warm")
	loads := signing.Loads(other)

	require.NoError(t, a.Rotate(b.ctx, alpha))
	newToken := b.sign(t, a, alpha, typ, `{"n":2}`)
	got, err := other.Verify(b.ctx, alpha, typ, newToken)
	require.NoError(t, err)
	require.JSONEq(t, `{"n":2}`, string(got))
	require.Equal(t, loads+1, signing.Loads(other), "one reload")

	// The reload also taught it the new current key.
	require.NotEqual(t, old, b.kid(t, other, alpha))

	// A third replica, warm before the rotation, signs with the retired key
	// until its cache expires; those tokens verify everywhere.
	third := signing.NewKeys(b.pool, testdb.Sealer(b.pool), signing.Options{Now: b.clock.Now, CacheTTL: time.Hour})
	require.NoError(t, a.Rotate(b.ctx, alpha))
	b.clock.Add(time.Minute)
	stale := b.kid(t, third, alpha)
	require.NoError(t, a.Rotate(b.ctx, alpha))
	require.Equal(t, stale, b.kid(t, third, alpha), "cached")
	tok := b.sign(t, third, alpha, typ, `{"n":3}`)
	for _, k := range []*signing.Keys{a, other, b.replica()} {
		_, err := k.Verify(b.ctx, alpha, typ, tok)
		require.NoError(t, err)
	}
	b.clock.Add(time.Hour)
	require.Equal(t, b.kid(t, a, alpha), b.kid(t, third, alpha), "after CacheTTL")

	// A kid it does not know costs one reload per token, no more.
	loads = signing.Loads(other)
	_, err = other.Verify(b.ctx, alpha, typ, b.sign(t, a, b.company(t, "beta"), typ, `{}`))
	require.ErrorIs(t, err, signing.ErrInvalid)
	require.LessOrEqual(t, signing.Loads(other), loads+2, "the cache may have expired, plus one reload")
}

func TestSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha, beta := b.company(t, "alpha"), b.company(t, "beta")

	s, err := b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Len(t, s, 32)
	require.NotEqual(t, make([]byte, 32), s)
	again, err := b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, s, again)
	again[0] ^= 0xff
	again, err = b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, s, again, "callers get copies")
	other, err := b.replica().Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, s, other, "the same on every replica")
	var plain, sealed []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT secret, secret_sealed FROM company_secrets WHERE company_id = $1`,
		alpha).Scan(&plain, &sealed))
	require.Nil(t, plain, "stored sealed")
	opened, err := testdb.Sealer(b.pool).Open(b.ctx, alpha, sealing.CompanySecret, "1", sealed)
	require.NoError(t, err)
	require.Equal(t, s, opened)

	// Racing first uses on several replicas agree.
	secrets := make([][]byte, 16)
	errs := make([]error, len(secrets))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range secrets {
		k := b.replica()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			secrets[i], errs[i] = k.Secret(b.ctx, beta)
		}()
	}
	close(start)
	wg.Wait()
	for i := range secrets {
		require.NoError(t, errs[i])
		require.Equal(t, secrets[0], secrets[i])
	}
	require.NotEqual(t, s, secrets[0], "each Company has its own")

	_, err = b.keys.Secret(b.ctx, 1<<40)
	require.Error(t, err, "no such Company")
}

// TestCompanyIsolation makes keys and secrets as Company A and proves
// Company B can neither use nor change them.
func TestCompanyIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, bb := b.company(t, "alpha"), b.company(t, "beta")
	kidA, kidB := b.kid(t, b.keys, a), b.kid(t, b.keys, bb)
	require.NotEqual(t, kidA, kidB)
	tokA := b.sign(t, b.keys, a, typ, `{"sub":"alice"}`)

	_, err := b.keys.Verify(b.ctx, bb, typ, tokA)
	require.ErrorIs(t, err, signing.ErrInvalid)
	_, err = b.replica().Verify(b.ctx, bb, typ, tokA)
	require.ErrorIs(t, err, signing.ErrInvalid)
	require.Equal(t, []string{kidB}, b.kids(t, b.keys, bb))

	require.NoError(t, b.keys.Rotate(b.ctx, bb))
	require.Equal(t, kidA, b.kid(t, b.keys, a), "B's rotation leaves A's key")
	require.Equal(t, []string{kidA}, b.kids(t, b.keys, a))
	_, err = b.keys.Verify(b.ctx, a, typ, tokA)
	require.NoError(t, err)

	sa, err := b.keys.Secret(b.ctx, a)
	require.NoError(t, err)
	sb, err := b.keys.Secret(b.ctx, bb)
	require.NoError(t, err)
	require.NotEqual(t, sa, sb)

	// Deleting a Company deletes its keys and secret, and only its.
	_, err = b.pool.Exec(b.ctx, `DELETE FROM companies WHERE id = $1`, a)
	require.NoError(t, err)
	all, _ := b.count(t, a)
	require.Zero(t, all)
	var secrets int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM company_secrets WHERE company_id = $1`, a).Scan(&secrets))
	require.Zero(t, secrets)
	all, _ = b.count(t, bb)
	require.Equal(t, 2, all)

	_, err = b.replica().Signer(b.ctx, a)
	require.Error(t, err, "no key for a deleted Company")
	require.NotErrorIs(t, err, signing.ErrInvalid)
}
