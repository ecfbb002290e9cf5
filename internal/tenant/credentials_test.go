package tenant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// listCredentials GETs a list at url with authorization, decodes the
// member named member, and checks that no secret of secrets appears in it
// and that no entry has a member other than a credential's.
func listCredentials(t *testing.T, env *kit, url, authorization, member string, secrets ...string) map[int64]tenant.Credential {
	t.Helper()
	resp := env.Do(t, http.MethodGet, url, nil, "Authorization", authorization)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	for _, s := range secrets {
		require.NotContains(t, string(resp.Body), s, "a secret is listed")
	}
	var raw map[string][]map[string]any
	require.NoError(t, json.Unmarshal(resp.Body, &raw))
	for _, e := range raw[member] {
		for k := range e {
			require.Contains(t, []string{"id", "name", "prefix", "created_at", "last_used_at", "revoked_at"}, k)
		}
	}
	var body map[string][]tenant.Credential
	require.NoError(t, json.Unmarshal(resp.Body, &body))
	out := map[int64]tenant.Credential{}
	for _, c := range body[member] {
		out[c.ID] = c
	}
	return out
}

// setLastUsed moves a credential's recorded last use to at, as if it had
// last been used then.
func setLastUsed(t *testing.T, env *kit, table string, id int64, ago time.Duration) {
	t.Helper()
	_, err := env.Pool.Exec(context.Background(), `UPDATE `+table+` SET last_used_at = now() - $2::interval WHERE id = $1`,
		id, fmt.Sprintf("%d seconds", int(ago.Seconds())))
	require.NoError(t, err)
}

// TestOperatorTokenList lists operator tokens with their prefixes and
// last use, never their secrets; a use is recorded at the first request
// and then at most once a minute; a revoked token is refused at once, by
// this replica and by any other.
func TestOperatorTokenList(t *testing.T) {
	t.Parallel()
	env := setup(t)
	resp := env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", `{"name": "ci"}`)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	var created struct {
		tenant.Credential
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &created))
	require.True(t, strings.HasPrefix(created.Token, tenant.OperatorTokenPrefix))
	require.Equal(t, created.Token[:len(tenant.OperatorTokenPrefix)+8], created.Prefix)

	list := func() map[int64]tenant.Credential {
		return listCredentials(t, env, env.PublicURL("/admin/v1/operator-tokens"), "Bearer "+adminToken,
			"operator_tokens", created.Token, adminToken)
	}
	tokens := list()
	require.Len(t, tokens, 2, "the bootstrap token and ci")
	ci := tokens[created.ID]
	require.Equal(t, "ci", ci.Name)
	require.Equal(t, created.Prefix, ci.Prefix)
	require.Nil(t, ci.LastUsedAt, "not used yet")

	use := func() {
		t.Helper()
		resp := env.Do(t, http.MethodGet, env.PublicURL("/admin/v1/companies"), nil, bearer(created.Token)...)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	use()
	first := list()[created.ID].LastUsedAt
	require.NotNil(t, first, "the first use is recorded")
	use()
	use()
	require.Equal(t, first, list()[created.ID].LastUsedAt, "uses within a minute are not written")
	setLastUsed(t, env, "operator_tokens", created.ID, 2*time.Minute)
	moved := list()[created.ID].LastUsedAt
	use()
	again := list()[created.ID].LastUsedAt
	require.True(t, again.After(*moved), "a use a minute after the last recorded one is recorded")

	other := tenant.NewStore(env.Pool) // another replica's store
	_, err := other.OperatorTokenFor(context.Background(), created.Token)
	require.NoError(t, err)
	resp = env.Admin(t, http.MethodDelete, fmt.Sprintf("/admin/v1/operator-tokens/%d", created.ID), nil)
	require.Equal(t, http.StatusNoContent, resp.Status)
	requireError(t, env.Do(t, http.MethodGet, env.PublicURL("/admin/v1/companies"), nil, bearer(created.Token)...),
		http.StatusUnauthorized, "unauthorized")
	_, err = other.OperatorTokenFor(context.Background(), created.Token)
	require.ErrorIs(t, err, tenant.ErrNotFound, "another replica refuses it at once")
	require.NotNil(t, list()[created.ID].RevokedAt)
}

// TestCompanyAPIKeyList: a Company lists and revokes its own API keys
// through the Company API, never another Company's; the operator does the
// same for any Company's through the admin API; no list shows a secret;
// a revoked key is refused at once.
func TestCompanyAPIKeyList(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", "")
	createCompany(t, env, "beta", "beta.example", "")
	acmeID, acmeKey := createAPIKey(t, env, "acme")
	spareID, spareKey := createAPIKey(t, env, "acme")
	betaID, betaKey := createAPIKey(t, env, "beta")
	secrets := []string{acmeKey, spareKey, betaKey}

	// Acme sees its two keys, with prefixes, and Beta's not.
	keys := listCredentials(t, env, env.PublicURL("/company/v1/api-keys"), "Bearer "+acmeKey, "api_keys", secrets...)
	require.Len(t, keys, 2)
	require.Equal(t, acmeKey[:len(tenant.APIKeyPrefix)+8], keys[acmeID].Prefix)
	require.Equal(t, spareKey[:len(tenant.APIKeyPrefix)+8], keys[spareID].Prefix)
	require.NotNil(t, keys[acmeID].LastUsedAt, "the key just used")
	require.Nil(t, keys[spareID].LastUsedAt)
	require.NotContains(t, keys, betaID)

	// Acme cannot revoke Beta's key, through either route.
	requireError(t, companyAPI(t, env, http.MethodDelete, fmt.Sprintf("/api-keys/%d", betaID), acmeKey), http.StatusNotFound, "not_found")
	requireError(t, env.Admin(t, http.MethodDelete, fmt.Sprintf("/admin/v1/companies/acme/api-keys/%d", betaID), nil),
		http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", betaKey).Status)

	// Acme revokes its spare key: refused at once, here and by another
	// replica's store.
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", spareKey).Status)
	require.Equal(t, http.StatusNoContent, companyAPI(t, env, http.MethodDelete, fmt.Sprintf("/api-keys/%d", spareID), acmeKey).Status)
	requireError(t, companyAPI(t, env, http.MethodGet, "/company", spareKey), http.StatusUnauthorized, "unauthorized")
	_, _, err := tenant.NewStore(env.Pool).APIKeyFor(context.Background(), spareKey)
	require.ErrorIs(t, err, tenant.ErrNotFound)
	keys = listCredentials(t, env, env.PublicURL("/admin/v1/companies/acme/api-keys"), "Bearer "+adminToken, "api_keys", secrets...)
	require.NotNil(t, keys[spareID].RevokedAt)
	require.Nil(t, keys[acmeID].RevokedAt)

	// A key's use is written at most once a minute.
	first := keys[acmeID].LastUsedAt
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", acmeKey).Status)
	keys = listCredentials(t, env, env.PublicURL("/admin/v1/companies/acme/api-keys"), "Bearer "+adminToken, "api_keys", secrets...)
	require.Equal(t, first, keys[acmeID].LastUsedAt)

	// A key may revoke itself; it is then refused.
	require.Equal(t, http.StatusNoContent, companyAPI(t, env, http.MethodDelete, fmt.Sprintf("/api-keys/%d", acmeID), acmeKey).Status)
	requireError(t, companyAPI(t, env, http.MethodGet, "/api-keys", acmeKey), http.StatusUnauthorized, "unauthorized")
	for _, id := range []string{"0", "-1", "x", "99999999999999999999"} {
		requireError(t, companyAPI(t, env, http.MethodDelete, "/api-keys/"+id, betaKey), http.StatusNotFound, "not_found")
	}
}
