package bearer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

const ordersURL = "https://acme.test/orders"

// TestAuthorizeDPoP breaks each rule of RFC 9449 §7 for resources: the
// DPoP scheme needs a bound token and a valid proof of its key with ath,
// and a bound token is refused with the Bearer scheme.
func TestAuthorizeDPoP(t *testing.T) {
	t.Parallel()
	key, other := dpoptest.NewKey(), dpoptest.NewKey()
	keys := &fakeKeys{payloads: map[string]any{
		tok("plain"): claims(nil),
		tok("bound"): claims(func(m map[string]any) { m["cnf"] = map[string]any{"jkt": key.JKT} }),
	}}
	v := newUnitValidator(keys, &fakeTokens{})
	binding := *acme
	binding.Settings.Auth.DPoP = tenant.DPoPAllowed
	ctx := tenant.WithCompany(context.Background(), &binding)
	req := func(auth string, proofs ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, ordersURL, nil).WithContext(ctx)
		r.Header.Set("Authorization", auth)
		for _, p := range proofs {
			r.Header.Add("DPoP", p)
		}
		return r
	}
	valid := func(k *dpoptest.Key, token string) string { return k.Valid(http.MethodGet, ordersURL, token, unitNow) }

	g, err := v.Authorize(ctx, req("DPoP "+tok("bound"), valid(key, tok("bound"))), bearer.Resource{}, "orders:read")
	require.NoError(t, err)
	require.Equal(t, key.JKT, g.JKT)
	// A plain token still works as a Bearer token.
	_, err = v.Authorize(ctx, req("Bearer "+tok("plain")), bearer.Resource{})
	require.NoError(t, err)

	replayed := valid(key, tok("bound"))
	_, err = v.Authorize(ctx, req("DPoP "+tok("bound"), replayed), bearer.Resource{})
	require.NoError(t, err)

	for _, tt := range []struct {
		name string
		r    *http.Request
		code string
		want string
	}{
		{"plain token, DPoP scheme without a proof", req("DPoP " + tok("plain")), httpx.CodeInvalidToken, "not DPoP-bound"},
		{"plain token, DPoP scheme with a proof", req("DPoP "+tok("plain"), valid(key, tok("plain"))), httpx.CodeInvalidToken, "not DPoP-bound"},
		{"bound token as Bearer", req("Bearer " + tok("bound")), httpx.CodeInvalidToken, "DPoP-bound"},
		{"bound token as Bearer with a proof", req("Bearer "+tok("bound"), valid(key, tok("bound"))), httpx.CodeInvalidToken, "DPoP-bound"},
		{"no proof", req("DPoP " + tok("bound")), httpx.CodeInvalidDPoPProof, "DPoP header"},
		{"two proofs", req("DPoP "+tok("bound"), valid(key, tok("bound")), valid(key, tok("bound"))), httpx.CodeInvalidDPoPProof, "one DPoP header"},
		{"another key's proof", req("DPoP "+tok("bound"), valid(other, tok("bound"))), httpx.CodeInvalidToken, "bound to"},
		{"proof for another token", req("DPoP "+tok("bound"), valid(key, tok("plain"))), httpx.CodeInvalidDPoPProof, "ath"},
		{"proof without ath", req("DPoP "+tok("bound"), valid(key, "")), httpx.CodeInvalidDPoPProof, "ath"},
		{"proof for another URL", req("DPoP "+tok("bound"), key.Valid(http.MethodGet, "https://acme.test/other", tok("bound"), unitNow)), httpx.CodeInvalidDPoPProof, "htu"},
		{"proof for another method", req("DPoP "+tok("bound"), key.Valid(http.MethodPost, ordersURL, tok("bound"), unitNow)), httpx.CodeInvalidDPoPProof, "htm"},
		{"replayed proof", req("DPoP "+tok("bound"), replayed), httpx.CodeInvalidDPoPProof, "already used"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Authorize(ctx, tt.r, bearer.Resource{})
			ch := requireChallenge(t, err, tt.code, domainMetadata)
			require.Contains(t, ch.Description, tt.want)
		})
	}
}

// TestDPoPChallenges checks the WWW-Authenticate header: one challenge
// per scheme the Company accepts (spec 7, RFC 9449 §7.1), the error in the
// challenge of the scheme the request used.
func TestDPoPChallenges(t *testing.T) {
	t.Parallel()
	binding := *acme
	binding.Settings.Auth.DPoP = tenant.DPoPRequired
	write := func(c *tenant.Company, auth string, ch *bearer.Challenge) (int, string) {
		r := httptest.NewRequest(http.MethodGet, ordersURL, nil).WithContext(tenant.WithCompany(context.Background(), c))
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		bearer.WriteError(w, r, ch)
		return w.Code, w.Header().Get("WWW-Authenticate")
	}
	algs := `algs="ES256 ES384 PS256 PS384 PS512 RS256 EdDSA"`

	_, h := write(acme, "", &bearer.Challenge{Scopes: []string{"a"}})
	require.Equal(t, `Bearer realm="poppyhost", scope="a"`, h, "a Company that binds no tokens offers Bearer only")

	_, h = write(&binding, "", &bearer.Challenge{Scopes: []string{"a"}})
	require.Equal(t, `Bearer realm="poppyhost", scope="a", DPoP realm="poppyhost", scope="a", `+algs, h)

	_, h = write(&binding, "Bearer x", &bearer.Challenge{Code: "invalid_token", Description: "bad"})
	require.Equal(t, `Bearer realm="poppyhost", error="invalid_token", error_description="bad", DPoP realm="poppyhost", `+algs, h)

	status, h := write(&binding, "DPoP x", &bearer.Challenge{Code: "invalid_dpop_proof", Description: "bad"})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, `Bearer realm="poppyhost", DPoP realm="poppyhost", error="invalid_dpop_proof", error_description="bad", `+algs, h)

	// The DPoP scheme is answered in its own challenge even where the
	// Company binds no tokens.
	_, h = write(acme, "DPoP x", &bearer.Challenge{Code: "invalid_token", Description: "bad"})
	require.Equal(t, `Bearer realm="poppyhost", DPoP realm="poppyhost", error="invalid_token", error_description="bad", `+algs, h)
}

// TestAuthorizeDPoPNonce: at a Company that requires server nonces, a
// proof without one, or with a wrong one, is refused with use_dpop_nonce,
// a DPoP challenge naming it and a nonce in DPoP-Nonce; the retry with the
// nonce is accepted (RFC 9449 §9).
func TestAuthorizeDPoPNonce(t *testing.T) {
	t.Parallel()
	key := dpoptest.NewKey()
	bound := tok("bound")
	v := newUnitValidator(&fakeKeys{payloads: map[string]any{
		bound: claims(func(m map[string]any) { m["cnf"] = map[string]any{"jkt": key.JKT} }),
	}}, &fakeTokens{})
	nonces := *acme
	nonces.Settings.Auth.DPoP = tenant.DPoPAllowed
	nonces.Settings.Auth.DPoPNonce = true
	ctx := tenant.WithCompany(context.Background(), &nonces)
	send := func(proof string) (*httptest.ResponseRecorder, error) {
		r := httptest.NewRequest(http.MethodGet, ordersURL, nil).WithContext(ctx)
		r.Header.Set("Authorization", "DPoP "+bound)
		r.Header.Set("DPoP", proof)
		w := httptest.NewRecorder()
		_, err := v.Authorize(ctx, r, bearer.Resource{})
		if err != nil {
			bearer.WriteError(w, r, err)
		}
		return w, err
	}

	w, err := send(key.Valid(http.MethodGet, ordersURL, bound, unitNow))
	requireChallenge(t, err, httpx.CodeUseDPoPNonce, domainMetadata)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Contains(t, w.Header().Get("WWW-Authenticate"), `DPoP realm="poppyhost", error="use_dpop_nonce"`)
	nonce := w.Header().Get("DPoP-Nonce")
	require.NotEmpty(t, nonce)

	w, err = send(key.WithNonce(http.MethodGet, ordersURL, bound, "not-"+nonce, unitNow))
	requireChallenge(t, err, httpx.CodeUseDPoPNonce, domainMetadata)
	require.Equal(t, nonce, w.Header().Get("DPoP-Nonce"))

	w, err = send(key.WithNonce(http.MethodGet, ordersURL, bound, nonce, unitNow))
	require.NoError(t, err)
	require.Empty(t, w.Header().Get("DPoP-Nonce"))
}

// TestBearerOnlyChallenges: a service that does not accept DPoP (spec 7)
// offers only the Bearer challenge, even at a Company that binds tokens.
func TestBearerOnlyChallenges(t *testing.T) {
	t.Parallel()
	binding := *acme
	binding.Settings.Auth.DPoP = tenant.DPoPAllowed
	v := newUnitValidator(&fakeKeys{payloads: map[string]any{tok("plain"): claims(nil)}}, &fakeTokens{})
	ctx := tenant.WithCompany(context.Background(), &binding)
	for _, auth := range []string{"", "DPoP " + tok("plain")} {
		r := httptest.NewRequest(http.MethodGet, ordersURL, nil).WithContext(ctx)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		_, err := v.Authorize(ctx, r, bearer.Resource{ID: acmeMCP.ID, BearerOnly: true}, "orders:read")
		w := httptest.NewRecorder()
		bearer.WriteError(w, r, err)
		h := w.Header().Get("WWW-Authenticate")
		require.True(t, strings.HasPrefix(h, `Bearer realm="poppyhost"`), h)
		require.NotContains(t, h, "DPoP", "auth %q", auth)
	}
}
