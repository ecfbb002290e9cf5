package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/json"
	"math/big"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// verifyES256 checks a compact JWS with a public JWK and returns its
// header and claims.
func verifyES256(t *testing.T, jws string, jwk map[string]any) (map[string]any, map[string]any) {
	t.Helper()
	parts := strings.Split(jws, ".")
	require.Len(t, parts, 3)
	x, _ := b64.DecodeString(jwk["x"].(string))
	y, _ := b64.DecodeString(jwk["y"].(string))
	pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
	sig, err := b64.DecodeString(parts[2])
	require.NoError(t, err)
	require.Len(t, sig, 64)
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	require.True(t, ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])), "signature")
	var h, c map[string]any
	hb, _ := b64.DecodeString(parts[0])
	cb, _ := b64.DecodeString(parts[1])
	require.NoError(t, json.Unmarshal(hb, &h))
	require.NoError(t, json.Unmarshal(cb, &c))
	return h, c
}

// A Session JWT verifies as spec 5.2 says: the delegation with the key in
// jwks_uri, then the JWT with the delegated key, with every claim.
func TestSessionJWTFollowsSpec52(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	jwt, err := s.sessionJWT("POST", "https://api.example.com/orders/1/exchanges?x=1#f", "tok")
	require.NoError(t, err)

	parts := strings.Split(jwt, ".")
	hb, _ := b64.DecodeString(parts[0])
	var h map[string]any
	require.NoError(t, json.Unmarshal(hb, &h))
	require.Equal(t, "poppy-session+jwt", h["typ"])
	require.Equal(t, "ES256", h["alg"])

	jwks := f.agent.JWKS()["keys"].([]any)[0].(map[string]any)
	dh, dc := verifyES256(t, h["pap_dlg"].(string), jwks)
	require.Equal(t, "pap-delegation+jwt", dh["typ"])
	require.Equal(t, jwks["kid"], dh["kid"])
	require.Equal(t, f.agent.ClientID(), dc["iss"])
	require.LessOrEqual(t, dc["exp"].(float64)-dc["iat"].(float64), 86400.0)
	require.NotContains(t, dc, "sub", "nothing about the User in a delegation")
	cnf := dc["cnf"].(map[string]any)["jwk"].(map[string]any)
	require.NotContains(t, cnf, "d")

	_, claims := verifyES256(t, jwt, cnf)
	require.Equal(t, f.agent.ClientID(), claims["iss"])
	require.Equal(t, c.Issuer, claims["aud"])
	require.Equal(t, s.SID, claims["sid"])
	require.Equal(t, s.UserID, claims["sub"])
	require.Equal(t, "POST", claims["htm"])
	require.Equal(t, "https://api.example.com/orders/1/exchanges", claims["htu"])
	require.Equal(t, tokenHash("tok"), claims["ath"])
	require.NotEmpty(t, claims["jti"])

	_, claims = verifyES256(t, mustJWT(t, s, ""), cnf)
	require.NotContains(t, claims, "ath", "no ath without an access token")
}

func mustJWT(t *testing.T, s *Session, token string) string {
	t.Helper()
	j, err := s.sessionJWT(http.MethodGet, "https://example.com/x", token)
	require.NoError(t, err)
	return j
}

// Each User ID has its own delegated key (spec 5.2); a User keeps one
// User ID per Company (spec 5.1).
func TestDelegatedKeysPerUserID(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	k1, err := f.agent.delegated("usr_a")
	require.NoError(t, err)
	k2, err := f.agent.delegated("usr_b")
	require.NoError(t, err)
	again, err := f.agent.delegated("usr_a")
	require.NoError(t, err)
	require.NotEqual(t, k1.kid, k2.kid)
	require.Equal(t, k1.kid, again.kid)
	require.Equal(t, f.agent.userID("https://a"), f.agent.userID("https://a"))
	require.NotEqual(t, f.agent.userID("https://a"), f.agent.userID("https://b"))
}

// The agent is written from the spec: nothing of poppyhost's internal
// packages is among its dependencies.
func TestImportsNothingInternal(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".", "../cmd/poppy-agent").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, dep := range strings.Fields(string(out)) {
		require.False(t, strings.HasPrefix(dep, "github.com/poppyhost/poppyhost/internal/"), "imports %s", dep)
	}
	require.Contains(t, string(out), "github.com/poppyhost/poppyhost/agent")
}
