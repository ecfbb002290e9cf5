package httpsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"math/big"
	"net/http"
	"time"

	"github.com/dunglas/httpsfv"
)

// Algorithms of RFC 9421 §3.3 this package checks.
const (
	AlgEd25519     = "ed25519"
	AlgECDSAP256   = "ecdsa-p256-sha256"
	AlgRSAPSS512   = "rsa-pss-sha512"
	maxSignatures  = 8
	maxSignatureSz = 1024
)

// Signature is one labelled signature of a request: its Signature-Input
// member and its Signature bytes.
type Signature struct {
	Label string
	// Input holds the covered components and the signature parameters.
	Input httpsfv.InnerList
	Value []byte
}

// Param returns the signature parameter name, or nil.
func (s *Signature) Param(name string) any {
	v, _ := s.Input.Params.Get(name)
	return v
}

// StringParam returns a string signature parameter and whether it is
// present as a string.
func (s *Signature) StringParam(name string) (string, bool) {
	v, ok := s.Param(name).(string)
	return v, ok
}

// TimeParam returns an integer (Unix seconds) parameter such as created
// or expires and whether it is present as an integer.
func (s *Signature) TimeParam(name string) (time.Time, bool) {
	v, ok := s.Param(name).(int64)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(v, 0), true
}

// Covers reports whether the signature covers the component with this
// name, with or without parameters.
func (s *Signature) Covers(name string) bool {
	for _, it := range s.Input.Items {
		if v, _ := it.Value.(string); v == name {
			return true
		}
	}
	return false
}

// Parse reads the Signature-Input and Signature fields of h (RFC 9421
// §4.1, §4.2). It returns nil and no error when neither is present, and an
// ErrMalformed error when they do not pair up.
func Parse(h http.Header) ([]Signature, error) {
	inLines, sigLines := h.Values("Signature-Input"), h.Values("Signature")
	if len(inLines) == 0 && len(sigLines) == 0 {
		return nil, nil
	}
	inputs, err := httpsfv.UnmarshalDictionary(inLines)
	if err != nil {
		return nil, malformed("Signature-Input is not a Dictionary")
	}
	sigs, err := httpsfv.UnmarshalDictionary(sigLines)
	if err != nil {
		return nil, malformed("Signature is not a Dictionary")
	}
	if len(inputs.Names()) != len(sigs.Names()) {
		return nil, malformed("Signature-Input and Signature name different labels")
	}
	if len(inputs.Names()) > maxSignatures {
		return nil, malformed("more than %d signatures", maxSignatures)
	}
	var out []Signature
	for _, label := range inputs.Names() {
		in, _ := inputs.Get(label)
		il, ok := in.(httpsfv.InnerList)
		if !ok {
			return nil, malformed("Signature-Input %s is not an Inner List", label)
		}
		sm, ok := sigs.Get(label)
		if !ok {
			return nil, malformed("Signature has no %s", label)
		}
		item, ok := sm.(httpsfv.Item)
		b, isBytes := item.Value.([]byte)
		if !ok || !isBytes || len(b) == 0 || len(b) > maxSignatureSz {
			return nil, malformed("Signature %s is not a Byte Sequence", label)
		}
		out = append(out, Signature{Label: label, Input: il, Value: b})
	}
	return out, nil
}

// ErrBadSignature means the signature does not verify with the key.
var ErrBadSignature = errors.New("the HTTP message signature does not verify")

// Verify checks s over m with key, an ed25519.PublicKey, *ecdsa.PublicKey
// (P-256) or *rsa.PublicKey. An alg parameter, when present, must name the
// key's algorithm.
func Verify(m Message, s *Signature, key crypto.PublicKey) error {
	alg, err := algFor(key)
	if err != nil {
		return err
	}
	if a, present := s.Param("alg").(string); present && a != alg {
		return malformed("alg %q does not match the key", a)
	} else if s.Param("alg") != nil && !present {
		return malformed("alg must be a string")
	}
	base, err := Base(m, s.Input)
	if err != nil {
		return err
	}
	if !verifyBytes(key, []byte(base), s.Value) {
		return ErrBadSignature
	}
	return nil
}

func algFor(key crypto.PublicKey) (string, error) {
	switch k := key.(type) {
	case ed25519.PublicKey:
		return AlgEd25519, nil
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return AlgECDSAP256, nil
		}
	case *rsa.PublicKey:
		return AlgRSAPSS512, nil
	}
	return "", malformed("unsupported key type %T", key)
}

func verifyBytes(key crypto.PublicKey, base, sig []byte) bool {
	switch k := key.(type) {
	case ed25519.PublicKey:
		return len(k) == ed25519.PublicKeySize && ed25519.Verify(k, base, sig)
	case *ecdsa.PublicKey:
		// §3.3.4: r and s as two 32-byte big-endian integers.
		if len(sig) != 64 {
			return false
		}
		sum := sha256.Sum256(base)
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		return ecdsa.Verify(k, sum[:], r, s)
	case *rsa.PublicKey:
		sum := sha512.Sum512(base)
		return rsa.VerifyPSS(k, crypto.SHA512, sum[:], sig, &rsa.PSSOptions{SaltLength: 64}) == nil
	}
	return false
}

// Sign signs m with an Ed25519 key under label, covering components with
// the signature parameters in the order given, and returns the Signature-Input and Signature field values.
func Sign(m Message, label string, components []string, params []Param, key ed25519.PrivateKey) (input, signature string, err error) {
	il := httpsfv.InnerList{Params: httpsfv.NewParams()}
	for _, c := range components {
		il.Items = append(il.Items, httpsfv.NewItem(c))
	}
	for _, p := range params {
		il.Params.Add(p.Name, p.Value)
	}
	base, err := Base(m, il)
	if err != nil {
		return "", "", err
	}
	sig := ed25519.Sign(key, []byte(base))
	in := httpsfv.NewDictionary()
	in.Add(label, il)
	sd := httpsfv.NewDictionary()
	sd.Add(label, httpsfv.NewItem(sig))
	if input, err = httpsfv.Marshal(in); err != nil {
		return "", "", err
	}
	signature, err = httpsfv.Marshal(sd)
	return input, signature, err
}

// Param is one signature parameter for Sign: an int64 or a string.
type Param struct {
	Name  string
	Value any
}
