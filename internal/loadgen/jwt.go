package loadgen

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
)

var b64 = base64.RawURLEncoding

// signer signs compact ES256 JWTs under one header, encoded once.
type signer struct {
	key    *ecdsa.PrivateKey
	prefix string // base64url(header) + "."
}

func newSigner(key *ecdsa.PrivateKey, header map[string]any) (*signer, error) {
	header["alg"] = "ES256"
	h, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	return &signer{key: key, prefix: b64.EncodeToString(h) + "."}, nil
}

// sign returns the compact JWS of claims.
func (s *signer) sign(claims map[string]any) (string, error) {
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	input := s.prefix + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(input))
	r, sv, err := ecdsa.Sign(rand.Reader, s.key, sum[:])
	if err != nil {
		return "", err
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	return input + "." + b64.EncodeToString(sig[:]), nil
}

// publicJWK returns the public JWK of key and its RFC 7638 thumbprint.
func publicJWK(key *ecdsa.PrivateKey) (jwk.Key, string, error) {
	pub, err := jwk.FromRaw(&key.PublicKey)
	if err != nil {
		return nil, "", err
	}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, "", err
	}
	return pub, b64.EncodeToString(tp), nil
}

// randomID is n random bytes in base64url.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b64.EncodeToString(b)
}

// tokenHash is the ath of a Session JWT for an access token.
func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return b64.EncodeToString(sum[:])
}

// agent is the Personal Agent of the load: one client_id whose metadata
// document and key set it serves over HTTPS, one key that signs client
// assertions and delegations, and one delegated key per User ID.
type agent struct {
	clientID, jwksURI, redirectURI string
	key                            *ecdsa.PrivateKey
	kid                            string
	assertions                     *signer
	server                         *http.Server
}

// startAgent serves the agent's documents on ln (TLS for "localhost").
func startAgent(ln net.Listener, srv *http.Server) (*agent, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pub, kid, err := publicJWK(key)
	if err != nil {
		return nil, err
	}
	for k, v := range map[string]any{jwk.KeyIDKey: kid, jwk.KeyUsageKey: "sig", jwk.AlgorithmKey: "ES256"} {
		if err := pub.Set(k, v); err != nil {
			return nil, err
		}
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	base := "https://localhost:" + port
	a := &agent{clientID: base + "/agent.json", jwksURI: base + "/jwks.json", redirectURI: base + "/callback",
		key: key, kid: kid, server: srv}
	if a.assertions, err = newSigner(key, map[string]any{"typ": "JWT", "kid": kid}); err != nil {
		return nil, err
	}
	metadata, err := json.Marshal(map[string]any{
		"client_id": a.clientID, "client_name": "poppyhost load generator", "jwks_uri": a.jwksURI,
		"redirect_uris": []string{a.redirectURI}, "token_endpoint_auth_method": "private_key_jwt",
		"extensions": map[string]any{},
	})
	if err != nil {
		return nil, err
	}
	set, err := json.Marshal(map[string]any{"keys": []any{pub}})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	serve := func(ct string, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ct)
			_, _ = w.Write(body)
		}
	}
	mux.Handle("GET /agent.json", serve("application/json", metadata))
	mux.Handle("GET /jwks.json", serve("application/jwk-set+json", set))
	srv.Handler = mux
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return a, nil
}

// clientAssertion signs a private_key_jwt client assertion for issuer.
func (a *agent) clientAssertion(issuer string) (string, error) {
	now := time.Now()
	return a.assertions.sign(map[string]any{"iss": a.clientID, "sub": a.clientID, "aud": issuer,
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": randomID(16)})
}

// user is one User ID of the agent at the Company, in one Session, with
// its own delegated key.
type user struct {
	agent   *agent
	aud     string // the Company identifier
	sub     string // User ID
	sid     string
	session *signer // signs Session JWTs with the delegated key
}

// newUser makes a User ID, a delegated key and its delegation (one hour).
func (a *agent) newUser(aud string) (*user, error) {
	dk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pub, kid, err := publicJWK(dk)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	dlgSigner, err := newSigner(a.key, map[string]any{"typ": "pap-delegation+jwt", "kid": a.kid})
	if err != nil {
		return nil, err
	}
	dlg, err := dlgSigner.sign(map[string]any{"iss": a.clientID, "cnf": map[string]any{"jwk": pub},
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(), "jti": randomID(16)})
	if err != nil {
		return nil, err
	}
	s, err := newSigner(dk, map[string]any{"typ": "poppy-session+jwt", "kid": kid, "pap_dlg": dlg})
	if err != nil {
		return nil, err
	}
	return &user{agent: a, aud: aud, sub: "usr_" + randomID(12), sid: randomID(16), session: s}, nil
}

// sessionJWT signs a Session JWT for one request; accessToken, when set,
// is bound with ath. htu is the URL without query.
func (u *user) sessionJWT(method, htu, accessToken string) (string, error) {
	claims := map[string]any{"iss": u.agent.clientID, "aud": u.aud, "sid": u.sid, "sub": u.sub,
		"htm": method, "htu": htu, "iat": time.Now().Unix(), "jti": randomID(16)}
	if accessToken != "" {
		claims["ath"] = tokenHash(accessToken)
	}
	return u.session.sign(claims)
}
