package peers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
)

const testAud = "https://company.test"

func startTestAgent(t *testing.T) *Agent {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	return StartAgent(t, ca, AgentOptions{})
}

// fetch GETs url from the agent over HTTPS.
func fetch(t *testing.T, a *Agent, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := a.Client().Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func fetchJWKS(t *testing.T, a *Agent) jwk.Set {
	t.Helper()
	resp, body := fetch(t, a, a.JWKSURI)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	set, err := jwk.Parse(body)
	require.NoError(t, err)
	return set
}

// parts decodes a compact JWS's header and payload as they were signed.
func parts(t *testing.T, token string) (header, claims map[string]any) {
	t.Helper()
	seg := strings.Split(token, ".")
	require.Len(t, seg, 3)
	for i, dst := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(seg[i])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, dst))
	}
	return header, claims
}

// verifySession checks a Session JWT's delegation and signature in the
// order of spec 5.2 "Delegated keys", returning the step that failed (0
// when all pass).
func verifySession(token string, set jwk.Set, now time.Time) (int, error) {
	msg, err := jws.Parse([]byte(token))
	if err != nil {
		return 1, err
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	v, ok := hdr.Get("pap_dlg")
	dlg, _ := v.(string)
	if !ok || dlg == "" {
		return 1, errors.New("no delegation")
	}
	dmsg, err := jws.Parse([]byte(dlg))
	if err != nil {
		return 1, err
	}
	dhdr := dmsg.Signatures()[0].ProtectedHeaders()

	// Step 1: the key in jwks_uri named by kid verifies the delegation.
	key, ok := set.LookupKeyID(dhdr.KeyID())
	if !ok {
		return 1, fmt.Errorf("unknown kid %q", dhdr.KeyID())
	}
	alg := dhdr.Algorithm()
	if alg != jwa.ES256 && alg != jwa.PS384 || key.Algorithm().String() != alg.String() {
		return 1, fmt.Errorf("alg %s with key for %s", alg, key.Algorithm())
	}
	payload, err := jws.Verify([]byte(dlg), jws.WithKey(alg, key))
	if err != nil {
		return 1, err
	}

	// Step 2: typ, iss, expiry, lifetime.
	var dc struct {
		Iss string `json:"iss"`
		Cnf struct {
			JWK json.RawMessage `json:"jwk"`
		} `json:"cnf"`
		Iat, Exp int64
	}
	if err := json.Unmarshal(payload, &dc); err != nil {
		return 2, err
	}
	var sc struct {
		Iss string `json:"iss"`
		Iat int64  `json:"iat"`
	}
	if err := json.Unmarshal(msg.Payload(), &sc); err != nil {
		return 2, err
	}
	switch {
	case dhdr.Type() != "pap-delegation+jwt":
		return 2, fmt.Errorf("delegation typ %q", dhdr.Type())
	case dc.Iss != sc.Iss:
		return 2, fmt.Errorf("delegation iss %q, token iss %q", dc.Iss, sc.Iss)
	case !now.Before(time.Unix(dc.Exp, 0)):
		return 2, errors.New("delegation expired")
	case dc.Exp-dc.Iat > 24*60*60:
		return 2, errors.New("delegation lifetime over 24h")
	}

	// Step 3: cnf.jwk verifies the Session JWT, and kid is its thumbprint.
	cnf, err := jwk.ParseKey(dc.Cnf.JWK)
	if err != nil {
		return 3, err
	}
	if private, err := jwk.IsPrivateKey(cnf); err != nil || private {
		return 3, errors.New("cnf.jwk has private members")
	}
	if _, err := jws.Verify([]byte(token), jws.WithKey(jwa.ES256, cnf)); err != nil {
		return 3, err
	}
	if tp, _ := thumbprint(cnf); hdr.KeyID() != tp {
		return 3, fmt.Errorf("kid %q, thumbprint %q", hdr.KeyID(), tp)
	}

	// Step 4: signed before the delegation expired.
	if sc.Iat > dc.Exp {
		return 4, errors.New("token iat after delegation exp")
	}
	return 0, nil
}

func TestAgentDocuments(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	require.Regexp(t, `^https://agent\.test:\d+/agent\.json$`, a.ClientID)
	require.Equal(t, a.URL("/jwks.json"), a.JWKSURI)

	resp, body := fetch(t, a, a.ClientID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "agent.test", resp.TLS.ServerName)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Equal(t, map[string]any{
		"client_id":                  a.ClientID,
		"client_name":                "Test Agent",
		"jwks_uri":                   a.JWKSURI,
		"redirect_uris":              []any{a.URL("/callback")},
		"token_endpoint_auth_method": "private_key_jwt",
		"extensions":                 map[string]any{},
	}, doc)
	require.Equal(t, doc, a.Metadata())

	resp, body = fetch(t, a, a.JWKSURI)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/jwk-set+json", resp.Header.Get("Content-Type"))
	set, err := jwk.Parse(body)
	require.NoError(t, err)
	require.Equal(t, 2, set.Len())
	for alg, kty := range map[string]string{"ES256": "EC", "PS384": "RSA"} {
		priv, kid := a.Key(alg)
		k, ok := set.LookupKeyID(kid)
		require.True(t, ok, alg)
		require.Equal(t, kty, k.KeyType().String())
		require.Equal(t, alg, k.Algorithm().String())
		require.Equal(t, "sig", k.KeyUsage())
		require.Equal(t, JWKThumbprint(t, priv.Public()), kid)
		tp, err := thumbprint(k)
		require.NoError(t, err)
		require.Equal(t, kid, tp)
		private, err := jwk.IsPrivateKey(k)
		require.NoError(t, err)
		require.False(t, private, alg)
	}
	for _, k := range a.JWKS()["keys"].([]any) {
		for _, member := range []string{"d", "p", "q", "dp", "dq", "qi"} {
			require.NotContains(t, k, member)
		}
	}

	// Hits counts every request for a path.
	require.Equal(t, 1, a.Hits("/agent.json"))
	require.Equal(t, 1, a.Hits("/jwks.json"))
	fetch(t, a, a.ClientID)
	require.Equal(t, 2, a.Hits("/agent.json"))
	resp, _ = fetch(t, a, a.URL("/nope"))
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, 1, a.Hits("/nope"))
}

func TestAgentSessionJWT(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	set := fetchJWKS(t, a)
	for _, alg := range []string{"ES256", "PS384"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			before := time.Now().Truncate(time.Second)
			tok := a.SessionJWT(t, SessionClaims{
				Aud:     testAud,
				AgentID: "agt_travel",
				Method:  http.MethodPost,
				URL:     "https://api.company.test/orders/ord_1/exchanges?x=1#top",
			}, SessionOptions{DelegationAlg: alg})
			step, err := verifySession(tok, set, time.Now())
			require.NoError(t, err)
			require.Zero(t, step)

			// jwx reads it as a JWT with the expected claims.
			parsed, err := jwt.Parse([]byte(tok), jwt.WithVerify(false), jwt.WithValidate(true),
				jwt.WithAudience(testAud), jwt.WithIssuer(a.ClientID))
			require.NoError(t, err)
			require.Equal(t, "usr_test", parsed.Subject())

			hdr, claims := parts(t, tok)
			require.Equal(t, "poppy-session+jwt", hdr["typ"])
			require.Equal(t, "ES256", hdr["alg"])
			require.Equal(t, JWKThumbprint(t, a.DelegatedKey("usr_test").Public()), hdr["kid"])
			require.Len(t, hdr, 4)
			id := regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)
			require.Regexp(t, id, claims["sid"])
			require.Regexp(t, id, claims["jti"])
			iat := time.Unix(int64(claims["iat"].(float64)), 0)
			require.WithinRange(t, iat, before, time.Now())
			delete(claims, "sid")
			delete(claims, "jti")
			delete(claims, "iat")
			require.Equal(t, map[string]any{
				"iss":      a.ClientID,
				"aud":      testAud,
				"sub":      "usr_test",
				"agent_id": "agt_travel",
				"htm":      "POST",
				"htu":      "https://api.company.test/orders/ord_1/exchanges",
			}, claims)

			dh, dc := parts(t, hdr["pap_dlg"].(string))
			_, kid := a.Key(alg)
			require.Equal(t, map[string]any{"typ": "pap-delegation+jwt", "alg": alg, "kid": kid}, dh)
			require.Equal(t, a.ClientID, dc["iss"])
			require.Regexp(t, id, dc["jti"])
			require.Equal(t, float64(3600), dc["exp"].(float64)-dc["iat"].(float64))
			require.WithinRange(t, time.Unix(int64(dc["iat"].(float64)), 0), before.Add(-time.Minute), time.Now().Add(-time.Minute))
			cnf := dc["cnf"].(map[string]any)["jwk"].(map[string]any)
			require.ElementsMatch(t, []string{"kty", "crv", "x", "y"}, keysOf(cnf))
			require.Len(t, dc, 5, "nothing about the User or Company")
		})
	}
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestAgentSessionDefects: each option breaks exactly the check it names,
// and the rest of the token stays valid.
func TestAgentSessionDefects(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	set := fetchJWKS(t, a)
	_, esKid := a.Key("ES256")
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		claims SessionClaims
		opts   SessionOptions
		step   int // the spec 5.2 step that fails, 0 for none
		check  func(t *testing.T, hdr, claims map[string]any, tok string)
	}{
		{name: "valid"},
		{name: "PS384 delegation", opts: SessionOptions{DelegationAlg: "PS384"}},
		{
			name: "sign direct", opts: SessionOptions{SignDirect: true}, step: 1,
			check: func(t *testing.T, hdr, _ map[string]any, tok string) {
				require.NotContains(t, hdr, "pap_dlg")
				require.Equal(t, esKid, hdr["kid"])
				k, _ := set.LookupKeyID(esKid)
				_, err := jws.Verify([]byte(tok), jws.WithKey(jwa.ES256, k))
				require.NoError(t, err, "signed with the jwks key")
			},
		},
		{
			name: "no delegation", opts: SessionOptions{NoDelegation: true}, step: 1,
			check: func(t *testing.T, hdr, _ map[string]any, tok string) {
				require.NotContains(t, hdr, "pap_dlg")
				dk := a.DelegatedKey("usr_test")
				require.Equal(t, JWKThumbprint(t, dk.Public()), hdr["kid"])
				_, err := jws.Verify([]byte(tok), jws.WithKey(jwa.ES256, dk.Public()))
				require.NoError(t, err)
			},
		},
		{
			name: "signed with other key", opts: SessionOptions{SignWithOtherKey: true}, step: 3,
			check: func(t *testing.T, hdr, _ map[string]any, _ string) {
				require.Equal(t, JWKThumbprint(t, a.DelegatedKey("usr_test").Public()), hdr["kid"])
			},
		},
		{
			name: "delegation by unknown ES256 key", opts: SessionOptions{DelegationSignedByUnknownKey: true}, step: 1,
			check: func(t *testing.T, hdr, _ map[string]any, _ string) {
				dh, _ := parts(t, hdr["pap_dlg"].(string))
				_, ok := set.LookupKeyID(dh["kid"].(string))
				require.False(t, ok)
				require.Equal(t, "ES256", dh["alg"])
			},
		},
		{
			name: "delegation by unknown PS384 key", opts: SessionOptions{DelegationAlg: "PS384", DelegationSignedByUnknownKey: true}, step: 1,
			check: func(t *testing.T, hdr, _ map[string]any, _ string) {
				dh, _ := parts(t, hdr["pap_dlg"].(string))
				_, ok := set.LookupKeyID(dh["kid"].(string))
				require.False(t, ok)
				require.Equal(t, "PS384", dh["alg"])
			},
		},
		{
			name: "delegation by unknown key under a known kid", step: 1,
			opts: SessionOptions{DelegationSignedByUnknownKey: true,
				MutateDelegationHeader: func(h map[string]any) { h["kid"] = esKid }},
			check: func(t *testing.T, hdr, _ map[string]any, _ string) {
				k, _ := set.LookupKeyID(esKid)
				_, err := jws.Verify([]byte(hdr["pap_dlg"].(string)), jws.WithKey(jwa.ES256, k))
				require.Error(t, err)
			},
		},
		{
			name: "delegation lifetime 25h", opts: SessionOptions{DelegationLifetime: 25 * time.Hour}, step: 2,
			check: func(t *testing.T, hdr, _ map[string]any, _ string) {
				_, dc := parts(t, hdr["pap_dlg"].(string))
				require.Equal(t, float64(25*3600), dc["exp"].(float64)-dc["iat"].(float64))
			},
		},
		{name: "delegation expired", opts: SessionOptions{DelegationIAT: time.Now().Add(-2 * time.Hour)}, step: 2},
		{
			name: "delegation typ", step: 2,
			opts: SessionOptions{MutateDelegationHeader: func(h map[string]any) { h["typ"] = "JWT" }},
		},
		{
			name: "delegation iss", step: 2,
			opts: SessionOptions{MutateDelegationClaims: func(c map[string]any) { c["iss"] = "https://other.test/agent.json" }},
		},
		{
			name: "private member in cnf.jwk", step: 3,
			opts: SessionOptions{MutateDelegationClaims: func(c map[string]any) {
				c["cnf"].(map[string]any)["jwk"].(map[string]any)["d"] = "AAAA"
			}},
		},
		{
			name: "kid not the thumbprint", step: 3,
			opts: SessionOptions{MutateHeader: func(h map[string]any) { h["kid"] = esKid }},
		},
		{name: "iat after delegation exp", claims: SessionClaims{IAT: time.Now().Add(2 * time.Hour)}, step: 4},
		{
			name: "given delegated key", opts: SessionOptions{DelegatedKey: other},
			check: func(t *testing.T, hdr, _ map[string]any, _ string) {
				require.Equal(t, JWKThumbprint(t, other.Public()), hdr["kid"])
			},
		},
		{
			name: "no jti", opts: SessionOptions{MutateClaims: func(c map[string]any) { delete(c, "jti") }},
			check: func(t *testing.T, _, claims map[string]any, _ string) { require.NotContains(t, claims, "jti") },
		},
		{
			name: "aud array", opts: SessionOptions{MutateClaims: func(c map[string]any) { c["aud"] = []string{testAud} }},
			check: func(t *testing.T, _, claims map[string]any, _ string) {
				require.Equal(t, []any{testAud}, claims["aud"])
			},
		},
		{
			name: "typ JWT", opts: SessionOptions{MutateHeader: func(h map[string]any) { h["typ"] = "JWT" }},
			check: func(t *testing.T, hdr, _ map[string]any, _ string) { require.Equal(t, "JWT", hdr["typ"]) },
		},
		{
			// The header lies about alg; the signature is still ES256.
			name: "alg ES384", opts: SessionOptions{MutateHeader: func(h map[string]any) { h["alg"] = "ES384" }},
			check: func(t *testing.T, hdr, _ map[string]any, _ string) { require.Equal(t, "ES384", hdr["alg"]) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.claims.Aud, tc.claims.URL = testAud, "https://api.company.test/x"
			tok := a.SessionJWT(t, tc.claims, tc.opts)
			step, err := verifySession(tok, set, time.Now())
			require.Equal(t, tc.step, step, "error: %v", err)
			if tc.step == 0 {
				require.NoError(t, err)
			}
			if tc.check != nil {
				hdr, claims := parts(t, tok)
				tc.check(t, hdr, claims, tok)
			}
		})
	}
}

func TestAgentSign(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	set := fetchJWKS(t, a)

	// The access token and ath of RFC 9449's examples, also spec 5.2's.
	const token = "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"
	req, err := http.NewRequest(http.MethodPost, "https://api.company.test/orders?page=2#frag", nil)
	require.NoError(t, err)
	a.Sign(t, req, SessionClaims{Aud: testAud, AccessToken: token, Sub: "usr_a"}, SessionOptions{})
	require.Equal(t, "Bearer "+token, req.Header.Get("Authorization"))
	tok := req.Header.Get("Poppy-Session")
	step, err := verifySession(tok, set, time.Now())
	require.NoError(t, err)
	require.Zero(t, step)
	_, claims := parts(t, tok)
	require.Equal(t, "POST", claims["htm"])
	require.Equal(t, "https://api.company.test/orders", claims["htu"])
	require.Equal(t, "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo", claims["ath"])
	require.Equal(t, "usr_a", claims["sub"])

	req, err = http.NewRequest(http.MethodGet, "https://api.company.test/orders?page=2", nil)
	require.NoError(t, err)
	a.Sign(t, req, SessionClaims{Aud: testAud, Raw: true}, SessionOptions{})
	require.Empty(t, req.Header.Get("Authorization"))
	_, claims = parts(t, req.Header.Get("Poppy-Session"))
	require.NotContains(t, claims, "ath")
	require.Equal(t, "GET", claims["htm"])
	require.Equal(t, "https://api.company.test/orders?page=2", claims["htu"])
}

// TestAgentDelegatedKeys: one delegated key per User ID, reused across
// calls like a real agent; fresh sid, jti and delegation each time.
func TestAgentDelegatedKeys(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	sign := func(sub string) (map[string]any, map[string]any) {
		hdr, claims := parts(t, a.SessionJWT(t, SessionClaims{Aud: testAud, URL: "https://api.company.test/", Sub: sub}, SessionOptions{}))
		_, dc := parts(t, hdr["pap_dlg"].(string))
		return hdr, map[string]any{"sid": claims["sid"], "jti": claims["jti"], "dlg_jti": dc["jti"]}
	}
	h1, c1 := sign("usr_a")
	h2, c2 := sign("usr_a")
	h3, _ := sign("usr_b")
	require.Equal(t, h1["kid"], h2["kid"])
	require.NotEqual(t, h1["kid"], h3["kid"])
	for k := range c1 {
		require.NotEqual(t, c1[k], c2[k], k)
	}
}

func TestAgentRotateKeys(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	claims := SessionClaims{Aud: testAud, URL: "https://api.company.test/"}
	_, esKid := a.Key("ES256")
	_, psKid := a.Key("PS384")
	old := a.SessionJWT(t, claims, SessionOptions{})
	oldPS := a.SessionJWT(t, claims, SessionOptions{DelegationAlg: "PS384"})

	a.RotateKeys()
	_, esKid2 := a.Key("ES256")
	_, psKid2 := a.Key("PS384")
	require.NotEqual(t, esKid, esKid2)
	require.NotEqual(t, psKid, psKid2)
	set := fetchJWKS(t, a)
	require.Equal(t, 2, set.Len())
	for _, kid := range []string{esKid2, psKid2} {
		_, ok := set.LookupKeyID(kid)
		require.True(t, ok)
	}
	for _, tok := range []string{old, oldPS} {
		step, err := verifySession(tok, set, time.Now())
		require.Equal(t, 1, step, "old delegation: %v", err)
	}
	step, err := verifySession(a.SessionJWT(t, claims, SessionOptions{}), set, time.Now())
	require.NoError(t, err)
	require.Zero(t, step)
}

func TestAgentOverrides(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)

	m := a.Metadata()
	m["jwks_uri"] = "http://agent.test/jwks.json"
	m["client_name"] = "changed locally"
	require.Equal(t, "Test Agent", a.Metadata()["client_name"], "Metadata returns a copy")
	a.SetMetadata(m)
	_, body := fetch(t, a, a.ClientID)
	require.JSONEq(t, mustJSON(t, m), string(body))

	a.SetJWKS("not json")
	_, body = fetch(t, a, a.JWKSURI)
	require.Equal(t, "not json", string(body))
	require.Nil(t, a.JWKS())
	a.SetJWKS(map[string]any{"keys": []any{}})
	_, body = fetch(t, a, a.JWKSURI)
	require.JSONEq(t, `{"keys":[]}`, string(body))

	a.SetHeader("/jwks.json", "Cache-Control", "max-age=60")
	a.SetHeader("/agent.json", "Content-Type", "text/html")
	resp, _ := fetch(t, a, a.JWKSURI)
	require.Equal(t, "max-age=60", resp.Header.Get("Cache-Control"))
	require.Equal(t, "application/jwk-set+json", resp.Header.Get("Content-Type"))
	resp, _ = fetch(t, a, a.ClientID)
	require.Equal(t, "text/html", resp.Header.Get("Content-Type"))
	a.SetHeader("/agent.json", "Content-Type", "")
	resp, _ = fetch(t, a, a.ClientID)
	require.Empty(t, resp.Header.Values("Content-Type"))

	a.Serve("/agent.json", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://agent.test/elsewhere.json", http.StatusFound)
	})
	resp, _ = fetch(t, a, a.ClientID)
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "https://agent.test/elsewhere.json", resp.Header.Get("Location"))
	a.Serve("/agent.json", nil)
	resp, _ = fetch(t, a, a.ClientID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 5, a.Hits("/agent.json"), "overridden responses count too")

	// An oversized body on any path.
	big := strings.Repeat("x", 1<<20)
	a.Serve("/big", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, big) })
	_, body = fetch(t, a, a.URL("/big"))
	require.Len(t, body, 1<<20)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}

// TestAgentSignJWT: SignJWT signs the header as given, so it can carry an
// alg that disagrees with the signature.
func TestAgentSignJWT(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tok := SignJWT(t, "PS384", key, map[string]any{"alg": "RS256", "typ": 7}, map[string]any{"iss": "x"})
	hdr, claims := parts(t, tok)
	require.Equal(t, map[string]any{"alg": "RS256", "typ": float64(7)}, hdr)
	require.Equal(t, map[string]any{"iss": "x"}, claims)
	seg := strings.Split(tok, ".")
	sig, err := base64.RawURLEncoding.DecodeString(seg[2])
	require.NoError(t, err)
	v, err := jws.NewVerifier(jwa.PS384)
	require.NoError(t, err)
	require.NoError(t, v.Verify([]byte(seg[0]+"."+seg[1]), sig, &key.PublicKey))
}

// TestAgentConcurrent: signing, rotating and serving at once (run with
// -race).
func TestAgentConcurrent(t *testing.T) {
	t.Parallel()
	a := startTestAgent(t)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			sub := fmt.Sprintf("usr_%d", i%2)
			if _, err := a.sessionJWT(SessionClaims{Aud: testAud, URL: "https://api.company.test/", Sub: sub}, SessionOptions{}); err != nil {
				errs <- err
			}
			resp, err := a.Client().Get(a.JWKSURI)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			a.SetHeader("/jwks.json", "Cache-Control", "no-store")
			_ = a.Hits("/jwks.json")
		})
	}
	wg.Go(a.RotateKeys)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 8, a.Hits("/jwks.json"))
}
