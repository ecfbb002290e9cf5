package jose

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// AgentAlg returns the algorithm a JWS header names when it is one the keys
// in a Personal Agent's jwks_uri may sign with: ES256, which every Company
// must accept, or PS384, which allows blind signing (spec 4.1, 5.2, 10.7).
func AgentAlg(alg *string) (jwa.SignatureAlgorithm, bool) {
	switch {
	case alg == nil:
		return "", false
	case *alg == "ES256":
		return jwa.ES256, true
	case *alg == "PS384":
		return jwa.PS384, true
	}
	return "", false
}

// DecodeSegment decodes one base64url segment of a compact JWS, which must
// hold exactly one JSON object, into the struct v; members that are
// numbers are best read as json.RawMessage (NumericDate).
func DecodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("not a JSON object")
	}
	// Unmarshal refuses trailing data, so the segment is one object.
	return json.Unmarshal(raw, v)
}

// VerifyES256 reports whether the compact JWS token, split into parts by
// Split, carries a valid ES256 signature (RFC 7518 §3.4: R and S, 32 bytes
// each) by pub over its signing input. The caller has checked that the
// header's alg is ES256.
func VerifyES256(token string, parts []string, pub *ecdsa.PublicKey) bool {
	if len(parts) != 3 || pub == nil || base64.RawURLEncoding.DecodedLen(len(parts[2])) != 64 {
		return false
	}
	var sig [64]byte
	if n, err := base64.RawURLEncoding.Decode(sig[:], []byte(parts[2])); err != nil || n != 64 {
		return false
	}
	sum := sha256.Sum256([]byte(token[:len(parts[0])+1+len(parts[1])]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	return ecdsa.Verify(pub, sum[:], r, s)
}

// SignES256 returns the compact JWS of payload under the protected
// header (both JSON, encoded here), signed ES256 with priv: R and S, 32
// bytes each (RFC 7515 §7.1, RFC 7518 §3.4). The token is built in one
// buffer, without a JWS library's header maps, for the hot paths that sign
// on every request (Poppy-Verified).
func SignES256(priv *ecdsa.PrivateKey, header, payload []byte) (string, error) {
	enc := base64.RawURLEncoding
	hl, pl := enc.EncodedLen(len(header)), enc.EncodedLen(len(payload))
	out := make([]byte, hl+1+pl+1+enc.EncodedLen(64))
	enc.Encode(out, header)
	out[hl] = '.'
	enc.Encode(out[hl+1:], payload)
	input := len(out) - 1 - enc.EncodedLen(64)
	sum := sha256.Sum256(out[:input])
	der, err := ecdsa.SignASN1(rand.Reader, priv, sum[:])
	if err != nil {
		return "", err
	}
	var sig [64]byte
	if !rawSignature(der, &sig) {
		return "", errors.New("jose: the ECDSA signature is not a P-256 one")
	}
	out[input] = '.'
	enc.Encode(out[input+1:], sig[:])
	return string(out), nil
}

// rawSignature writes the ASN.1 ECDSA signature der as R and S, 32 bytes
// each and big-endian, into sig, and reports whether der was one.
func rawSignature(der []byte, sig *[64]byte) bool {
	in, seq := cryptobyte.String(der), cryptobyte.String(nil)
	if !in.ReadASN1(&seq, asn1.SEQUENCE) || !in.Empty() {
		return false
	}
	for i := range 2 {
		var n cryptobyte.String
		if !seq.ReadASN1(&n, asn1.INTEGER) || len(n) == 0 || n[0]&0x80 != 0 {
			return false
		}
		for len(n) > 1 && n[0] == 0 {
			n = n[1:]
		}
		if len(n) > 32 {
			return false
		}
		copy(sig[32*i+32-len(n):32*i+32], n)
	}
	return seq.Empty()
}

// maxDate bounds NumericDates to years before 5138, so arithmetic on them
// cannot overflow.
const maxDate = 1e11

// NumericDate reads a NumericDate: a JSON number of seconds, not a string
// holding one. Fractions are truncated.
func NumericDate(raw json.RawMessage) (time.Time, bool) {
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return time.Time{}, false
	}
	n := json.Number(raw)
	i, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f < 0 || f > maxDate {
			return time.Time{}, false
		}
		i = int64(f)
	}
	if i < 0 || i > maxDate {
		return time.Time{}, false
	}
	return time.Unix(i, 0), true
}

// privateMembers are the JWK members that only private keys carry.
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"}

// HasPrivateMembers reports whether a JWK, as decoded members, carries
// private key material.
func HasPrivateMembers(jwk map[string]json.RawMessage) bool {
	for _, m := range privateMembers {
		if _, ok := jwk[m]; ok {
			return true
		}
	}
	return false
}

// Header holds the JWS header members our verifiers read.
type Header struct {
	Alg    *string `json:"alg"`
	Kid    *string `json:"kid"`
	Typ    *string `json:"typ"`
	PapDlg *string `json:"pap_dlg"`
	// JWK is the public key a DPoP proof carries, as its members.
	JWK  map[string]json.RawMessage `json:"jwk"`
	Crit json.RawMessage            `json:"crit"`
	B64  json.RawMessage            `json:"b64"`
}

// Extended reports whether the header uses crit or b64. We understand no
// header extension, and b64 would change what is signed (RFC 7797): jwx
// honours it even without crit, so a token using either is refused.
func (h *Header) Extended() bool { return h.Crit != nil || h.B64 != nil }

// ErrNotCompact means a token is not three dot-separated segments.
var ErrNotCompact = errors.New("not a compact JWS")

// Split splits a compact JWS into its segments and decodes its header.
// Errors are ErrNotCompact, or a malformed header.
func Split(token string) ([]string, Header, error) {
	var h Header
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, h, ErrNotCompact
	}
	if err := DecodeSegment(parts[0], &h); err != nil {
		return nil, h, err
	}
	return parts, h, nil
}

// ErrInvalidKey: a JWK whose EC point is not on its curve.
var ErrInvalidKey = errors.New("jose: the key is not a valid public key")

// Thumbprint returns the RFC 7638 SHA-256 thumbprint of a public key,
// base64url without padding. jwx parses EC keys without checking their
// point, and its Thumbprint panics on a coordinate longer than the curve
// allows; the point is checked here first, so a stranger's JWK gets an
// error, not a panic.
func Thumbprint(key jwk.Key) (string, error) {
	if _, isEC := key.(jwk.ECDSAPublicKey); isEC {
		var pub ecdsa.PublicKey
		if err := key.Raw(&pub); err != nil {
			return "", ErrInvalidKey
		}
		if _, err := pub.ECDH(); err != nil {
			return "", ErrInvalidKey
		}
	}
	tp, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}
