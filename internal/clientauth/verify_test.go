package clientauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestVerify has one row per rule of spec 4.1 and RFC 7523 §3; each
// refused row breaks exactly one thing in an otherwise valid assertion.
func TestVerify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	strangerEC, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)

	set := func(name string, v any) func(map[string]any) {
		return func(m map[string]any) { m[name] = v }
	}
	del := func(name string) func(map[string]any) {
		return func(m map[string]any) { delete(m, name) }
	}
	at := func(d time.Duration) int64 { return testNow.Add(d).Unix() }

	rows := []struct {
		name  string
		spec  spec
		token func(t testing.TB) string // replaces spec
		form  func(f url.Values)
		want  string // part of the description; "" means accepted
	}{
		// Accepted.
		{name: "ES256", spec: spec{}},
		{name: "PS384", spec: spec{alg: "PS384"}},
		{name: "typ client-authentication+jwt", spec: spec{header: set("typ", "client-authentication+jwt")}},
		{name: "typ JWT", spec: spec{header: set("typ", "JWT")}},
		{name: "form client_id equal to iss", form: func(f url.Values) { f.Set("client_id", b.agent.ClientID) }},
		{name: "iat within skew", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(20*time.Second), at(2*time.Minute) }}},
		{name: "nbf now", spec: spec{claims: set("nbf", testNow.Unix())}},
		{name: "lifetime exactly 5 minutes", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(-time.Minute), at(4*time.Minute) }}},
		{name: "fractional dates", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = float64(at(0))+0.5, float64(at(time.Minute))+0.25 }}},

		// The form (RFC 7521 §4.2, RFC 6749 §3.2).
		{name: "assertion type missing", form: func(f url.Values) { f.Del("client_assertion_type") }, want: "client_assertion_type is required"},
		{name: "assertion type saml", form: func(f url.Values) {
			f.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:saml2-bearer")
		}, want: "client_assertion_type must be"},
		{name: "assertion type with trailing space", form: func(f url.Values) { f.Set("client_assertion_type", clientauth.AssertionType+" ") }, want: "client_assertion_type must be"},
		{name: "assertion type repeated", form: func(f url.Values) { f.Add("client_assertion_type", clientauth.AssertionType) }, want: "client_assertion_type must be sent once"},
		{name: "assertion missing", form: func(f url.Values) { f.Del("client_assertion") }, want: "client_assertion is required"},
		{name: "assertion empty", token: func(testing.TB) string { return "" }, want: "client_assertion is required"},
		{name: "assertion repeated", form: func(f url.Values) { f.Add("client_assertion", f.Get("client_assertion")) }, want: "client_assertion must be sent once"},
		{name: "assertion too large", spec: spec{claims: set("pad", strings.Repeat("x", clientauth.MaxAssertion))}, want: "larger than"},
		{name: "client_id repeated", form: func(f url.Values) { f["client_id"] = []string{b.agent.ClientID, b.agent.ClientID} }, want: "client_id must be sent once"},

		// The JWS.
		{name: "not compact", token: func(testing.TB) string { return "a.b" }, want: "compact form"},
		{name: "JSON serialization", token: func(testing.TB) string { return `{"payload":"e30","signatures":[]}` }, want: "compact form"},
		{name: "header not JSON", token: func(testing.TB) string { return "bm90IGpzb24.e30.AA" }, want: "header is malformed"},
		{name: "claims not an object", token: func(t testing.TB) string {
			h, _, _ := b.parts(spec{})
			return unsigned(t, h, nil, []byte{1})
		}, want: "claims are malformed"},
		{name: "alg none", token: func(t testing.TB) string {
			h, c, _ := b.parts(spec{})
			h["alg"] = "none"
			return unsigned(t, h, c, nil)
		}, want: "alg must be ES256 or PS384"},
		{name: "alg HS256 keyed with the public key (alg confusion)", token: func(t testing.TB) string {
			h, c, _ := b.parts(spec{alg: "PS384"})
			h["alg"] = "HS256"
			priv, _ := b.agent.Key("PS384")
			der, err := x509.MarshalPKIXPublicKey(priv.Public())
			require.NoError(t, err)
			secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
			tok := unsigned(t, h, c, nil)
			mac := hmac.New(sha256.New, secret)
			mac.Write([]byte(strings.TrimSuffix(tok, ".")))
			return unsigned(t, h, c, mac.Sum(nil))
		}, want: "alg must be ES256 or PS384"},
		{name: "alg RS256", spec: spec{alg: "PS384", header: set("alg", "RS256")}, want: "alg must be ES256 or PS384"},
		{name: "alg PS256", spec: spec{alg: "PS384", header: set("alg", "PS256")}, want: "alg must be ES256 or PS384"},
		{name: "alg ES384", spec: spec{key: p384, header: set("alg", "ES384")}, want: "alg must be ES256 or PS384"},
		{name: "alg missing", spec: spec{header: del("alg"), signAlg: "ES256"}, want: "alg must be ES256 or PS384"},
		{name: "alg lowercase", spec: spec{header: set("alg", "es256"), signAlg: "ES256"}, want: "alg must be ES256 or PS384"},
		{name: "ES256 with the RSA key's kid", spec: spec{alg: "PS384", header: set("alg", "ES256"), key: strangerEC}, want: "jwks_uri key"},
		{name: "PS384 with the EC key's kid", spec: spec{header: set("alg", "PS384"), key: mustRSA(t)}, want: "jwks_uri key"},
		{name: "kid missing", spec: spec{header: del("kid")}, want: "kid is required"},
		{name: "kid empty", spec: spec{header: set("kid", "")}, want: "kid is required"},
		{name: "kid not a string", spec: spec{header: set("kid", 7)}, want: "header is malformed"},
		{name: "signed by an unknown key", spec: spec{key: strangerEC, header: set("kid", peers.JWKThumbprint(t, strangerEC.Public()))}, want: "names no signing key"},
		{name: "signed by another key under a known kid", spec: spec{key: strangerEC}, want: "signature does not verify"},
		{name: "signature altered", token: func(t testing.TB) string {
			tok := b.assertion(t, spec{})
			i := strings.LastIndexByte(tok, '.')
			sig := []byte(tok[i+1:])
			sig[3] ^= 1
			return tok[:i+1] + string(sig)
		}, want: "signature does not verify"},
		{name: "crit", spec: spec{header: set("crit", []string{"exp"})}, want: "crit or b64"},
		{name: "b64 false", spec: spec{header: set("b64", false)}, want: "crit or b64"},

		// Poppy tokens are not client assertions (RFC 8725 §3.11).
		{name: "typ poppy-session+jwt", spec: spec{header: set("typ", "poppy-session+jwt")}, want: "typ must not be"},
		{name: "typ pap-delegation+jwt", spec: spec{header: set("typ", "pap-delegation+jwt")}, want: "typ must not be"},
		{name: "typ application/Poppy-Session+JWT", spec: spec{header: set("typ", "application/Poppy-Session+JWT")}, want: "typ must not be"},
		{name: "Session JWT", token: func(t testing.TB) string {
			return b.agent.SessionJWT(t, peers.SessionClaims{Aud: testIssuer, Method: "POST", URL: testIssuer + "/oauth/token"}, peers.SessionOptions{})
		}, want: "typ must not be"},
		{name: "Session JWT signed with the jwks_uri key, with assertion claims", token: func(t testing.TB) string {
			return b.agent.SessionJWT(t, peers.SessionClaims{Aud: testIssuer, Method: "POST", URL: testIssuer + "/oauth/token", IAT: testNow},
				peers.SessionOptions{SignDirect: true, MutateClaims: func(c map[string]any) {
					c["sub"], c["exp"] = b.agent.ClientID, at(time.Minute)
				}})
		}, want: "typ must not be"},

		// iss, sub and client_id.
		{name: "iss missing", spec: spec{claims: del("iss")}, want: "iss is required"},
		{name: "sub missing", spec: spec{claims: del("sub")}, want: "sub must equal"},
		{name: "sub another client", spec: spec{claims: set("sub", "https://other.test/agent.json")}, want: "sub must equal"},
		{name: "iss not a client_id", spec: spec{claims: func(c map[string]any) {
			c["iss"], c["sub"] = "http://agent.test/agent.json", "http://agent.test/agent.json"
		}}, want: "is not a client_id"},
		{name: "form client_id mismatch", form: func(f url.Values) { f.Set("client_id", b.agent.ClientID+"?x") }, want: "client_id must equal"},
		{name: "form client_id empty", form: func(f url.Values) { f.Set("client_id", "") }, want: "client_id is required"},
		{name: "client metadata unreachable", spec: spec{claims: func(c map[string]any) {
			c["iss"], c["sub"] = "https://nowhere.test/agent.json", "https://nowhere.test/agent.json"
		}}, want: "could not be fetched"},

		// aud (spec 4.1).
		{name: "aud missing", spec: spec{claims: del("aud")}, want: "single string"},
		{name: "aud array of the issuer", spec: spec{claims: set("aud", []string{testIssuer})}, want: "single string"},
		{name: "aud token endpoint", spec: spec{claims: set("aud", testIssuer+"/oauth/token")}, want: "not one of its endpoints"},
		{name: "aud issuer with trailing slash", spec: spec{claims: set("aud", testIssuer+"/")}, want: "not one of its endpoints"},
		{name: "aud issuer in upper case", spec: spec{claims: set("aud", strings.ToUpper(testIssuer))}, want: "aud must be the issuer"},
		{name: "aud another issuer", spec: spec{claims: set("aud", "https://poppyhost.test/t/other")}, want: "aud must be the issuer"},

		// Times.
		{name: "exp missing", spec: spec{claims: del("exp")}, want: "exp is required"},
		{name: "exp a string", spec: spec{claims: set("exp", "1800000100")}, want: "exp is required"},
		{name: "exp now", spec: spec{claims: set("exp", testNow.Unix())}, want: "expired"},
		{name: "exp passed", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(-2*time.Minute), at(-time.Second) }}, want: "expired"},
		{name: "iat missing", spec: spec{claims: del("iat")}, want: "iat is required"},
		{name: "iat beyond skew", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(31*time.Second), at(2*time.Minute) }}, want: "iat is in the future"},
		{name: "exp before iat", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(20*time.Second), at(10*time.Second) }}, want: "exp must be after its iat"},
		{name: "lifetime 10 minutes", spec: spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(-time.Minute), at(9*time.Minute) }}, want: "lives too long"},
		{name: "nbf beyond skew", spec: spec{claims: set("nbf", at(time.Minute))}, want: "not valid yet"},
		{name: "nbf a string", spec: spec{claims: set("nbf", "0")}, want: "nbf must be"},

		// jti.
		{name: "jti missing", spec: spec{claims: del("jti")}, want: "jti is required"},
		{name: "jti empty", spec: spec{claims: set("jti", "")}, want: "jti is required"},
		{name: "jti too long", spec: spec{claims: set("jti", strings.Repeat("j", 257))}, want: "jti is required"},
		{name: "jti a number", spec: spec{claims: set("jti", 12345)}, want: "claims are malformed"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			var tok string
			if row.token != nil {
				tok = row.token(t)
			} else {
				tok = b.assertion(t, row.spec)
			}
			f := form(tok)
			if row.form != nil {
				row.form(f)
			}
			client, err := b.verifier.Verify(ctx, testIssuer, f)
			if row.want == "" {
				require.NoError(t, err)
				require.Equal(t, b.agent.ClientID, client.ClientID)
				require.Equal(t, b.agent.JWKSURI, client.JWKSURI)
				return
			}
			require.Nil(t, client)
			requireRefused(t, err, row.want)
		})
	}
}

func mustRSA(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return k
}

// TestVerifyReplay: a jti is spent once per issuer and client_id, and only
// by an assertion that verified.
func TestVerifyReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.startAgent(t, "other-agent.test")
	ctx := context.Background()
	jti := randomID()
	withJTI := func(c map[string]any) { c["jti"] = jti }

	// A forged assertion does not spend the jti.
	forged := b.assertion(t, spec{key: mustRSA(t), alg: "PS384", claims: withJTI})
	_, err := b.verifier.Verify(ctx, testIssuer, form(forged))
	requireRefused(t, err, "signature does not verify")

	tok := b.assertion(t, spec{claims: withJTI})
	_, err = b.verifier.Verify(ctx, testIssuer, form(tok))
	require.NoError(t, err)

	_, err = b.verifier.Verify(ctx, testIssuer, form(tok))
	requireRefused(t, err, "jti already used")

	// A new assertion with the same jti, signed with the other key.
	_, err = b.verifier.Verify(ctx, testIssuer, form(b.assertion(t, spec{alg: "PS384", claims: withJTI})))
	requireRefused(t, err, "jti already used")

	// Scoped by issuer: the same jti at another Company's issuer.
	const otherIssuer = "https://poppyhost.test/t/globex"
	_, err = b.verifier.Verify(ctx, otherIssuer, form(b.assertion(t, spec{claims: func(c map[string]any) {
		c["jti"], c["aud"] = jti, otherIssuer
	}})))
	require.NoError(t, err)

	// Scoped by client: another Personal Agent may pick the same jti.
	client, err := b.verifier.Verify(ctx, testIssuer, form(b.assertion(t, spec{agent: other, claims: withJTI})))
	require.NoError(t, err)
	require.Equal(t, other.ClientID, client.ClientID)
}

// TestVerifyStoreFailure: our database failing is a server_error, not the
// client's fault.
func TestVerifyStoreFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	down := errors.New("database is down")
	v := clientauth.NewVerifier(b.resolver, clientauth.Options{Now: func() time.Time { return testNow }, Replays: failingReplays{down}})
	_, err := v.Verify(context.Background(), testIssuer, form(b.assertion(t, spec{})))
	var e *clientauth.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, clientauth.CodeServerError, e.Code)
	require.Equal(t, 500, e.Status())
	require.ErrorIs(t, err, down)
	require.NotContains(t, e.Description, "database")
}

// TestVerifyMetadataMismatch: a client metadata document whose client_id is
// not its URL is refused (spec 4.1), whatever the assertion says.
func TestVerifyMetadataMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	md := b.agent.Metadata()
	md["client_id"] = b.agent.URL("/other.json")
	b.agent.SetMetadata(md)
	_, err := b.verifier.Verify(context.Background(), testIssuer, form(b.assertion(t, spec{})))
	requireRefused(t, err, "metadata is not acceptable")
}

// TestVerifyNoFetchForBadClaims: an assertion refused on its own claims
// makes us fetch nothing from the stranger it names.
func TestVerifyNoFetchForBadClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, s := range []spec{
		{claims: func(c map[string]any) { c["exp"] = testNow.Add(-time.Second).Unix() }},
		{claims: func(c map[string]any) { c["aud"] = testIssuer + "/oauth/token" }},
		{header: func(h map[string]any) { h["typ"] = "poppy-session+jwt" }},
	} {
		_, err := b.verifier.Verify(context.Background(), testIssuer, form(b.assertion(t, s)))
		require.Error(t, err)
	}
	require.Zero(t, b.agent.Hits("/agent.json"))
	require.Zero(t, b.agent.Hits("/jwks.json"))
}

// TestVerifyKeySets covers the jwks_uri keys: without "use" they sign, with
// "use":"enc" they do not; an RSA key must be big enough and its "alg",
// when given, must be the assertion's.
func TestVerifyKeySets(t *testing.T) {
	t.Parallel()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	rows := []struct {
		name string
		// edit changes the agent's key set; key signs PS384 rows when set.
		edit func(t testing.TB, a *peers.Agent) (alg string, key *rsa.PrivateKey)
		want string
	}{
		{name: "no use", edit: func(t testing.TB, a *peers.Agent) (string, *rsa.PrivateKey) {
			editKeys(a, func(k map[string]any) { delete(k, "use") })
			return "ES256", nil
		}},
		{name: "no use, no alg, PS384", edit: func(t testing.TB, a *peers.Agent) (string, *rsa.PrivateKey) {
			editKeys(a, func(k map[string]any) { delete(k, "use"); delete(k, "alg") })
			return "PS384", nil
		}},
		{name: "use enc", edit: func(t testing.TB, a *peers.Agent) (string, *rsa.PrivateKey) {
			editKeys(a, func(k map[string]any) { k["use"] = "enc" })
			return "ES256", nil
		}, want: "names no signing key"},
		{name: "RSA key alg RS256", edit: func(t testing.TB, a *peers.Agent) (string, *rsa.PrivateKey) {
			editKeys(a, func(k map[string]any) {
				if k["kty"] == "RSA" {
					k["alg"] = "RS256"
				}
			})
			return "PS384", nil
		}, want: "is for RS256, not PS384"},
		{name: "RSA key of 1024 bits", edit: func(t testing.TB, a *peers.Agent) (string, *rsa.PrivateKey) {
			pub, err := jwk.PublicKeyOf(small.Public())
			require.NoError(t, err)
			require.NoError(t, pub.Set(jwk.KeyIDKey, peers.JWKThumbprint(t, small.Public())))
			a.SetJWKS(map[string]any{"keys": []any{pub}})
			return "PS384", small
		}, want: "fewer than 2048 bits"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			alg, key := row.edit(t, b.agent)
			s := spec{alg: alg}
			if key != nil {
				s.key = key
				s.header = func(h map[string]any) { h["kid"] = peers.JWKThumbprint(t, key.Public()) }
			}
			client, err := b.verifier.Verify(context.Background(), testIssuer, form(b.assertion(t, s)))
			if row.want == "" {
				require.NoError(t, err)
				require.Equal(t, b.agent.ClientID, client.ClientID)
				return
			}
			requireRefused(t, err, row.want)
		})
	}
}

// editKeys rewrites each key of the agent's key set.
func editKeys(a *peers.Agent, edit func(map[string]any)) {
	set := a.JWKS()
	for _, k := range set["keys"].([]any) {
		edit(k.(map[string]any))
	}
	a.SetJWKS(set)
}

func TestNewVerifierNeedsReplays(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { clientauth.NewVerifier(agentid.NewResolver(nil, agentid.Options{}), clientauth.Options{}) })
}

// TestDefaults: MaxLifetime 5 minutes and Skew 30 seconds unless set.
func TestDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := func(d time.Duration) int64 { return testNow.Add(d).Unix() }
	lifetime := func(iat, exp time.Duration) spec {
		return spec{claims: func(c map[string]any) { c["iat"], c["exp"] = at(iat), at(exp) }}
	}
	ctx := context.Background()
	_, err := b.verifier.Verify(ctx, testIssuer, form(b.assertion(t, lifetime(-time.Minute, 4*time.Minute+time.Second))))
	requireRefused(t, err, "at most 5m0s after iat")
	_, err = b.verifier.Verify(ctx, testIssuer, form(b.assertion(t, lifetime(30*time.Second, time.Minute))))
	require.NoError(t, err)

	v := clientauth.NewVerifier(b.resolver, clientauth.Options{
		Now: func() time.Time { return testNow }, Replays: b.replays, MaxLifetime: 10 * time.Minute, Skew: time.Second,
	})
	_, err = v.Verify(ctx, testIssuer, form(b.assertion(t, lifetime(-time.Minute, 9*time.Minute))))
	require.NoError(t, err)
	_, err = v.Verify(ctx, testIssuer, form(b.assertion(t, lifetime(2*time.Second, time.Minute))))
	requireRefused(t, err, "iat is in the future")
}
