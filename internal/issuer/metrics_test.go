package issuer_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/samples"
)

// metricValues scrapes the issuer's metrics: every sample, keyed by name
// and labels as exposed.
func (s *stormline) metricValues(t *testing.T) map[string]float64 {
	t.Helper()
	resp := s.env.Do(t, http.MethodGet, s.env.PublicURL("/metrics"), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	return samples.Parse(t, resp.Body)
}

// TestSignInMetrics: sign-ins by result, tokens by grant type, a refresh
// token's reuse and a revocation are counted, every series exported at 0
// before anything happened.
func TestSignInMetrics(t *testing.T) {
	t.Parallel()
	s := setup(t)
	series := []string{
		`poppyhost_sign_ins_total{result="signed_in"}`, `poppyhost_sign_ins_total{result="refused"}`,
		`poppyhost_sign_ins_total{result="locked"}`, `poppyhost_sign_ins_total{result="busy"}`,
		`poppyhost_sign_ins_total{result="error"}`,
		`poppyhost_token_grants_total{grant_type="authorization_code"}`,
		`poppyhost_token_grants_total{grant_type="device_code"}`,
		`poppyhost_token_grants_total{grant_type="refresh_token"}`,
		`poppyhost_token_revocations_total`, `poppyhost_refresh_token_reuse_total`,
	}
	before := s.metricValues(t)
	for _, name := range series {
		v, ok := before[name]
		require.True(t, ok, "%s is not exported before anything happened", name)
		require.Zero(t, v, name)
	}

	// A wrong password, then a sign-in.
	b := s.env.Browser(t)
	page := b.Get(s.conf.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {"not " + testPassword}})
	require.Equal(t, http.StatusBadRequest, page.Status, page.Body)
	first := s.tokSignIn(t)["refresh_token"].(string)
	// A refresh, the first refresh token used again, which revokes the
	// grant, and a revocation.
	resp := s.tokRefresh(t, first, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	second := resp.JSON(t)["refresh_token"].(string)
	tokError(t, s.tokRefresh(t, first, nil), http.StatusBadRequest, "invalid_grant")
	form := s.tokAuthed(t, nil)
	form.Set("token", second)
	resp = s.env.Do(t, http.MethodPost, s.issuer+"/oauth/revoke", form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	after := s.metricValues(t)
	for name, want := range map[string]float64{
		`poppyhost_sign_ins_total{result="signed_in"}`:                  1,
		`poppyhost_sign_ins_total{result="refused"}`:                    1,
		`poppyhost_token_grants_total{grant_type="authorization_code"}`: 1,
		`poppyhost_token_grants_total{grant_type="refresh_token"}`:      1,
		`poppyhost_token_grants_total{grant_type="device_code"}`:        0,
		`poppyhost_refresh_token_reuse_total`:                           1,
		`poppyhost_token_revocations_total`:                             1,
	} {
		require.Equal(t, want, after[name], name)
	}
}
