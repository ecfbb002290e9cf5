package peers

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
)

// Paths the test agent serves.
const (
	agentMetadataPath = "/agent.json"
	agentJWKSPath     = "/jwks.json"
)

// agentRSABits keeps key generation fast; spec 4.1 sets no minimum.
const agentRSABits = 2048

// Agent is a Personal Agent for tests: it serves its client metadata
// document and key set over HTTPS (spec 4.1) and signs Session JWTs with
// delegated keys (spec 5.2). Poppyhost fetches it as a stranger.
type Agent struct {
	Host     string // e.g. "agent.test"; tests resolve it to Addr
	Addr     string // 127.0.0.1:port it listens on
	ClientID string // https://{Host}:{port}/agent.json
	JWKSURI  string // https://{Host}:{port}/jwks.json

	client *http.Client

	mu        sync.Mutex
	es256     *ecdsa.PrivateKey
	ps384     *rsa.PrivateKey
	metadata  []byte
	jwks      []byte
	handlers  map[string]http.HandlerFunc
	headers   map[string]map[string]string
	hits      map[string]int
	delegated map[string]*ecdsa.PrivateKey // by User ID
	strangerR *rsa.PrivateKey              // signs "unknown key" PS delegations
}

// AgentOptions configure StartAgent. Zero values take the defaults in
// brackets.
type AgentOptions struct {
	Host string // ["agent.test"]
}

// StartAgent starts a Personal Agent on 127.0.0.1 serving certificates from
// ca for its host name, closed when the test ends. Its key set holds one
// ES256 (P-256) and one PS384 (RSA) key, each with kid = RFC 7638
// thumbprint, "use":"sig" and "alg".
func StartAgent(t testing.TB, ca *devca.CA, opts AgentOptions) *Agent {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "agent.test"
	}
	a := &Agent{
		Host:      opts.Host,
		handlers:  map[string]http.HandlerFunc{},
		headers:   map[string]map[string]string{},
		hits:      map[string]int{},
		delegated: map[string]*ecdsa.PrivateKey{},
	}
	require.NoError(t, a.rotateKeys())

	srv := Start(t, ca, http.HandlerFunc(a.serve))
	a.Addr = srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(a.Addr)
	origin := "https://" + net.JoinHostPort(a.Host, port)
	a.ClientID = origin + agentMetadataPath
	a.JWKSURI = origin + agentJWKSPath
	a.SetMetadata(map[string]any{
		"client_id":                  a.ClientID,
		"client_name":                "Test Agent",
		"jwks_uri":                   a.JWKSURI,
		"redirect_uris":              []string{origin + "/callback"},
		"token_endpoint_auth_method": "private_key_jwt",
		"extensions":                 map[string]any{},
	})

	a.client = Client(t, ca, a.Addr)
	return a
}

// URL returns the https URL of path on the agent's host.
func (a *Agent) URL(path string) string {
	_, port, _ := net.SplitHostPort(a.Addr)
	return "https://" + net.JoinHostPort(a.Host, port) + path
}

// Client returns an HTTPS client that sends every request to the agent,
// trusts the CA and does not follow redirects.
func (a *Agent) Client() *http.Client { return a.client }

func (a *Agent) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.hits[r.URL.Path]++
	h := a.handlers[r.URL.Path]
	extra := maps.Clone(a.headers[r.URL.Path])
	var body []byte
	var contentType string
	switch r.URL.Path {
	case agentMetadataPath:
		body, contentType = a.metadata, "application/json"
	case agentJWKSPath:
		body, contentType = a.jwks, "application/jwk-set+json"
	}
	a.mu.Unlock()

	if h != nil {
		h(w, r)
		return
	}
	if body == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", contentType)
	for name, value := range extra {
		if value == "" {
			// A nil value also stops net/http from sniffing a Content-Type.
			w.Header()[http.CanonicalHeaderKey(name)] = nil
		} else {
			w.Header().Set(name, value)
		}
	}
	_, _ = w.Write(body)
}

// Metadata returns a copy of the client metadata document it serves.
func (a *Agent) Metadata() map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var m map[string]any
	_ = json.Unmarshal(a.metadata, &m)
	return m
}

// SetMetadata replaces the client metadata document it serves.
func (a *Agent) SetMetadata(m map[string]any) {
	raw, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("testkit: agent metadata: %v", err))
	}
	a.mu.Lock()
	a.metadata = raw
	a.mu.Unlock()
}

// JWKS returns a copy of the key set it serves, or nil when that is not a
// JSON object.
func (a *Agent) JWKS() map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var m map[string]any
	_ = json.Unmarshal(a.jwks, &m)
	return m
}

// SetJWKS replaces the key set it serves: a []byte or string is served as
// is (it need not be JSON), anything else as JSON. RotateKeys replaces it
// again.
func (a *Agent) SetJWKS(v any) {
	var raw []byte
	switch v := v.(type) {
	case []byte:
		raw = append([]byte{}, v...)
	case string:
		raw = []byte(v)
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			panic(fmt.Sprintf("testkit: agent jwks: %v", err))
		}
	}
	a.mu.Lock()
	a.jwks = raw
	a.mu.Unlock()
}

// SetHeader sets a response header on the default response for path
// (/agent.json or /jwks.json), after Content-Type so it can replace it.
// An empty value removes the header, Content-Type included.
func (a *Agent) SetHeader(path, name, value string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.headers[path] == nil {
		a.headers[path] = map[string]string{}
	}
	a.headers[path][name] = value
}

// Serve answers requests for path with h instead of the default response,
// to make an endpoint fail, redirect or send an oversized body. A nil h
// restores the default.
func (a *Agent) Serve(path string, h http.HandlerFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h == nil {
		delete(a.handlers, path)
	} else {
		a.handlers[path] = h
	}
}

// Hits returns how many requests for path the agent has received, whoever
// answered them.
func (a *Agent) Hits(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hits[path]
}

// RotateKeys replaces both keys in the key set with new ones; delegations
// signed by the old keys no longer verify. It also replaces a key set
// given to SetJWKS.
func (a *Agent) RotateKeys() {
	if err := a.rotateKeys(); err != nil {
		panic(fmt.Sprintf("testkit: rotate agent keys: %v", err))
	}
}

func (a *Agent) rotateKeys() error {
	es, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ps, err := rsa.GenerateKey(rand.Reader, agentRSABits)
	if err != nil {
		return err
	}
	set := jwk.NewSet()
	for _, k := range []struct {
		priv crypto.Signer
		alg  jwa.SignatureAlgorithm
	}{{es, jwa.ES256}, {ps, jwa.PS384}} {
		// PublicKeyOf keeps private members out of the served set.
		pub, err := jwk.PublicKeyOf(k.priv)
		if err != nil {
			return err
		}
		kid, err := thumbprint(pub)
		if err != nil {
			return err
		}
		for name, v := range map[string]any{jwk.KeyIDKey: kid, jwk.KeyUsageKey: "sig", jwk.AlgorithmKey: k.alg} {
			if err := pub.Set(name, v); err != nil {
				return err
			}
		}
		if err := set.AddKey(pub); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(set)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.es256, a.ps384, a.jwks = es, ps, raw
	a.mu.Unlock()
	return nil
}

// Key returns the current private key in the key set for alg ("ES256" or
// "PS384") and its kid, for signing client assertions (spec 4.1).
func (a *Agent) Key(alg string) (crypto.Signer, string) {
	a.mu.Lock()
	var k crypto.Signer
	switch alg {
	case "ES256":
		k = a.es256
	case "PS384":
		k = a.ps384
	default:
		a.mu.Unlock()
		panic(fmt.Sprintf("testkit: agent has no %q key", alg))
	}
	a.mu.Unlock()
	kid, err := thumbprint(k.Public())
	if err != nil {
		panic(err)
	}
	return k, kid
}

// DelegatedKey returns the delegated key the agent signs sub's Session JWTs
// with, made on first use: one key per User ID (spec 5.2).
func (a *Agent) DelegatedKey(sub string) *ecdsa.PrivateKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.delegated[sub]
	if k == nil {
		var err error
		if k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		a.delegated[sub] = k
	}
	return k
}

// SessionClaims are the claims of a Session JWT (spec 5.2). Zero values take
// the defaults in brackets.
type SessionClaims struct {
	Aud         string // required
	Sub         string // ["usr_test"]
	AgentID     string // agent_id, left out when empty
	SID         string // [random 22-character base64url]
	JTI         string // [random 22-character base64url]
	AccessToken string // sets ath = base64url(SHA-256(token)); no ath when empty
	IAT         time.Time
	Method      string // htm ["GET"]
	URL         string // htu, required; the query and fragment are dropped
	Raw         bool   // use URL as htu as is, query and fragment included
}

// SessionOptions shape the Session JWT and its delegation. Zero values are a
// valid token; each other option breaks exactly one thing.
type SessionOptions struct {
	// DelegationAlg picks the key-set key that signs the delegation:
	// ["ES256"] or "PS384". Another RSA algorithm (RS256, PS256...) signs
	// with the RSA key under that algorithm, for rows that refuse it.
	DelegationAlg      string
	DelegationLifetime time.Duration // exp = iat + lifetime [1h]
	DelegationIAT      time.Time     // [now - 1 minute]
	// DelegatedKey signs the Session JWT [DelegatedKey(Sub)].
	DelegatedKey *ecdsa.PrivateKey

	// Mutations run on the exact header and claims that are then signed.
	MutateHeader, MutateClaims                     func(map[string]any)
	MutateDelegationHeader, MutateDelegationClaims func(map[string]any)

	// SignDirect signs the Session JWT with the key set's ES256 key, its kid
	// in the header and no pap_dlg (spec 5.2: must be rejected).
	SignDirect bool
	// NoDelegation leaves out pap_dlg.
	NoDelegation bool
	// SignWithOtherKey signs the Session JWT with a fresh key; kid and
	// pap_dlg still name the delegated key.
	SignWithOtherKey bool
	// DelegationSignedByUnknownKey signs the delegation with a fresh key of
	// DelegationAlg's type that is not in jwks_uri, with that key's
	// thumbprint as kid. Set its kid to a known one with
	// MutateDelegationHeader to get a bad signature instead.
	DelegationSignedByUnknownKey bool
}

// SessionJWT returns a compact Session JWT (spec 5.2) signed with a
// delegated key, carrying its delegation in pap_dlg.
func (a *Agent) SessionJWT(t testing.TB, c SessionClaims, o SessionOptions) string {
	t.Helper()
	tok, err := a.sessionJWT(c, o)
	require.NoError(t, err)
	return tok
}

// Sign sets a fresh Poppy-Session header on req for its method and URL,
// and Authorization: Bearer when c.AccessToken is set. c.Method and c.URL,
// when set, replace req's.
func (a *Agent) Sign(t testing.TB, req *http.Request, c SessionClaims, o SessionOptions) {
	t.Helper()
	if c.Method == "" {
		c.Method = req.Method
	}
	if c.URL == "" {
		c.URL = req.URL.String()
	}
	req.Header.Set("Poppy-Session", a.SessionJWT(t, c, o))
	if c.AccessToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.AccessToken)
	}
}

func (a *Agent) sessionJWT(c SessionClaims, o SessionOptions) (string, error) {
	now := time.Now()
	if c.Aud == "" || c.URL == "" {
		return "", fmt.Errorf("session JWT: Aud and URL are required")
	}
	if c.Sub == "" {
		c.Sub = "usr_test"
	}
	if c.SID == "" {
		c.SID = agentRandomID()
	}
	if c.JTI == "" {
		c.JTI = agentRandomID()
	}
	if c.IAT.IsZero() {
		c.IAT = now
	}
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	htu := c.URL
	if u, err := url.Parse(c.URL); err == nil && !c.Raw {
		// spec 5.2: htu is the URL without the query or fragment.
		u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
		htu = u.String()
	}
	claims := map[string]any{
		"iss": a.ClientID,
		"aud": c.Aud,
		"sid": c.SID,
		"sub": c.Sub,
		"htm": c.Method,
		"htu": htu,
		"iat": c.IAT.Unix(),
		"jti": c.JTI,
	}
	if c.AgentID != "" {
		claims["agent_id"] = c.AgentID
	}
	if c.AccessToken != "" {
		sum := sha256.Sum256([]byte(c.AccessToken))
		claims["ath"] = base64.RawURLEncoding.EncodeToString(sum[:])
	}

	header := map[string]any{"typ": "poppy-session+jwt", "alg": "ES256"}
	var key crypto.Signer
	if o.SignDirect {
		var kid string
		key, kid = a.Key("ES256")
		header["kid"] = kid
	} else {
		dk := o.DelegatedKey
		if dk == nil {
			dk = a.DelegatedKey(c.Sub)
		}
		kid, err := thumbprint(dk.Public())
		if err != nil {
			return "", err
		}
		header["kid"] = kid
		key = dk
		if !o.NoDelegation {
			dlg, err := a.delegation(dk.Public(), o, now)
			if err != nil {
				return "", err
			}
			header["pap_dlg"] = dlg
		}
	}
	if o.SignWithOtherKey {
		other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", err
		}
		key = other
	}
	if o.MutateHeader != nil {
		o.MutateHeader(header)
	}
	if o.MutateClaims != nil {
		o.MutateClaims(claims)
	}
	return signCompact(jwa.ES256, key, header, claims)
}

// delegation returns a compact delegation (spec 5.2) vouching for pub.
func (a *Agent) delegation(pub crypto.PublicKey, o SessionOptions, now time.Time) (string, error) {
	alg := o.DelegationAlg
	if alg == "" {
		alg = "ES256"
	}
	var key crypto.Signer
	var kid string
	switch {
	case alg == "ES256":
		key, kid = a.Key("ES256")
	case strings.HasPrefix(alg, "PS") || strings.HasPrefix(alg, "RS"):
		key, kid = a.Key("PS384")
	default:
		return "", fmt.Errorf("delegation: unsupported DelegationAlg %q", alg)
	}
	if o.DelegationSignedByUnknownKey {
		var err error
		if key, err = a.strangerKey(alg); err != nil {
			return "", err
		}
		if kid, err = thumbprint(key.Public()); err != nil {
			return "", err
		}
	}
	iat := o.DelegationIAT
	if iat.IsZero() {
		iat = now.Add(-time.Minute)
	}
	lifetime := o.DelegationLifetime
	if lifetime == 0 {
		lifetime = time.Hour
	}
	cnf, err := jwkMap(pub)
	if err != nil {
		return "", err
	}
	header := map[string]any{"typ": "pap-delegation+jwt", "alg": alg, "kid": kid}
	claims := map[string]any{
		"iss": a.ClientID,
		"cnf": map[string]any{"jwk": cnf},
		"iat": iat.Unix(),
		"exp": iat.Add(lifetime).Unix(),
		"jti": agentRandomID(),
	}
	if o.MutateDelegationHeader != nil {
		o.MutateDelegationHeader(header)
	}
	if o.MutateDelegationClaims != nil {
		o.MutateDelegationClaims(claims)
	}
	return signCompact(jwa.SignatureAlgorithm(alg), key, header, claims)
}

// strangerKey returns a key of alg's type that is not in the key set.
func (a *Agent) strangerKey(alg string) (crypto.Signer, error) {
	if alg == "ES256" {
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.strangerR == nil {
		k, err := rsa.GenerateKey(rand.Reader, agentRSABits)
		if err != nil {
			return nil, err
		}
		a.strangerR = k
	}
	return a.strangerR, nil
}

// SignJWT signs header and claims, exactly as given, with key under alg (a
// JWS algorithm such as "ES256" or "PS384"), and returns the compact JWS.
// alg is not written into header: set header["alg"] yourself, so tests can
// send a header that disagrees with the signature.
func SignJWT(t testing.TB, alg string, key crypto.Signer, header, claims map[string]any) string {
	t.Helper()
	tok, err := signCompact(jwa.SignatureAlgorithm(alg), key, header, claims)
	require.NoError(t, err)
	return tok
}

// signCompact builds the JWS by hand rather than with jws.Sign, which
// rewrites alg and kid and refuses ill-typed header members: the mutated
// maps must be what is signed. jwx still makes the signature.
func signCompact(alg jwa.SignatureAlgorithm, key crypto.Signer, header, claims map[string]any) (string, error) {
	h, err := json.Marshal(header)
	if err != nil {
		return "", fmt.Errorf("encode JWS header: %w", err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("encode JWS payload: %w", err)
	}
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	signer, err := jws.NewSigner(alg)
	if err != nil {
		return "", err
	}
	sig, err := signer.Sign([]byte(input), key)
	if err != nil {
		return "", fmt.Errorf("sign %s: %w", alg, err)
	}
	return input + "." + enc.EncodeToString(sig), nil
}

// JWKThumbprint returns the RFC 7638 SHA-256 thumbprint of pub, base64url
// encoded: the kid of key-set and delegated keys.
func JWKThumbprint(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	kid, err := thumbprint(pub)
	require.NoError(t, err)
	return kid
}

// thumbprint accepts a raw public or private key, or a jwk.Key.
func thumbprint(key any) (string, error) {
	k, ok := key.(jwk.Key)
	if !ok {
		var err error
		if k, err = jwk.PublicKeyOf(key); err != nil {
			return "", err
		}
	}
	sum, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(sum), nil
}

// jwkMap returns pub as a JWK object with only its public members.
func jwkMap(pub crypto.PublicKey) (map[string]any, error) {
	k, err := jwk.PublicKeyOf(pub)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(k)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(raw, &m)
}

// agentRandomID returns 128 random bits as 22 base64url characters.
func agentRandomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
