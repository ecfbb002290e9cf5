package issuer_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// dpopPost posts a token request with proof in the DPoP header, when set.
func (s *stormline) dpopPost(t *testing.T, form url.Values, proof string) *peers.Response {
	t.Helper()
	headers := []string{"Content-Type", "application/x-www-form-urlencoded"}
	if proof != "" {
		headers = append(headers, "DPoP", proof)
	}
	return s.env.Do(t, http.MethodPost, s.issuer+"/oauth/token", s.tokAuthed(t, form).Encode(), headers...)
}

func (s *stormline) dpopProof(k *dpoptest.Key) string {
	return k.Valid(http.MethodPost, s.issuer+"/oauth/token", "", time.Now())
}

func refreshForm(rt string) url.Values {
	return url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}
}

// requireBound checks a token response bound to k (RFC 9449 §5, §6).
func requireBound(t *testing.T, resp *peers.Response, k *dpoptest.Key) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	require.Equal(t, "DPoP", body["token_type"])
	_, claims := tokClaims(t, body["access_token"].(string))
	require.Equal(t, map[string]any{"jkt": k.JKT}, claims["cnf"])
	return body
}

// TestTokenDPoP: a Company that binds tokens binds those of a token
// request with a valid proof, answers token_type DPoP, and keeps the
// binding across refreshes, which must prove the same key.
func TestTokenDPoP(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "allowed"}})
	key, other := dpoptest.NewKey(), dpoptest.NewKey()

	code, verifier := s.tokCode(t, s.conf.Scopes)
	body := requireBound(t, s.dpopPost(t, s.tokCodeForm(code, verifier), s.dpopProof(key)), key)
	info := s.tokIntrospect(t, s.tokAPIKey(t), body["access_token"].(string))
	require.Equal(t, "DPoP", info["token_type"])
	require.Equal(t, map[string]any{"jkt": key.JKT}, info["cnf"])

	rt := body["refresh_token"].(string)
	before := s.tokRows(t)
	tokError(t, s.dpopPost(t, refreshForm(rt), ""), http.StatusBadRequest, "invalid_dpop_proof")
	tokError(t, s.dpopPost(t, refreshForm(rt), s.dpopProof(other)), http.StatusBadRequest, "invalid_dpop_proof")
	s.tokNothingNew(t, before)
	body = requireBound(t, s.dpopPost(t, refreshForm(rt), s.dpopProof(key)), key)
	requireBound(t, s.dpopPost(t, refreshForm(body["refresh_token"].(string)), s.dpopProof(key)), key)

	// Without a proof a Company that allows DPoP issues Bearer tokens.
	code, verifier = s.tokCode(t, s.conf.Scopes)
	resp := s.dpopPost(t, s.tokCodeForm(code, verifier), "")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "Bearer", resp.JSON(t)["token_type"])
	_, claims := tokClaims(t, resp.JSON(t)["access_token"].(string))
	require.NotContains(t, claims, "cnf")
}

// TestTokenDPoPRefusals breaks the proof of a token request (RFC 9449 §4.3).
func TestTokenDPoPRefusals(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "allowed"}})
	key := dpoptest.NewKey()
	tokenURL := s.issuer + "/oauth/token"
	replayed := s.dpopProof(key)
	code, verifier := s.tokCode(t, s.conf.Scopes)
	requireBound(t, s.dpopPost(t, s.tokCodeForm(code, verifier), replayed), key)
	for name, proof := range map[string]string{
		"garbage":        "garbage",
		"another URL":    key.Valid(http.MethodPost, s.issuer+"/oauth/revoke", "", time.Now()),
		"another method": key.Valid(http.MethodGet, tokenURL, "", time.Now()),
		"old":            key.Valid(http.MethodPost, tokenURL, "", time.Now().Add(-time.Hour)),
		"with ath":       key.Valid(http.MethodPost, tokenURL, "some-token", time.Now()),
		"replayed":       replayed,
		"wrong typ": key.Make(func() *dpoptest.Proof {
			p := key.For(http.MethodPost, tokenURL, "", time.Now())
			p.Typ = "JWT"
			return p
		}()),
	} {
		t.Run(name, func(t *testing.T) {
			code, verifier := s.tokCode(t, s.conf.Scopes)
			tokError(t, s.dpopPost(t, s.tokCodeForm(code, verifier), proof), http.StatusBadRequest, "invalid_dpop_proof")
		})
	}
}

// TestTokenDPoPNonce runs RFC 9449 §8 at the token endpoint of a Company
// that requires server nonces: a proof without one, or with a wrong one,
// is refused with use_dpop_nonce and a nonce in DPoP-Nonce, leaving the
// code unused, and the retry with the nonce is bound; refreshes need it
// too.
func TestTokenDPoPNonce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "allowed", "dpop_nonce": true}})
	key := dpoptest.NewKey()
	tokenURL := s.issuer + "/oauth/token"
	withNonce := func(nonce string) string { return key.WithNonce(http.MethodPost, tokenURL, "", nonce, time.Now()) }

	code, verifier := s.tokCode(t, s.conf.Scopes)
	before := s.tokRows(t)
	resp := s.dpopPost(t, s.tokCodeForm(code, verifier), s.dpopProof(key))
	tokError(t, resp, http.StatusBadRequest, "use_dpop_nonce")
	nonce := resp.Header.Get("DPoP-Nonce")
	require.NotEmpty(t, nonce, "use_dpop_nonce comes with a nonce (RFC 9449 §8.1)")
	resp = s.dpopPost(t, s.tokCodeForm(code, verifier), withNonce(nonce[:len(nonce)-2]+"AA"))
	tokError(t, resp, http.StatusBadRequest, "use_dpop_nonce")
	require.Equal(t, nonce, resp.Header.Get("DPoP-Nonce"))
	s.tokNothingNew(t, before)

	// The same code still works with the nonce.
	body := requireBound(t, s.dpopPost(t, s.tokCodeForm(code, verifier), withNonce(nonce)), key)
	rt := body["refresh_token"].(string)
	tokError(t, s.dpopPost(t, refreshForm(rt), s.dpopProof(key)), http.StatusBadRequest, "use_dpop_nonce")
	requireBound(t, s.dpopPost(t, refreshForm(rt), withNonce(nonce)), key)

	// Without a proof a Company that allows DPoP still issues Bearer
	// tokens: nonces are part of proofs only.
	code, verifier = s.tokCode(t, s.conf.Scopes)
	resp = s.dpopPost(t, s.tokCodeForm(code, verifier), "")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "Bearer", resp.JSON(t)["token_type"])
}

// TestTokenDPoPRequired: a Company that requires DPoP refuses a token
// request without a proof, except for an MCP server that takes Bearer
// tokens only, whose tokens are never bound (spec 7).
func TestTokenDPoPRequired(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "required"},
		"mcp": map[string]any{"bearer_tokens": true}})
	key := dpoptest.NewKey()
	code, verifier := s.tokCode(t, s.conf.Scopes)
	tokError(t, s.dpopPost(t, s.tokCodeForm(code, verifier), ""), http.StatusBadRequest, "invalid_dpop_proof")

	code, verifier = s.tokCode(t, s.conf.Scopes)
	form := s.tokCodeForm(code, verifier)
	form.Set("resource", s.issuer+"/mcp")
	resp := s.dpopPost(t, form, s.dpopProof(key))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	require.Equal(t, "Bearer", body["token_type"])
	_, claims := tokClaims(t, body["access_token"].(string))
	require.NotContains(t, claims, "cnf")
}

// TestTokenDPoPDevice: Device Sign-In binds tokens as Direct Sign-In does.
func TestTokenDPoPDevice(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "required"}})
	key := dpoptest.NewKey()
	da := s.devStart(t, "orders:read")
	s.devDecide(t, da, "approve", []string{"orders:read"})
	form := url.Values{"grant_type": {devGrant}, "device_code": {da["device_code"].(string)}}
	tokError(t, s.dpopPost(t, form, ""), http.StatusBadRequest, "invalid_dpop_proof")
	requireBound(t, s.dpopPost(t, form, s.dpopProof(key)), key)
}

// TestTokenDPoPOff: a Company that does not bind tokens ignores proofs.
func TestTokenDPoPOff(t *testing.T) {
	t.Parallel()
	s := setup(t)
	code, verifier := s.tokCode(t, s.conf.Scopes)
	resp := s.dpopPost(t, s.tokCodeForm(code, verifier), s.dpopProof(dpoptest.NewKey()))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "Bearer", resp.JSON(t)["token_type"])
}

// TestDPoPWithOAuth2Library: golang.org/x/oauth2 sends no DPoP proofs. At
// a Company that allows DPoP, with nonces too, it signs in and refreshes
// with Bearer tokens as before; at one that requires DPoP it gets
// invalid_dpop_proof as an OAuth error it can show.
func TestDPoPWithOAuth2Library(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "allowed", "dpop_nonce": true}})
	code, verifier := s.tokCode(t, s.conf.Scopes)
	tok, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.Equal(t, "Bearer", tok.TokenType)
	tok.Expiry = time.Now().Add(-time.Minute)
	fresh, err := s.conf.TokenSource(s.ctx, tok).Token()
	require.NoError(t, err)
	require.Equal(t, "Bearer", fresh.TokenType)
	require.NotEqual(t, tok.AccessToken, fresh.AccessToken)

	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"dpop": "required", "dpop_nonce": false}})
	code, verifier = s.tokCode(t, s.conf.Scopes)
	_, err = s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier))
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_dpop_proof", re.ErrorCode)
}
