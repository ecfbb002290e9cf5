package verified_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

const (
	issuer   = "https://poppyhost.test/t/stormline"
	audience = "https://shop.test/api"
)

// key signs as a Company's platform key does, stating typ as asked or as
// it is told to instead.
type key struct {
	t    testing.TB
	priv *ecdsa.PrivateKey
	kid  string
	typ  string
}

func (k key) Sign(_ context.Context, _ int64, typ string, payload []byte) (string, error) {
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", err
	}
	if k.typ != "" {
		typ = k.typ
	}
	return peers.SignJWT(k.t, "ES256", k.priv, map[string]any{"alg": "ES256", "typ": typ, "kid": k.kid}, claims), nil
}

func newKey(t testing.TB) key {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key{t: t, priv: priv, kid: peers.JWKThumbprint(t, priv.Public())}
}

// setOf is the key set publishing k.
func setOf(t testing.TB, k key) jwk.Set {
	pub, err := jwk.PublicKeyOf(k.priv)
	require.NoError(t, err)
	require.NoError(t, pub.Set(jwk.KeyIDKey, k.kid))
	set := jwk.NewSet()
	require.NoError(t, set.AddKey(pub))
	return set
}

func sign(t testing.TB, k key, c verified.Claims, now time.Time) string {
	tok, err := verified.Sign(context.Background(), k, 1, c, now)
	require.NoError(t, err)
	return tok
}

// TestSignVerify: a signed JWT verifies with its claims completed (iat,
// exp, jti, scopes); Verify refuses another typ, iss or aud, an expired or
// future JWT beyond the leeway, and a bad signature or unknown key.
func TestSignVerify(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	set := setOf(t, k)
	now := time.Now()
	claims := verified.Claims{Issuer: issuer, Audience: audience, Facts: verified.Facts{Account: "42", SID: "ses_1"},
		OperationID: "op_1", Revision: "rev_1", Approver: "user"}

	tok := sign(t, k, claims, now)
	got, err := verified.Verify(tok, set, issuer, audience, now)
	require.NoError(t, err)
	require.Equal(t, "42", got.Account)
	require.Equal(t, "op_1", got.OperationID)
	require.Equal(t, now.Unix(), got.IssuedAt)
	require.Equal(t, now.Add(verified.Lifetime).Unix(), got.Expires)
	require.NotEmpty(t, got.ID)
	require.Equal(t, []string{}, got.Scopes)
	require.NotEqual(t, got.ID, func() string {
		c, err := verified.Verify(sign(t, k, claims, now), set, issuer, audience, now)
		require.NoError(t, err)
		return c.ID
	}(), "each JWT has its own jti")
	// Within the leeway of expiry, it is still good.
	_, err = verified.Verify(tok, set, issuer, audience, now.Add(verified.Lifetime+10*time.Second))
	require.NoError(t, err)

	other := newKey(t)
	forged := other
	forged.kid = k.kid
	withIss, withAud := claims, claims
	withIss.Issuer = "https://poppyhost.test/t/other"
	withAud.Audience = "https://shop.test/tools/exchange_item"
	refused := map[string]struct {
		token string
		now   time.Time
	}{
		"typ JWT":          {sign(t, key{t: t, priv: k.priv, kid: k.kid, typ: "JWT"}, claims, now), now},
		"typ at+jwt":       {sign(t, key{t: t, priv: k.priv, kid: k.kid, typ: "at+jwt"}, claims, now), now},
		"iss of another":   {sign(t, k, withIss, now), now},
		"aud of another":   {sign(t, k, withAud, now), now},
		"expired":          {tok, now.Add(verified.Lifetime + time.Minute)},
		"issued later":     {tok, now.Add(-time.Minute)},
		"signature":        {sign(t, forged, claims, now), now},
		"unknown key":      {sign(t, other, claims, now), now},
		"tampered payload": {tamper(t, tok), now},
		"not a JWS":        {"not-a-jwt", now},
		"empty":            {"", now},
	}
	for name, tt := range refused {
		c, err := verified.Verify(tt.token, set, issuer, audience, tt.now)
		require.ErrorIs(t, err, verified.ErrInvalid, name)
		require.Nil(t, c, name)
	}
}

// tamper changes one character of the JWT's payload.
func tamper(t testing.TB, tok string) string {
	b := []byte(tok)
	for i := range b {
		if b[i] == '.' {
			if b[i+1] == 'A' {
				b[i+1] = 'B'
			} else {
				b[i+1] = 'A'
			}
			return string(b)
		}
	}
	t.Fatal("not a compact JWS")
	return ""
}
