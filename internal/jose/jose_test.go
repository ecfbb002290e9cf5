package jose

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"
)

func seg(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestDecodeSegment(t *testing.T) {
	t.Parallel()
	var v struct {
		A json.RawMessage `json:"a"`
	}
	require.NoError(t, DecodeSegment(seg(` {"a":1} `), &v))
	require.Equal(t, json.RawMessage("1"), v.A)
	for _, bad := range []string{"!!", seg(``), seg(`[1]`), seg(`"x"`), seg(`{"a":1}{}`), seg(`{"a":`)} {
		require.Error(t, DecodeSegment(bad, &v), bad)
	}
}

// TestVerifyES256 accepts a signature jwx makes and refuses every change
// to the token, the key or the signature's form.
func TestVerifyES256(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	signed, err := jws.Sign([]byte(`{"sub":"ada"}`), jws.WithKey(jwa.ES256, key))
	require.NoError(t, err)
	token := string(signed)
	parts := strings.Split(token, ".")
	require.True(t, VerifyES256(token, parts, &key.PublicKey))

	require.False(t, VerifyES256(token, parts, &other.PublicKey), "another key")
	require.False(t, VerifyES256(token, parts, nil), "no key")
	tampered := parts[0] + "." + seg(`{"sub":"bob"}`) + "." + parts[2]
	require.False(t, VerifyES256(tampered, strings.Split(tampered, "."), &key.PublicKey), "other claims")
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"short":     sig[:63],
		"long":      append(append([]byte{}, sig...), 0),
		"flipped":   append(append([]byte{}, sig[:63]...), sig[63]^1),
		"zero":      make([]byte, 64),
		"swapped r": append(append([]byte{}, sig[32:]...), sig[:32]...),
	} {
		p := []string{parts[0], parts[1], base64.RawURLEncoding.EncodeToString(bad)}
		tok := strings.Join(p, ".")
		require.False(t, VerifyES256(tok, p, &key.PublicKey), name)
	}
	// An ASN.1 DER signature, as some libraries wrongly send, is refused.
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	der, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	require.NoError(t, err)
	p := []string{parts[0], parts[1], base64.RawURLEncoding.EncodeToString(der)}
	require.False(t, VerifyES256(strings.Join(p, "."), p, &key.PublicKey), "DER")
	require.False(t, VerifyES256(token, parts[:2], &key.PublicKey), "two parts")
	p = []string{parts[0], parts[1], parts[2] + "!"}
	require.False(t, VerifyES256(strings.Join(p, "."), p, &key.PublicKey), "not base64url")
}

func TestNumericDate(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]int64{"1790900000": 1790900000, "1790900000.9": 1790900000, "0": 0} {
		got, ok := NumericDate(json.RawMessage(raw))
		require.True(t, ok, raw)
		require.Equal(t, time.Unix(want, 0), got)
	}
	for _, raw := range []string{``, `"1790900000"`, `-1`, `1e12`, `null`, `true`} {
		_, ok := NumericDate(json.RawMessage(raw))
		require.False(t, ok, raw)
	}
}

func TestHasPrivateMembers(t *testing.T) {
	t.Parallel()
	require.False(t, HasPrivateMembers(map[string]json.RawMessage{"kty": nil, "x": nil, "y": nil}))
	require.True(t, HasPrivateMembers(map[string]json.RawMessage{"kty": nil, "d": nil}))
	require.True(t, HasPrivateMembers(map[string]json.RawMessage{"kty": nil, "k": nil}))
}

func TestAgentAlg(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ES256", "PS384"} {
		alg, ok := AgentAlg(&name)
		require.True(t, ok)
		require.Equal(t, name, alg.String())
	}
	for _, name := range []string{"RS256", "PS256", "ES384", "none", "HS256", "es256", ""} {
		_, ok := AgentAlg(&name)
		require.False(t, ok, name)
	}
	_, ok := AgentAlg(nil)
	require.False(t, ok)
}

// TestSignES256: jwx verifies what SignES256 signs, with the header and
// payload as given, over many signatures (so that R or S with leading zero
// bytes, about one in 128, are among them); a DER signature that is not
// P-256's is refused.
func TestSignES256(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	header := []byte(`{"alg":"ES256","kid":"k1","typ":"poppy-verified+jwt"}`)
	for i := range 1000 {
		payload := []byte(`{"n":` + strings.Repeat("1", i%7+1) + `}`)
		tok, err := SignES256(key, header, payload)
		require.NoError(t, err)
		got, err := jws.Verify([]byte(tok), jws.WithKey(jwa.ES256, &key.PublicKey))
		require.NoError(t, err, tok)
		require.Equal(t, payload, got)
		parts, _, err := Split(tok)
		require.NoError(t, err)
		require.Equal(t, seg(string(header)), parts[0])
		require.True(t, VerifyES256(tok, parts, &key.PublicKey))
	}
	var sig [64]byte
	long := append([]byte{0x30, 0x25, 0x02, 0x21, 0x01}, make([]byte, 32)...)
	long = append(long, 0x02, 0x00)
	for _, bad := range [][]byte{nil, {0x30, 0x00}, {0x30, 0x03, 0x02, 0x01, 0x80}, long} {
		require.False(t, rawSignature(bad, &sig), "%x", bad)
	}
}

// TestThumbprintRefusesPointsOffTheCurve: a coordinate longer than the
// curve allows, or a point off it, is an error where jwx alone panicked
// or answered; a valid key's thumbprint is RFC 7638's.
func TestThumbprintRefusesPointsOffTheCurve(t *testing.T) {
	// RFC 7517 Appendix A.1's P-256 key.
	const x, y = "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4", "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"
	ec := func(x, y string) jwk.Key {
		k, err := jwk.ParseKey([]byte(`{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `"}`))
		require.NoError(t, err)
		return k
	}
	for name, k := range map[string]jwk.Key{
		"x too long":       ec("00000000000000000000000000000000000000000000", y),
		"y empty":          ec(x, ""),
		"off the curve":    ec(x, x),
		"x past the prime": ec("AP____8AAAABAAAAAAAAAAAAAAAA________________", y),
	} {
		_, err := Thumbprint(k)
		require.ErrorIs(t, err, ErrInvalidKey, name)
	}
	tp, err := Thumbprint(ec(x, y))
	require.NoError(t, err)
	want, err := ec(x, y).Thumbprint(crypto.SHA256)
	require.NoError(t, err)
	require.Equal(t, base64.RawURLEncoding.EncodeToString(want), tp)
}
