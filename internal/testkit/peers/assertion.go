package peers

import (
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// AssertionClaims are a client assertion's claims (RFC 7523 §3).
func (a *Agent) AssertionClaims(issuer string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": a.ClientID, "sub": a.ClientID, "aud": issuer,
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": rand.Text(),
	}
}

// ClientAssertion signs a fresh client assertion for issuer with the
// agent's ES256 key (spec 4.1). mutate, when given, changes the claims
// before signing.
func (a *Agent) ClientAssertion(t testing.TB, issuer string, mutate ...func(claims map[string]any)) string {
	t.Helper()
	key, kid := a.Key("ES256")
	claims := a.AssertionClaims(issuer)
	for _, m := range mutate {
		m(claims)
	}
	return SignJWT(t, "ES256", key, map[string]any{"alg": "ES256", "kid": kid, "typ": "JWT"}, claims)
}

// AssertionTransport adds a fresh client assertion for issuer to every
// form POST to the issuer's token, device authorization and revocation
// endpoints, so an OAuth library that knows only client secrets
// (golang.org/x/oauth2) authenticates with private_key_jwt.
func (a *Agent) AssertionTransport(t testing.TB, base http.RoundTripper, issuer string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.String(), issuer+"/oauth/") || r.Body == nil {
			return base.RoundTrip(r)
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		form, err := url.ParseQuery(string(raw))
		if err != nil {
			return nil, err
		}
		form.Del("client_secret")
		form.Set("client_id", a.ClientID)
		form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
		form.Set("client_assertion", a.ClientAssertion(t, issuer))
		body := form.Encode()
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(strings.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		r.Header.Del("Authorization")
		return base.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
