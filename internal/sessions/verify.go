package sessions

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/jose"
)

// Header is the request header that carries the Session JWT (spec 5.2).
const Header = "Poppy-Session"

// Token types the spec fixes (5.2).
const (
	TypSession    = "poppy-session+jwt"
	TypDelegation = "pap-delegation+jwt"
)

// MaxDelegationLifetime is the longest a delegation may last (5.2).
const MaxDelegationLifetime = 24 * time.Hour

// Limits on what a stranger can make us parse.
const (
	maxJWT      = 16 << 10
	maxIDLength = 256
)

// ClientResolver resolves Personal Agents' metadata and keys (agentid).
type ClientResolver interface {
	Client(ctx context.Context, clientID string) (*agentid.Client, error)
	Key(ctx context.Context, c *agentid.Client, kid string) (jwk.Key, error)
}

// Claims are a Session JWT's verified claims.
type Claims struct {
	ClientID string
	UserID   string
	AgentID  string
	SID      string
	JTI      string
	IssuedAt time.Time
	// Extensions are those the agent's client metadata declares.
	Extensions map[string]string
}

// VerifierOptions tune verification; zero values take the defaults.
type VerifierOptions struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// Window is how old a Session JWT's iat may be [1m].
	Window time.Duration
	// Skew is how far in the future iat may be [5s].
	Skew time.Duration
}

// Verifier checks Session JWTs (spec 5.2, 5.3 steps 1-3).
type Verifier struct {
	resolver ClientResolver
	opts     VerifierOptions
	dlg      delegationCache
	headers  headerCache
}

// NewVerifier returns a Verifier resolving agents through r.
func NewVerifier(r ClientResolver, opts VerifierOptions) *Verifier {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Window == 0 {
		opts.Window = time.Minute
	}
	if opts.Skew == 0 {
		opts.Skew = 5 * time.Second
	}
	return &Verifier{resolver: r, opts: opts}
}

// Window returns how long a Session JWT stays acceptable, which is how long
// its jti must be remembered.
func (v *Verifier) Window() time.Duration { return v.opts.Window + v.opts.Skew }

func fail(format string, a ...any) error {
	return httpx.Errorf(httpx.CodeInvalidSession, format, a...)
}

// Request is what a Session JWT is checked against.
type Request struct {
	// Audience is the Company's identifier (spec 3.2).
	Audience string
	// Method and URL are the request's method and its public URL.
	Method string
	URL    *url.URL
	// AccessToken is the request's access token, or "".
	AccessToken string
}

type sessionClaims struct {
	Iss     *string         `json:"iss"`
	Aud     json.RawMessage `json:"aud"`
	Sid     *string         `json:"sid"`
	Sub     *string         `json:"sub"`
	AgentID *string         `json:"agent_id"`
	Htm     *string         `json:"htm"`
	Htu     *string         `json:"htu"`
	Iat     json.RawMessage `json:"iat"`
	Jti     *string         `json:"jti"`
	Ath     *string         `json:"ath"`
}

// Verify checks a Session JWT against req and returns its claims. Every
// failure is an invalid_session *httpx.Error whose description says what
// was wrong.
func (v *Verifier) Verify(ctx context.Context, token string, req Request) (*Claims, error) {
	now := v.opts.Now()
	if token == "" {
		return nil, fail("the %s header is required", Header)
	}
	if len(token) > maxJWT {
		return nil, fail("the Session JWT is too large")
	}
	parts, hdr, cached, err := v.split(token)
	switch {
	case errors.Is(err, jose.ErrNotCompact):
		return nil, fail("the Session JWT is not a compact JWS")
	case err != nil:
		return nil, fail("the Session JWT's header is malformed")
	case hdr.Extended():
		return nil, fail("the Session JWT's header must not carry crit or b64")
	}
	var cl sessionClaims
	if err := jose.DecodeSegment(parts[1], &cl); err != nil {
		return nil, fail("the Session JWT's claims are malformed")
	}
	if hdr.PapDlg == nil || *hdr.PapDlg == "" {
		return nil, fail("the Session JWT has no delegation (pap_dlg); Session JWTs are signed with delegated keys (spec 5.2)")
	}
	if cl.Iss == nil || *cl.Iss == "" {
		return nil, fail("iss is required")
	}
	// Claims reach PostgreSQL, which refuses NUL and invalid UTF-8.
	for _, c := range []struct {
		name string
		v    *string
	}{{"iss", cl.Iss}, {"sub", cl.Sub}, {"agent_id", cl.AgentID}, {"jti", cl.Jti}} {
		if c.v != nil && !httpx.ValidText(*c.v) {
			return nil, fail("%s must be UTF-8 text without NUL characters", c.name)
		}
	}
	clientID := *cl.Iss

	// Spec 5.3 step 1, then 5.2 "Delegated keys" steps 1-3.
	client, err := v.resolver.Client(ctx, clientID)
	if err != nil {
		return nil, clientError(err)
	}
	d, err := v.delegation(ctx, client, *hdr.PapDlg, hdr.dlgSum, now)
	if err != nil {
		return nil, err
	}
	if hdr.Kid == nil || *hdr.Kid != d.thumbprint {
		return nil, fail("kid must be the RFC 7638 thumbprint of the delegated key")
	}
	if hdr.Alg == nil || *hdr.Alg != "ES256" {
		return nil, fail("alg must be ES256")
	}
	// The token is split and its header read already: the signature is
	// checked on those parts, not parsed again (docs/decisions.md).
	if !jose.VerifyES256(token, parts, d.pub) {
		return nil, fail("the Session JWT's signature does not verify with the delegated key")
	}
	if !cached {
		// Only a header a delegated key signed is kept: anyone can send
		// headers, and 4096 of 16 KB each would be memory held for them.
		v.headers.put(parts[0], hdr)
	}
	// Step 4 of "Delegated keys" and the rest of 5.3 step 2.
	if hdr.Typ == nil || *hdr.Typ != TypSession {
		return nil, fail("typ must be %s", TypSession)
	}
	iat, ok := jose.NumericDate(cl.Iat)
	if !ok {
		return nil, fail("iat must be a number of seconds")
	}
	if iat.After(d.expires) {
		return nil, fail("the Session JWT was signed after its delegation expired")
	}
	var aud string
	if err := json.Unmarshal(cl.Aud, &aud); err != nil {
		return nil, fail("aud must be a single string (spec 5.2)")
	}
	if aud != req.Audience {
		return nil, fail("aud must be this Company's identifier, %s", req.Audience)
	}
	if cl.Htm == nil || *cl.Htm != req.Method {
		return nil, fail("htm must be the request's method")
	}
	if cl.Htu == nil || !dpop.SameURL(*cl.Htu, req.URL) {
		return nil, fail("htu must be the request's URL without query or fragment")
	}
	if iat.Before(now.Add(-v.opts.Window)) {
		return nil, fail("the Session JWT is too old: iat must be within %s", v.opts.Window)
	}
	if iat.After(now.Add(v.opts.Skew)) {
		return nil, fail("iat is in the future")
	}
	if cl.Jti == nil || *cl.Jti == "" || len(*cl.Jti) > maxIDLength {
		return nil, fail("jti is required, at most %d characters", maxIDLength)
	}
	if cl.Sid == nil || !ValidID(*cl.Sid) {
		return nil, fail("sid must be 1 to 256 URL-safe base64 characters (spec 5.2, 8.2)")
	}
	if cl.Sub == nil || *cl.Sub == "" || len(*cl.Sub) > maxIDLength {
		return nil, fail("sub is required, at most %d characters", maxIDLength)
	}
	agentID := ""
	if cl.AgentID != nil {
		if *cl.AgentID == "" || len(*cl.AgentID) > maxIDLength {
			return nil, fail("agent_id must be 1 to %d characters when present", maxIDLength)
		}
		agentID = *cl.AgentID
	}
	// 5.3 step 3.
	if req.AccessToken != "" {
		sum := sha256.Sum256([]byte(req.AccessToken))
		if cl.Ath == nil || *cl.Ath != base64.RawURLEncoding.EncodeToString(sum[:]) {
			return nil, fail("ath must be the base64url SHA-256 of the access token")
		}
	} else if cl.Ath != nil {
		return nil, fail("ath must be absent without an access token")
	}
	return &Claims{ClientID: client.ClientID, UserID: *cl.Sub, AgentID: agentID, SID: *cl.Sid, JTI: *cl.Jti,
		IssuedAt: iat, Extensions: client.Extensions}, nil
}

// clientError maps a resolver failure to invalid_session.
func clientError(err error) error {
	var inv *agentid.InvalidError
	switch {
	case errors.As(err, &inv):
		return &httpx.Error{Code: httpx.CodeInvalidSession, Description: "the Personal Agent's metadata is not acceptable: " + inv.Reason}
	case errors.Is(err, agentid.ErrUnavailable):
		return &httpx.Error{Code: httpx.CodeInvalidSession, Description: "the Personal Agent's client metadata or keys could not be fetched", Cause: err}
	default:
		return &httpx.Error{Code: httpx.CodeInvalidSession, Description: "the Personal Agent could not be verified", Cause: err}
	}
}

// ValidID reports whether s is in the ID alphabet of 8.2: 1 to 256
// URL-safe base64 characters.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// stillSigns reports whether the jwks_uri key that signed a cached
// delegation is still the agent's, as the resolver's key set now says: a
// key gone from a fresh key set, or a key set past its grace, stops
// vouching at once (spec 10.7), and the delegation is verified afresh.
func (v *Verifier) stillSigns(ctx context.Context, client *agentid.Client, d *verifiedDelegation) bool {
	k, err := v.resolver.Key(ctx, client, d.kid)
	return err == nil && k == d.signer
}

// verifiedDelegation is what a checked delegation vouches for.
type verifiedDelegation struct {
	clientID   string
	kid        string
	signer     jwk.Key // the jwks_uri key named by kid
	pub        *ecdsa.PublicKey
	thumbprint string
	expires    time.Time
	cacheUntil time.Time
}

type delegationClaims struct {
	Iss *string         `json:"iss"`
	Iat json.RawMessage `json:"iat"`
	Exp json.RawMessage `json:"exp"`
	Cnf *struct {
		JWK json.RawMessage `json:"jwk"`
	} `json:"cnf"`
}

// delegationCacheFor bounds how long a verified delegation is reused
// without verifying its signature again; each use still checks that its
// jwks_uri key is current (stillSigns).
const delegationCacheFor = 5 * time.Minute

// delegation verifies a delegation as 5.2 "Delegated keys" steps 1 and 2
// order it, using the cache when it holds this exact delegation, whose
// SHA-256 is sum.
func (v *Verifier) delegation(ctx context.Context, client *agentid.Client, compact string, sum [32]byte, now time.Time) (*verifiedDelegation, error) {
	if d, ok := v.dlg.get(sum, now); ok && d.clientID == client.ClientID && v.stillSigns(ctx, client, d) {
		if !now.Before(d.expires) {
			return nil, fail("the delegation has expired")
		}
		return d, nil
	}
	parts, hdr, err := jose.Split(compact)
	switch {
	case errors.Is(err, jose.ErrNotCompact):
		return nil, fail("the delegation is not a compact JWS")
	case err != nil:
		return nil, fail("the delegation's header is malformed")
	case hdr.Extended():
		return nil, fail("the delegation's header must not carry crit or b64")
	}
	var cl delegationClaims
	if err := jose.DecodeSegment(parts[1], &cl); err != nil {
		return nil, fail("the delegation's claims are malformed")
	}
	if hdr.Kid == nil || *hdr.Kid == "" {
		return nil, fail("the delegation's kid must name a key in jwks_uri")
	}
	alg, ok := jose.AgentAlg(hdr.Alg)
	if !ok {
		return nil, fail("the delegation's alg must be ES256 or PS384")
	}
	// Step 1: the key in jwks_uri named by kid, and the signature.
	key, err := v.resolver.Key(ctx, client, *hdr.Kid)
	if errors.Is(err, agentid.ErrUnknownKey) {
		return nil, fail("the delegation's kid names no signing key in jwks_uri")
	}
	if err != nil {
		return nil, clientError(err)
	}
	if _, err := jws.Verify([]byte(compact), jws.WithKey(alg, key)); err != nil {
		return nil, fail("the delegation's signature does not verify with the jwks_uri key %s", *hdr.Kid)
	}
	// Step 2.
	if hdr.Typ == nil || *hdr.Typ != TypDelegation {
		return nil, fail("the delegation's typ must be %s", TypDelegation)
	}
	if cl.Iss == nil || *cl.Iss != client.ClientID {
		return nil, fail("the delegation's iss must be the Session JWT's iss")
	}
	iat, ok1 := jose.NumericDate(cl.Iat)
	exp, ok2 := jose.NumericDate(cl.Exp)
	if !ok1 || !ok2 {
		return nil, fail("the delegation's iat and exp must be numbers of seconds")
	}
	if !now.Before(exp) {
		return nil, fail("the delegation has expired")
	}
	// An iat in the future would let exp run past now + 24 hours.
	if iat.After(now.Add(v.opts.Skew)) {
		return nil, fail("the delegation's iat is in the future")
	}
	if exp.Sub(iat) > MaxDelegationLifetime {
		return nil, fail("the delegation's exp must be at most 24 hours after its iat")
	}
	if cl.Cnf == nil || len(cl.Cnf.JWK) == 0 {
		return nil, fail("the delegation has no cnf.jwk")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(cl.Cnf.JWK, &members); err != nil {
		return nil, fail("cnf.jwk is not a JWK")
	}
	if jose.HasPrivateMembers(members) {
		return nil, fail("cnf.jwk must not contain private key members")
	}
	dk, err := jwk.ParseKey(cl.Cnf.JWK)
	if err != nil {
		return nil, fail("cnf.jwk is not a valid JWK")
	}
	var pub ecdsa.PublicKey
	if ec, ok := dk.(jwk.ECDSAPublicKey); !ok || ec.Crv() != jwa.P256 || ec.Raw(&pub) != nil {
		return nil, fail("cnf.jwk must be a P-256 public key, since Session JWTs are ES256")
	}
	tp, err := jose.Thumbprint(dk)
	if err != nil {
		return nil, fail("cnf.jwk must be a P-256 public key, a point on the curve")
	}
	d := &verifiedDelegation{
		clientID: client.ClientID, kid: *hdr.Kid, signer: key, pub: &pub, thumbprint: tp,
		expires: exp, cacheUntil: minTime(exp, now.Add(delegationCacheFor)),
	}
	v.dlg.put(sum, d, now)
	return d, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// delegationCache holds verified delegations by the hash of their compact
// form. It is bounded: when full, expired entries go, then everything.
type delegationCache struct {
	mu sync.Mutex
	m  map[[32]byte]*verifiedDelegation
}

const maxDelegations = 100_000

func (c *delegationCache) get(k [32]byte, now time.Time) (*verifiedDelegation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[k]
	if !ok || !now.Before(d.cacheUntil) {
		return nil, false
	}
	return d, true
}

func (c *delegationCache) put(k [32]byte, d *verifiedDelegation, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[32]byte]*verifiedDelegation)
	}
	if len(c.m) >= maxDelegations {
		for key, e := range c.m {
			if !now.Before(e.cacheUntil) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= maxDelegations {
			clear(c.m)
		}
	}
	c.m[k] = d
}

// sessionHeader is a Session JWT's decoded header, with the SHA-256 of its
// delegation (pap_dlg), the delegation cache's key. It is shared: read
// only.
type sessionHeader struct {
	jose.Header
	dlgSum [32]byte
}

// split splits token into its segments, as jose.Split does, and returns
// its decoded header: from the cache, and cached true, when a JWT with
// this exact header segment verified before (Verify caches it then). A
// Personal Agent signs every request's JWT under the
// same header until its next delegation, and the header, the delegation
// inside it, is most of the JWT: about 1 KB of base64 and JSON a request
// need not decode again, nor hash for the delegation cache.
func (v *Verifier) split(token string) ([]string, *sessionHeader, bool, error) {
	seg, _, _ := strings.Cut(token, ".")
	if h := v.headers.get(seg); h != nil {
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			return nil, nil, false, jose.ErrNotCompact
		}
		return parts, h, true, nil
	}
	parts, hdr, err := jose.Split(token)
	if err != nil {
		return nil, nil, false, err
	}
	h := &sessionHeader{Header: hdr}
	if hdr.PapDlg != nil {
		h.dlgSum = sha256.Sum256([]byte(*hdr.PapDlg))
	}
	return parts, h, false, nil
}

// headerCache holds decoded Session JWT headers by their encoded segment.
// It is bounded: when full, it is emptied; a header not found is decoded.
type headerCache struct {
	mu sync.RWMutex
	m  map[string]*sessionHeader
}

const maxHeaders = 4096

func (c *headerCache) get(seg string) *sessionHeader {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[seg]
}

func (c *headerCache) put(seg string, h *sessionHeader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxHeaders {
		c.m = make(map[string]*sessionHeader)
	}
	// A copy: the segment would otherwise keep the whole request's JWT.
	c.m[strings.Clone(seg)] = h
}
