package agent

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// dpopProof makes a DPoP proof (RFC 9449 §4.2) for one request with the
// agent's DPoP key, which is neither its client key nor a Session key
// (spec 5.2); ath covers accessToken when it is not "".
func (a *Agent) dpopProof(method, target, accessToken string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	claims := map[string]any{
		"jti": randomID(16),
		"htm": method,
		"htu": u.Scheme + "://" + u.Host + u.EscapedPath(),
		"iat": a.now(),
	}
	if accessToken != "" {
		claims["ath"] = tokenHash(accessToken)
	}
	if n := a.dpopNonce(u); n != "" {
		claims["nonce"] = n
	}
	return signES256(a.dpopKey, map[string]any{"typ": "dpop+jwt", "jwk": publicJWK(&a.dpopKey.PublicKey)}, claims)
}

// bindsTokens reports whether the issuer binds tokens with DPoP in a way
// the agent can prove: its metadata lists ES256 among
// dpop_signing_alg_values_supported (spec 4.5, RFC 9449 §5.1).
func (c *Company) bindsTokens() bool {
	return c.AS != nil && !c.agent.opts.NoDPoP && slices.Contains(c.AS.DPoPSigningAlgValuesSupported, "ES256")
}

// addDPoP adds a proof to a request that uses a DPoP-bound token, or to a
// token request at an issuer that binds tokens.
func (a *Agent) addDPoP(req *http.Request, accessToken string) error {
	proof, err := a.dpopProof(req.Method, req.URL.String(), accessToken)
	if err != nil {
		return err
	}
	req.Header.Set("DPoP", proof)
	return nil
}

// dpopNonce is the latest server nonce u's origin handed out, or "".
func (a *Agent) dpopNonce(u *url.URL) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nonces[origin(u)]
}

// noteNonce keeps the server nonce of a response's DPoP-Nonce header for
// the next proofs to its origin (RFC 9449 §8.2: any response may carry a
// new one). It reports whether there was one.
func (a *Agent) noteNonce(resp *http.Response) bool {
	n := resp.Header.Get("DPoP-Nonce")
	if n == "" || resp.Request == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nonces[origin(resp.Request.URL)] = n
	return true
}

// origin is a URL's scheme and host, the scope of a server nonce.
func origin(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// isDPoP reports whether a token_type is DPoP's (RFC 9449 §5).
func isDPoP(tokenType string) bool { return strings.EqualFold(tokenType, "DPoP") }
