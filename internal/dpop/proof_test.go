package dpop_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
)

var (
	now    = time.Unix(1_800_000_000, 0)
	target = &url.URL{Scheme: "https", Host: "api.acme.test", Path: "/orders"}
)

const (
	htu   = "https://api.acme.test/orders"
	token = "h.p.s"
)

func newVerifier() *dpop.Verifier {
	return dpop.New(&dpoptest.Replays{}, dpop.Options{Now: func() time.Time { return now }})
}

func req(token string) dpop.Request {
	return dpop.Request{CompanyID: 7, Method: "GET", URL: target, AccessToken: token}
}

func TestVerifyAcceptsAValidProof(t *testing.T) {
	t.Parallel()
	k := dpoptest.NewKey()
	p, err := newVerifier().Verify(context.Background(), k.Valid("GET", htu, token, now), req(token))
	require.NoError(t, err)
	require.Equal(t, k.JKT, p.JKT)
	// RFC 9449 §4.3: scheme and host compare without case, and the
	// default port is left out.
	_, err = newVerifier().Verify(context.Background(), k.Valid("GET", "HTTPS://API.acme.test:443/orders", token, now), req(token))
	require.NoError(t, err)
	// At the token endpoint there is no access token and no ath.
	_, err = newVerifier().Verify(context.Background(), k.Valid("GET", htu, "", now), req(""))
	require.NoError(t, err)
}

// TestVerifyRefuses breaks each rule of RFC 9449 §4.3 once.
func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	k, other := dpoptest.NewKey(), dpoptest.NewKey()
	privateJWK, err := json.Marshal(k.Private)
	require.NoError(t, err)
	var privMembers map[string]any
	require.NoError(t, json.Unmarshal(privateJWK, &privMembers))
	for _, tt := range []struct {
		name   string
		mutate func(p *dpoptest.Proof)
		token  string
		proof  string
		want   string
	}{
		{name: "not a JWS", proof: "abc", want: "compact JWS"},
		{name: "wrong typ", mutate: func(p *dpoptest.Proof) { p.Typ = "JWT" }, want: "typ"},
		{name: "no typ", mutate: func(p *dpoptest.Proof) { p.Typ = "" }, want: "typ"},
		{name: "symmetric alg", mutate: func(p *dpoptest.Proof) { p.Alg = "HS256" }, want: "alg"},
		{name: "alg none", mutate: func(p *dpoptest.Proof) { p.Alg = "none" }, want: "alg"},
		{name: "alg of another key type", mutate: func(p *dpoptest.Proof) { p.Alg = "PS256" }, want: "signature"},
		{name: "no jwk", mutate: func(p *dpoptest.Proof) { p.JWK = nil }, want: "jwk"},
		{name: "private jwk", mutate: func(p *dpoptest.Proof) { p.JWK = privMembers }, want: "private"},
		{name: "symmetric jwk", mutate: func(p *dpoptest.Proof) { p.JWK = map[string]any{"kty": "oct", "k": "c2VjcmV0"} }, want: "private"},
		{name: "another key's jwk", mutate: func(p *dpoptest.Proof) { p.JWK = other.Public }, want: "signature"},
		{name: "a point off the curve", mutate: func(p *dpoptest.Proof) { p.JWK = withMember(k.Public, "y", offCurveY(k)) }, want: "jwk"},
		{name: "x too short", mutate: func(p *dpoptest.Proof) { p.JWK = withMember(k.Public, "x", "AAAA") }, want: "jwk"},
		{name: "another curve named", mutate: func(p *dpoptest.Proof) { p.JWK = withMember(k.Public, "crv", "P-384") }, want: "jwk"},
		{name: "wrong htm", mutate: func(p *dpoptest.Proof) { p.Claims["htm"] = "POST" }, want: "htm"},
		{name: "no htm", mutate: func(p *dpoptest.Proof) { delete(p.Claims, "htm") }, want: "htm"},
		{name: "wrong htu path", mutate: func(p *dpoptest.Proof) { p.Claims["htu"] = "https://api.acme.test/orders/1" }, want: "htu"},
		{name: "wrong htu host", mutate: func(p *dpoptest.Proof) { p.Claims["htu"] = "https://evil.test/orders" }, want: "htu"},
		{name: "htu with query", mutate: func(p *dpoptest.Proof) { p.Claims["htu"] = htu + "?a=1" }, want: "htu"},
		{name: "old iat", mutate: func(p *dpoptest.Proof) { p.Claims["iat"] = now.Add(-2 * time.Minute).Unix() }, want: "too old"},
		{name: "future iat", mutate: func(p *dpoptest.Proof) { p.Claims["iat"] = now.Add(time.Minute).Unix() }, want: "future"},
		{name: "iat as a string", mutate: func(p *dpoptest.Proof) { p.Claims["iat"] = "1800000000" }, want: "iat"},
		{name: "no jti", mutate: func(p *dpoptest.Proof) { delete(p.Claims, "jti") }, want: "jti"},
		{name: "no ath", mutate: func(p *dpoptest.Proof) { delete(p.Claims, "ath") }, want: "ath"},
		{name: "ath of another token", mutate: func(p *dpoptest.Proof) { p.Claims["ath"] = dpop.ATH("other") }, want: "ath"},
		{name: "ath without a token", token: "none", want: "ath must be absent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := token
			if tt.token == "none" {
				tok = ""
			}
			proof := tt.proof
			if proof == "" {
				p := k.For("GET", htu, token, now)
				if tt.mutate != nil {
					tt.mutate(p)
				}
				proof = k.Make(p)
			}
			_, err := newVerifier().Verify(context.Background(), proof, req(tok))
			var de *dpop.Error
			require.True(t, errors.As(err, &de), "%v", err)
			require.Contains(t, de.Description, tt.want)
		})
	}
}

func TestVerifyRefusesAReplayedProof(t *testing.T) {
	t.Parallel()
	k := dpoptest.NewKey()
	v := newVerifier()
	proof := k.Valid("GET", htu, token, now)
	_, err := v.Verify(context.Background(), proof, req(token))
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), proof, req(token))
	var de *dpop.Error
	require.ErrorAs(t, err, &de)
	require.Contains(t, de.Description, "already used")
}

func TestFromRequest(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", htu, nil)
	_, err := dpop.FromRequest(r)
	require.Error(t, err)
	r.Header.Add("DPoP", "a")
	p, err := dpop.FromRequest(r)
	require.NoError(t, err)
	require.Equal(t, "a", p)
	r.Header.Add("DPoP", "b")
	_, err = dpop.FromRequest(r)
	require.Error(t, err)
}

// withMember is the members of key's JWK with name set to value.
func withMember(key jwk.Key, name, value string) map[string]any {
	raw, err := json.Marshal(key)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(err)
	}
	m[name] = value
	return m
}

// offCurveY is k's y with its last bit flipped: no longer on the curve.
func offCurveY(k *dpoptest.Key) string {
	m := withMember(k.Public, "kid", "")
	y, err := base64.RawURLEncoding.DecodeString(m["y"].(string))
	if err != nil {
		panic(err)
	}
	y[len(y)-1] ^= 1
	return base64.RawURLEncoding.EncodeToString(y)
}

// TestThumbprintMatchesJWX: the thumbprint of a P-256 proof key, computed
// without jwx, is the one jwx computes (RFC 7638), for many keys.
func TestThumbprintMatchesJWX(t *testing.T) {
	t.Parallel()
	for range 50 {
		k := dpoptest.NewKey()
		p, err := newVerifier().Verify(context.Background(), k.Valid("GET", htu, token, now), req(token))
		require.NoError(t, err)
		require.Equal(t, k.JKT, p.JKT)
	}
}
