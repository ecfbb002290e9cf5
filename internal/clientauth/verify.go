package clientauth

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/jose"
)

// AssertionType is the only client_assertion_type accepted (RFC 7523 §2.2).
const AssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// Error codes (RFC 6749 §5.2).
const (
	CodeInvalidClient = "invalid_client"
	// CodeServerError is a failure of ours, such as the replay store's.
	CodeServerError = "server_error"
)

// Limits on what a stranger can make us parse and store.
const (
	MaxAssertion = 16 << 10
	maxJTI       = 256
	maxKID       = 256
	// minRSABits is the smallest PS384 key accepted; spec 4.1 sets no
	// minimum, 2048 is what every current guideline asks for.
	minRSABits = 2048
)

// Poppy's own token types (spec 5.2), never client assertions.
var poppyTypes = []string{"poppy-session+jwt", "pap-delegation+jwt"}

// Error is a failed client authentication. Code is invalid_client, or
// server_error when we, not the client, failed; Description says what was
// wrong and is safe to send; Cause is for logs only.
type Error struct {
	Code        string
	Description string
	Cause       error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Code + ": " + e.Description + ": " + e.Cause.Error()
	}
	return e.Code + ": " + e.Description
}

func (e *Error) Unwrap() error { return e.Cause }

// Status is the HTTP status of the error response: 401 for invalid_client
// (RFC 6749 §5.2), 500 for server_error.
func (e *Error) Status() int {
	if e.Code == CodeInvalidClient {
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

func fail(format string, a ...any) error {
	return &Error{Code: CodeInvalidClient, Description: fmt.Sprintf(format, a...)}
}

// Resolver resolves Personal Agents' metadata and keys (agentid.Resolver).
type Resolver interface {
	Client(ctx context.Context, clientID string) (*agentid.Client, error)
	Key(ctx context.Context, c *agentid.Client, kid string) (jwk.Key, error)
}

// ReplayStore remembers the jti of accepted assertions.
type ReplayStore interface {
	// Use records jti for clientID at issuer until exp; false when it was
	// already used.
	Use(ctx context.Context, issuer, clientID, jti string, exp time.Time) (bool, error)
}

// Options tune verification. Zero values take the defaults in brackets.
type Options struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// MaxLifetime bounds exp - iat [5m] (spec 4.1: short-lived).
	MaxLifetime time.Duration
	// Skew is how far iat and nbf may be in the future [30s]. exp gets no
	// leeway: an expired assertion is expired.
	Skew time.Duration
	// Replays remembers jti values; required.
	Replays ReplayStore
}

// Verifier checks client assertions (RFC 7523 §3 with spec 4.1's rules).
type Verifier struct {
	resolver Resolver
	opts     Options
}

// NewVerifier returns a Verifier resolving agents through r. It panics
// without opts.Replays: spec 4.1 lets us refuse reused jti, and we do.
func NewVerifier(r Resolver, opts Options) *Verifier {
	if r == nil || opts.Replays == nil {
		panic("clientauth: NewVerifier needs a Resolver and Options.Replays")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxLifetime == 0 {
		opts.MaxLifetime = 5 * time.Minute
	}
	if opts.Skew == 0 {
		opts.Skew = 30 * time.Second
	}
	return &Verifier{resolver: r, opts: opts}
}

type claims struct {
	Iss *string         `json:"iss"`
	Sub *string         `json:"sub"`
	Aud json.RawMessage `json:"aud"`
	Exp json.RawMessage `json:"exp"`
	Iat json.RawMessage `json:"iat"`
	Nbf json.RawMessage `json:"nbf"`
	Jti *string         `json:"jti"`
}

// Verify checks the form values client_assertion_type and
// client_assertion, and client_id when present, for issuer, and returns
// the verified client. Failures are *Error values.
func (v *Verifier) Verify(ctx context.Context, issuer string, form url.Values) (*agentid.Client, error) {
	now := v.opts.Now()
	typ, err := single(form, "client_assertion_type")
	if err != nil {
		return nil, err
	}
	if typ != AssertionType {
		return nil, fail("client_assertion_type must be %s (spec 4.1: private_key_jwt only)", AssertionType)
	}
	token, err := single(form, "client_assertion")
	if err != nil {
		return nil, err
	}
	if len(token) > MaxAssertion {
		return nil, fail("client_assertion is larger than %d bytes", MaxAssertion)
	}
	formClientID, hasClientID := "", false
	if _, ok := form["client_id"]; ok {
		if formClientID, err = single(form, "client_id"); err != nil {
			return nil, err
		}
		hasClientID = true
	}

	parts, hdr, err := jose.Split(token)
	switch {
	case errors.Is(err, jose.ErrNotCompact):
		return nil, fail("client_assertion is not a signed JWT in compact form")
	case err != nil:
		return nil, fail("the client assertion's header is malformed")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fail("the client assertion's claims are malformed")
	}
	var cl claims
	if err := jose.DecodeSegment(parts[1], &cl); err != nil {
		return nil, fail("the client assertion's claims are malformed")
	}

	// Header.
	alg, ok := jose.AgentAlg(hdr.Alg)
	if !ok {
		return nil, fail("the client assertion's alg must be ES256 or PS384 (spec 4.1)")
	}
	if hdr.Typ != nil && isPoppyType(*hdr.Typ) {
		return nil, fail("the client assertion's typ must not be %s: Poppy tokens are not client assertions (RFC 8725 §3.11)", *hdr.Typ)
	}
	if hdr.Extended() {
		return nil, fail("the client assertion's header must not carry crit or b64")
	}
	if hdr.Kid == nil || *hdr.Kid == "" || len(*hdr.Kid) > maxKID {
		return nil, fail("the client assertion's kid is required and must name a key in jwks_uri")
	}

	// Claims that need no key: check them before fetching anything for a
	// stranger.
	if cl.Iss == nil || *cl.Iss == "" {
		return nil, fail("the client assertion's iss is required and must be the client_id")
	}
	clientID := *cl.Iss
	if cl.Sub == nil || *cl.Sub != clientID {
		return nil, fail("the client assertion's sub must equal its iss, the client_id (RFC 7523 §3)")
	}
	if hasClientID && formClientID != clientID {
		return nil, fail("client_id must equal the client assertion's iss and sub")
	}
	if err := agentid.CheckClientID(clientID); err != nil {
		return nil, fail("the client assertion's iss is not a client_id: %s", err.Error())
	}
	if err := checkAudience(cl.Aud, issuer); err != nil {
		return nil, err
	}
	exp, ok := jose.NumericDate(cl.Exp)
	if !ok {
		return nil, fail("the client assertion's exp is required, as a number of seconds")
	}
	if !now.Before(exp) {
		return nil, fail("the client assertion has expired")
	}
	iat, ok := jose.NumericDate(cl.Iat)
	if !ok {
		return nil, fail("the client assertion's iat is required, as a number of seconds (spec 4.1)")
	}
	if iat.After(now.Add(v.opts.Skew)) {
		return nil, fail("the client assertion's iat is in the future")
	}
	if !exp.After(iat) {
		return nil, fail("the client assertion's exp must be after its iat")
	}
	if exp.Sub(iat) > v.opts.MaxLifetime {
		return nil, fail("the client assertion lives too long: exp must be at most %s after iat (spec 4.1)", v.opts.MaxLifetime)
	}
	if cl.Nbf != nil {
		nbf, ok := jose.NumericDate(cl.Nbf)
		if !ok {
			return nil, fail("the client assertion's nbf must be a number of seconds")
		}
		if nbf.After(now.Add(v.opts.Skew)) {
			return nil, fail("the client assertion is not valid yet (nbf)")
		}
	}
	if cl.Jti == nil || *cl.Jti == "" || len(*cl.Jti) > maxJTI {
		return nil, fail("the client assertion's jti is required, at most %d characters (spec 4.1)", maxJTI)
	}

	// The client, its key and the signature.
	client, err := v.resolver.Client(ctx, clientID)
	if err != nil {
		return nil, resolveError(err)
	}
	key, err := v.resolver.Key(ctx, client, *hdr.Kid)
	if errors.Is(err, agentid.ErrUnknownKey) {
		return nil, fail("the client assertion's kid names no signing key in jwks_uri")
	}
	if err != nil {
		return nil, resolveError(err)
	}
	if err := keyFits(key, alg); err != nil {
		return nil, err
	}
	verified, err := jws.Verify([]byte(token), jws.WithKey(alg, key))
	if err != nil {
		return nil, fail("the client assertion's signature does not verify with the jwks_uri key %s", *hdr.Kid)
	}
	if !bytes.Equal(verified, payload) {
		// Cannot happen for a compact JWS without b64; refuse rather than
		// trust claims that were not what was signed.
		return nil, fail("the client assertion's signed payload differs from its claims")
	}

	// Last, so that only genuine assertions spend a jti.
	fresh, err := v.opts.Replays.Use(ctx, issuer, client.ClientID, *cl.Jti, exp)
	if err != nil {
		return nil, replayStoreError(err)
	}
	if !fresh {
		return nil, Replayed()
	}
	return client, nil
}

// Replayed is the *Error of an assertion whose jti was used before.
func Replayed() error {
	return fail("jti already used: each client assertion needs a new jti (spec 4.1)")
}

// replayStoreError is the *Error of a failure of the replay store.
func replayStoreError(err error) error {
	return &Error{Code: CodeServerError, Description: "the client assertion could not be checked", Cause: err}
}

// single returns the one value of a form parameter: missing, empty and
// repeated parameters are refused (RFC 6749 §3.2).
func single(form url.Values, name string) (string, error) {
	vs := form[name]
	switch {
	case len(vs) > 1:
		return "", fail("%s must be sent once", name)
	case len(vs) == 0 || vs[0] == "":
		return "", fail("%s is required", name)
	}
	return vs[0], nil
}

// checkAudience applies spec 4.1: aud is a single string equal to the
// issuer, compared character for character.
func checkAudience(raw json.RawMessage, issuer string) error {
	if len(raw) == 0 || raw[0] != '"' {
		return fail("the client assertion's aud must be the issuer %s as a single string, not an array (spec 4.1)", issuer)
	}
	var aud string
	if err := json.Unmarshal(raw, &aud); err != nil {
		return fail("the client assertion's aud is malformed")
	}
	if aud == issuer {
		return nil
	}
	if strings.HasPrefix(aud, strings.TrimSuffix(issuer, "/")+"/") {
		return fail("the client assertion's aud must be the issuer %s itself, not one of its endpoints (spec 4.1)", issuer)
	}
	return fail("the client assertion's aud must be the issuer %s (spec 4.1)", issuer)
}

// keyFits checks that the jwks_uri key can verify alg.
func keyFits(key jwk.Key, alg jwa.SignatureAlgorithm) error {
	if ka := key.Algorithm().String(); ka != "" && ka != alg.String() {
		return fail("the jwks_uri key %s is for %s, not %s", key.KeyID(), ka, alg)
	}
	switch alg {
	case jwa.ES256:
		if ec, ok := key.(jwk.ECDSAPublicKey); ok && ec.Crv() == jwa.P256 {
			return nil
		}
		return fail("ES256 needs a P-256 key, and the jwks_uri key %s is not one", key.KeyID())
	case jwa.PS384:
		var raw rsa.PublicKey
		if _, ok := key.(jwk.RSAPublicKey); !ok || key.Raw(&raw) != nil {
			return fail("PS384 needs an RSA key, and the jwks_uri key %s is not one", key.KeyID())
		}
		if raw.N.BitLen() < minRSABits {
			return fail("the jwks_uri key %s is an RSA key of fewer than %d bits", key.KeyID(), minRSABits)
		}
		return nil
	}
	return fail("the client assertion's alg must be ES256 or PS384 (spec 4.1)")
}

// resolveError maps a failure to resolve the client or its keys. A
// document we could not fetch or would not accept means the client cannot
// be authenticated, so both are invalid_client.
func resolveError(err error) error {
	var inv *agentid.InvalidError
	switch {
	case errors.As(err, &inv):
		return &Error{Code: CodeInvalidClient, Description: "the Personal Agent's metadata is not acceptable: " + inv.Reason}
	case errors.Is(err, agentid.ErrUnavailable):
		return &Error{Code: CodeInvalidClient, Description: "the Personal Agent's client metadata or keys could not be fetched", Cause: err}
	default:
		return &Error{Code: CodeInvalidClient, Description: "the Personal Agent could not be verified", Cause: err}
	}
}

// isPoppyType reports whether typ names a Poppy token type. typ is a media
// type: compared without case, application/ optional (RFC 7515 §4.1.9).
func isPoppyType(typ string) bool {
	t := strings.ToLower(strings.TrimSpace(typ))
	t = strings.TrimPrefix(t, "application/")
	for _, p := range poppyTypes {
		if t == p {
			return true
		}
	}
	return false
}
