package dpop

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/jose"
)

// Header is the request header that carries a DPoP proof (RFC 9449 §4.1).
const Header = "DPoP"

// Typ is a DPoP proof's JWS typ (RFC 9449 §4.2).
const Typ = "dpop+jwt"

// Algs are the asymmetric algorithms we accept for proofs, in the order
// challenges and metadata list them (RFC 9449 §5.1, §7.1).
var Algs = []string{"ES256", "ES384", "PS256", "PS384", "PS512", "RS256", "EdDSA"}

// maxProof bounds what a stranger can make us parse.
const maxProof = 8 << 10

// Error is a refused proof; Description says why, for the developer.
type Error struct {
	Description string
	// Nonce, when set, is the server nonce the client must put in a new
	// proof: the refusal is use_dpop_nonce (RFC 9449 §8, §9), and the
	// answer carries the nonce in the DPoP-Nonce header.
	Nonce string
}

func (e *Error) Error() string { return "dpop: " + e.Description }

func fail(desc string) error { return &Error{Description: desc} }

// ReplayStore remembers proof jtis for their window: Seen records jti for
// the key and reports whether it was new.
type ReplayStore interface {
	Seen(ctx context.Context, companyID int64, jkt, jti string, until time.Time) (bool, error)
}

// Options tune a Verifier; zero values take the defaults.
type Options struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// Window is how old a proof's iat may be [1m].
	Window time.Duration
	// Skew is how far in the future iat may be [5s].
	Skew time.Duration
	// Nonces makes and checks server nonces, for requests that need one
	// (Request.Nonce).
	Nonces *Nonces
}

// Verifier checks DPoP proofs.
type Verifier struct {
	replays ReplayStore
	opts    Options
}

// New returns a Verifier recording jtis in replays.
func New(replays ReplayStore, opts Options) *Verifier {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Window == 0 {
		opts.Window = time.Minute
	}
	if opts.Skew == 0 {
		opts.Skew = 5 * time.Second
	}
	return &Verifier{replays: replays, opts: opts}
}

// Request is what a proof is checked against.
type Request struct {
	// CompanyID scopes the replay record.
	CompanyID int64
	// Method and URL are the request's method and public URL.
	Method string
	URL    *url.URL
	// AccessToken is the token the proof must hash in ath, or "" at the
	// token endpoint, where ath must be absent.
	AccessToken string
	// Nonce requires the proof to carry one of the Company's current
	// server nonces (RFC 9449 §8, §9).
	Nonce bool
}

// Proof is a verified proof.
type Proof struct {
	// JKT is the RFC 7638 thumbprint of the proof's key, base64url.
	JKT string
	// NextNonce, when set, is a newer server nonce than the proof's, for
	// the answer's DPoP-Nonce header (RFC 9449 §8.2).
	NextNonce string
}

// FromRequest returns the request's one DPoP header, or an error when it
// has none or several (RFC 9449 §4.3 check 1).
func FromRequest(r *http.Request) (string, error) {
	v := r.Header.Values(Header)
	switch {
	case len(v) == 0 || v[0] == "":
		return "", fail("the DPoP header with a proof is required")
	case len(v) > 1:
		return "", fail("send one DPoP header")
	}
	return v[0], nil
}

type proofClaims struct {
	Jti   *string         `json:"jti"`
	Htm   *string         `json:"htm"`
	Htu   *string         `json:"htu"`
	Iat   json.RawMessage `json:"iat"`
	Ath   *string         `json:"ath"`
	Nonce *string         `json:"nonce"`
}

// Verify checks proof for req as RFC 9449 §4.3 lists, ath as §7.1 adds for
// resources, and records its jti. Refusals are *Error values; other
// errors are the replay store's.
func (v *Verifier) Verify(ctx context.Context, proof string, req Request) (*Proof, error) {
	if proof == "" {
		return nil, fail("the DPoP header with a proof is required")
	}
	if len(proof) > maxProof {
		return nil, fail("the DPoP proof is too large")
	}
	parts, hdr, err := jose.Split(proof)
	switch {
	case errors.Is(err, jose.ErrNotCompact):
		return nil, fail("the DPoP proof is not a compact JWS")
	case err != nil:
		return nil, fail("the DPoP proof's header is malformed")
	case hdr.Extended():
		return nil, fail("the DPoP proof's header must not carry crit or b64")
	}
	if hdr.Typ == nil || *hdr.Typ != Typ {
		return nil, fail("the DPoP proof's typ must be " + Typ)
	}
	if hdr.Alg == nil || !slices.Contains(Algs, *hdr.Alg) {
		return nil, fail("the DPoP proof's alg must be one of " + strings.Join(Algs, " "))
	}
	if len(hdr.JWK) == 0 {
		return nil, fail("the DPoP proof's header must carry the public key as jwk")
	}
	if jose.HasPrivateMembers(hdr.JWK) {
		return nil, fail("the DPoP proof's jwk must not contain private key members")
	}
	jkt, err := verifySignature(proof, parts, *hdr.Alg, hdr.JWK)
	if err != nil {
		return nil, err
	}
	var cl proofClaims
	if err := jose.DecodeSegment(parts[1], &cl); err != nil {
		return nil, fail("the DPoP proof's claims are malformed")
	}
	if cl.Htm == nil || *cl.Htm != req.Method {
		return nil, fail("the DPoP proof's htm must be the request's method")
	}
	if cl.Htu == nil || !SameURL(*cl.Htu, req.URL) {
		return nil, fail("the DPoP proof's htu must be the request's URL without query or fragment")
	}
	now := v.opts.Now()
	iat, ok := jose.NumericDate(cl.Iat)
	switch {
	case !ok:
		return nil, fail("the DPoP proof's iat must be a number of seconds")
	case iat.Before(now.Add(-v.opts.Window)):
		return nil, fail("the DPoP proof is too old: iat must be within " + v.opts.Window.String())
	case iat.After(now.Add(v.opts.Skew)):
		return nil, fail("the DPoP proof's iat is in the future")
	}
	if cl.Jti == nil || *cl.Jti == "" || len(*cl.Jti) > 256 || !httpx.ValidText(*cl.Jti) {
		return nil, fail("the DPoP proof's jti is required, at most 256 characters")
	}
	if req.AccessToken != "" {
		if cl.Ath == nil || *cl.Ath != ATH(req.AccessToken) {
			return nil, fail("the DPoP proof's ath must be the base64url SHA-256 of the access token")
		}
	} else if cl.Ath != nil {
		return nil, fail("the DPoP proof's ath must be absent without an access token")
	}
	var next string
	if req.Nonce {
		// Before the jti is recorded: the retry with the nonce is a new
		// proof anyway, but a refused one should leave nothing behind.
		if next, err = v.checkNonce(ctx, req.CompanyID, cl.Nonce); err != nil {
			return nil, err
		}
	}
	fresh, err := v.replays.Seen(ctx, req.CompanyID, jkt, *cl.Jti, iat.Add(v.opts.Window+v.opts.Skew))
	if err != nil {
		return nil, err
	}
	if !fresh {
		return nil, fail("the DPoP proof's jti was already used; make a new proof for every request")
	}
	return &Proof{JKT: jkt, NextNonce: next}, nil
}

// verifySignature checks the proof's signature with the key in its jwk
// and returns the key's RFC 7638 thumbprint, base64url. An ES256 proof
// with a P-256 key, what agents send, is checked on the segments already
// split (jose.VerifyES256); any other goes through jwx.
func verifySignature(proof string, parts []string, alg string, members map[string]json.RawMessage) (string, error) {
	if alg == "ES256" {
		if pub, jkt, ok := p256Key(members); ok {
			if !jose.VerifyES256(proof, parts, pub) {
				return "", fail("the DPoP proof's signature does not verify with its jwk")
			}
			return jkt, nil
		}
	}
	rawJWK, _ := json.Marshal(members)
	key, err := jwk.ParseKey(rawJWK)
	if err != nil {
		return "", fail("the DPoP proof's jwk is not a valid public key")
	}
	if _, err := jws.Verify([]byte(proof), jws.WithKey(jwa.SignatureAlgorithm(alg), key)); err != nil {
		return "", fail("the DPoP proof's signature does not verify with its jwk")
	}
	tp, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fail("the DPoP proof's jwk has no thumbprint")
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// p256Key reads a JWK that is a P-256 public key (RFC 7518 §6.2.1: kty
// EC, crv P-256, x and y of 32 bytes each, a point on the curve) and
// returns it with its RFC 7638 thumbprint; ok is false for anything else.
func p256Key(members map[string]json.RawMessage) (pub *ecdsa.PublicKey, jkt string, ok bool) {
	var kty, crv, x, y string
	for name, v := range map[string]*string{"kty": &kty, "crv": &crv, "x": &x, "y": &y} {
		if json.Unmarshal(members[name], v) != nil {
			return nil, "", false
		}
	}
	if kty != "EC" || crv != "P-256" {
		return nil, "", false
	}
	point := make([]byte, 1, 65)
	point[0] = 4 // uncompressed (SEC 1 §2.3.3)
	for _, c := range []string{x, y} {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || len(b) != 32 {
			return nil, "", false
		}
		point = append(point, b...)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, "", false
	}
	// RFC 7638 §3.2: the required members in lexicographic order, no
	// whitespace; x and y as decoded, encoded again.
	sum := sha256.Sum256([]byte(`{"crv":"P-256","kty":"EC","x":"` + base64.RawURLEncoding.EncodeToString(point[1:33]) +
		`","y":"` + base64.RawURLEncoding.EncodeToString(point[33:]) + `"}`))
	return pub, base64.RawURLEncoding.EncodeToString(sum[:]), true
}

// checkNonce checks a proof's nonce claim against the Company's server
// nonces. A missing or stale nonce is a use_dpop_nonce *Error carrying the
// current one; a good nonce from the previous step returns the current one
// to hand out.
func (v *Verifier) checkNonce(ctx context.Context, companyID int64, nonce *string) (string, error) {
	if v.opts.Nonces == nil {
		return "", errors.New("dpop: a server nonce is required but the verifier has no Nonces")
	}
	valid, current := false, false
	if nonce != nil {
		var err error
		if valid, current, err = v.opts.Nonces.check(ctx, companyID, *nonce); err != nil {
			return "", err
		}
	}
	if valid && current {
		return "", nil
	}
	fresh, err := v.opts.Nonces.Current(ctx, companyID)
	if err != nil {
		return "", err
	}
	switch {
	case valid:
		return fresh, nil
	case nonce == nil:
		return "", &Error{Description: "the DPoP proof must carry the server nonce from the DPoP-Nonce header", Nonce: fresh}
	default:
		return "", &Error{Description: "the DPoP proof's nonce is not a current server nonce; use the one in the DPoP-Nonce header", Nonce: fresh}
	}
}

// ATH is the access token hash of a proof (RFC 9449 §4.2).
func ATH(token string) string {
	sum := sha256.Sum256([]byte(token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// SameURL compares htu with the request's public URL as RFC 9449 §4.3
// does: scheme and host without regard to case, default port left out,
// no query or fragment.
func SameURL(htu string, want *url.URL) bool {
	u, err := url.Parse(htu)
	if err != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(htu, "?#") {
		return false
	}
	return normalURL(u) == normalURL(want)
}

func normalURL(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	scheme := strings.ToLower(u.Scheme)
	if p := u.Port(); p != "" && !(scheme == "https" && p == "443") && !(scheme == "http" && p == "80") {
		host += ":" + p
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path
}
