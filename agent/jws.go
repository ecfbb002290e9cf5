package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
)

// b64 is base64url without padding, as JOSE uses it.
var b64 = base64.RawURLEncoding

// signES256 makes a compact JWS over header and claims with key.
func signES256(key *ecdsa.PrivateKey, header, claims map[string]any) (string, error) {
	header["alg"] = "ES256"
	h, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64.EncodeToString(sig), nil
}

// publicJWK is the public JWK of a P-256 key, with only the members RFC
// 7638 hashes (plus kid, use and alg when set).
func publicJWK(pub *ecdsa.PublicKey) map[string]any {
	return map[string]any{
		"kty": "EC",
		"crv": "P-256",
		"x":   b64.EncodeToString(pad32(pub.X)),
		"y":   b64.EncodeToString(pad32(pub.Y)),
	}
}

// thumbprint is the RFC 7638 JWK thumbprint of a P-256 public key.
func thumbprint(pub *ecdsa.PublicKey) string {
	j := publicJWK(pub)
	// Members in lexicographic order, no whitespace (RFC 7638 §3).
	s := fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}`, j["x"], j["y"])
	sum := sha256.Sum256([]byte(s))
	return b64.EncodeToString(sum[:])
}

func pad32(n *big.Int) []byte {
	b := make([]byte, 32)
	n.FillBytes(b)
	return b
}

// newKey makes a P-256 key pair.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// randomID is n random bytes in base64url: the alphabet of spec 8.2, so
// it fits every ID the protocol defines.
func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return b64.EncodeToString(b)
}

// tokenHash is base64url(SHA-256(token)), the ath of a Session JWT.
func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return b64.EncodeToString(sum[:])
}
