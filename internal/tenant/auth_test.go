package tenant_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// adminRoutes are every route under /admin/v1, with a body where one is
// needed. Each must refuse a request without a valid operator token.
var adminRoutes = []struct {
	method, path string
	body         any
}{
	{http.MethodGet, "/admin/v1/companies", nil},
	{http.MethodPost, "/admin/v1/companies", minimalBody("intruder", "intruder.example")},
	{http.MethodGet, "/admin/v1/companies/acme", nil},
	{http.MethodPatch, "/admin/v1/companies/acme", `{"organization": {"name": "Pwned"}}`},
	{http.MethodDelete, "/admin/v1/companies/acme", nil},
	{http.MethodPost, "/admin/v1/companies/acme/accounts", `{"username": "mallory", "password": "password123"}`},
	{http.MethodPost, "/admin/v1/companies/acme/api-keys", nil},
	{http.MethodGet, "/admin/v1/companies/acme/api-keys", nil},
	{http.MethodDelete, "/admin/v1/companies/acme/api-keys/1", nil},
	{http.MethodPost, "/admin/v1/operator-tokens", nil},
	{http.MethodDelete, "/admin/v1/operator-tokens/1", nil},
	{http.MethodGet, "/admin/v1/operator-tokens", nil},
	{http.MethodGet, "/admin/v1/audit", nil},
	{http.MethodGet, "/admin/v1/companies/acme/audit", nil},
	{http.MethodGet, "/admin/v1/companies/nosuch", nil},
	{http.MethodGet, "/admin/v1/nosuch", nil},
}

func TestAdminRequiresOperatorToken(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", "")
	_, apiKey := createAPIKey(t, env, "acme")

	credentials := []struct {
		name    string
		headers []string
	}{
		{"no token", nil},
		{"empty bearer", []string{"Authorization", "Bearer "}},
		{"wrong token", bearer("test-admin-token-0123456788")},
		{"token prefix", bearer(adminToken[:len(adminToken)-1])},
		{"token with suffix", bearer(adminToken + "x")},
		{"basic scheme", []string{"Authorization", "Basic " + adminToken}},
		{"token without scheme", []string{"Authorization", adminToken}},
		{"token in another header", []string{"X-Admin-Token", adminToken}},
		{"company API key", bearer(apiKey)},
	}
	t.Run("rows", func(t *testing.T) {
		for _, c := range credentials {
			for _, r := range adminRoutes {
				t.Run(c.name+" "+r.method+" "+r.path, func(t *testing.T) {
					t.Parallel()
					resp := env.Do(t, r.method, env.PublicURL(r.path), r.body, c.headers...)
					requireError(t, resp, http.StatusUnauthorized, "unauthorized")
					require.Equal(t, `Bearer realm="poppyhost-admin"`, resp.Header.Get("WWW-Authenticate"))
				})
			}
		}
	})

	// Nothing changed.
	resp := env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, "Company acme", orgName(t, resp))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM companies`))
	require.Zero(t, count(t, env, `SELECT count(*) FROM accounts`))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM company_api_keys WHERE revoked_at IS NULL`))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM operator_tokens WHERE revoked_at IS NULL`))
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", apiKey).Status)

	// The scheme name is case-insensitive (RFC 9110 §11.1).
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		resp := env.Do(t, http.MethodGet, env.PublicURL("/admin/v1/companies"), nil,
			"Authorization", scheme+" "+adminToken)
		require.Equal(t, http.StatusOK, resp.Status, "%s: %s", scheme, resp.Body)
	}
}

func TestOperatorTokens(t *testing.T) {
	t.Parallel()
	env := setup(t)
	bootstrapStoredHashed(t, env)

	resp := env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", `{"name": "ci"}`)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	var created struct {
		ID        int64  `json:"id"`
		Name      string `json:"name"`
		Token     string `json:"token"`
		CreatedAt string `json:"created_at"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &created))
	require.Equal(t, "ci", created.Name)
	require.NotEmpty(t, created.CreatedAt)
	require.True(t, strings.HasPrefix(created.Token, "pho_"), created.Token)
	require.Greater(t, len(created.Token), 40, "the token must carry enough randomness")

	// A second token is different.
	resp2 := env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", nil)
	require.Equal(t, http.StatusCreated, resp2.Status, "body: %s", resp2.Body)
	require.NotContains(t, string(resp2.Body), created.Token)

	// The new token works on the admin API, and not as a Company API key.
	asOperator := func(method, path string, body any) *peers.Response {
		return env.Do(t, method, env.PublicURL(path), body, bearer(created.Token)...)
	}
	require.Equal(t, http.StatusOK, asOperator(http.MethodGet, "/admin/v1/companies", nil).Status)
	r := asOperator(http.MethodPost, "/admin/v1/companies", minimalBody("acme", "acme.example"))
	require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Body)
	requireError(t, companyAPI(t, env, http.MethodGet, "/company", created.Token), http.StatusUnauthorized, "unauthorized")

	// It is stored as a hash only.
	var hash []byte
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT token_hash FROM operator_tokens WHERE id = $1`, created.ID).Scan(&hash))
	sum := sha256.Sum256([]byte(created.Token))
	require.Equal(t, sum[:], hash)
	require.Zero(t, count(t, env, `SELECT count(*) FROM operator_tokens t WHERE strpos(row_to_json(t)::text, $1) > 0`, created.Token))

	// Revoked, it stops working at once; revoking again is fine.
	revoke := env.Admin(t, http.MethodDelete, "/admin/v1/operator-tokens/"+strconv.FormatInt(created.ID, 10), nil)
	require.Equal(t, http.StatusNoContent, revoke.Status, "body: %s", revoke.Body)
	require.Empty(t, revoke.Body)
	r = asOperator(http.MethodGet, "/admin/v1/companies", nil)
	requireError(t, r, http.StatusUnauthorized, "unauthorized")
	require.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
	requireError(t, asOperator(http.MethodDelete, "/admin/v1/companies/acme", nil), http.StatusUnauthorized, "unauthorized")
	require.Equal(t, http.StatusNoContent,
		env.Admin(t, http.MethodDelete, "/admin/v1/operator-tokens/"+strconv.FormatInt(created.ID, 10), nil).Status)

	// The bootstrap token is unaffected.
	require.Equal(t, http.StatusOK, env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil).Status)

	// Unknown and malformed ids are 404.
	for _, id := range []string{"999999", "0", "-1", "abc", "1.5"} {
		requireError(t, env.Admin(t, http.MethodDelete, "/admin/v1/operator-tokens/"+id, nil), http.StatusNotFound, "not_found")
	}

	// Bad names are refused.
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", `{"name": "`+strings.Repeat("n", 201)+`"}`), "name")
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", `{"name": "a\u0000b"}`), "name")
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", `{"nme": "ci"}`), "nme")
	require.Equal(t, 3, count(t, env, `SELECT count(*) FROM operator_tokens`), "bootstrap plus two created")

	bootstrapRevoked(t, env)
}

// bootstrapStoredHashed checks that the bootstrap token from the
// environment is stored only as its SHA-256 hash.
func bootstrapStoredHashed(t *testing.T, env *kit) {
	t.Helper()

	var (
		hash []byte
		name string
	)
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT name, token_hash FROM operator_tokens`).Scan(&name, &hash))
	require.NotEqual(t, []byte(adminToken), hash)
	sum := sha256.Sum256([]byte(adminToken))
	require.Equal(t, sum[:], hash)
	require.NotContains(t, name, adminToken)
	// No column of any operator token holds the token.
	require.Zero(t, count(t, env, `SELECT count(*) FROM operator_tokens t
		WHERE strpos(row_to_json(t)::text, $1) > 0 OR strpos(encode(t.token_hash, 'escape'), $1) > 0`, adminToken))

	// Building the platform again on the same database keeps one row.
	require.NoError(t, env.Tenants.EnsureOperatorToken(context.Background(), "again", adminToken))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM operator_tokens`))
}

// bootstrapRevoked revokes the bootstrap token with another one: it stops
// working, and storing it again at start does not bring it back.
func bootstrapRevoked(t *testing.T, env *kit) {
	t.Helper()

	resp := env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", `{"name": "replacement"}`)
	require.Equal(t, http.StatusCreated, resp.Status)
	var tok struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &tok))

	var bootstrapID int64
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT id FROM operator_tokens WHERE token_hash = sha256(convert_to($1, 'UTF8'))`, adminToken).Scan(&bootstrapID))
	r := env.Do(t, http.MethodDelete, env.PublicURL("/admin/v1/operator-tokens/"+strconv.FormatInt(bootstrapID, 10)), nil, bearer(tok.Token)...)
	require.Equal(t, http.StatusNoContent, r.Status, "body: %s", r.Body)

	requireError(t, env.Admin(t, http.MethodGet, "/admin/v1/companies", nil), http.StatusUnauthorized, "unauthorized")
	// Storing it again at start does not bring it back.
	require.NoError(t, env.Tenants.EnsureOperatorToken(context.Background(), "bootstrap", adminToken))
	requireError(t, env.Admin(t, http.MethodGet, "/admin/v1/companies", nil), http.StatusUnauthorized, "unauthorized")
	require.Equal(t, http.StatusOK, env.Do(t, http.MethodGet, env.PublicURL("/admin/v1/companies"), nil, bearer(tok.Token)...).Status)
}

// TestTwoAuthorizationHeaders sends two Authorization header fields, one
// of them valid, in either order: every route refuses it with 400
// invalid_request, rather than take the first, and nothing is written.
func TestTwoAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", "")
	_, apiKey := createAPIKey(t, env, "acme")
	before := count(t, env, `SELECT count(*) FROM company_api_keys`)

	// send sends the request and checks it was refused for its two fields.
	send := func(t *testing.T, method, url string, body any, values ...string) {
		req := peers.NewRequest(t, method, url, body)
		for _, v := range values {
			req.Header.Add("Authorization", v)
		}
		e := requireError(t, peers.Send(t, env.Client, req), http.StatusBadRequest, "invalid_request")
		require.Contains(t, e.Description, "more than one Authorization header")
	}
	pairs := map[string][]string{
		"valid first":  {"Bearer " + adminToken, "Bearer nope"},
		"valid second": {"Bearer nope", "Bearer " + adminToken},
		"both valid":   {"Bearer " + adminToken, "Bearer " + adminToken},
	}
	for name, values := range pairs {
		t.Run("admin "+name, func(t *testing.T) {
			for _, r := range adminRoutes {
				send(t, r.method, env.PublicURL(r.path), r.body, values...)
			}
		})
	}
	t.Run("company API", func(t *testing.T) {
		send(t, http.MethodGet, env.PublicURL("/company/v1/company"), nil, "Bearer "+apiKey, "Bearer nope")
	})
	// The token endpoint: TestTenantHostSplit in internal/platform.
	// One header still works.
	require.Equal(t, http.StatusOK, env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil).Status)

	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM companies`))
	require.Equal(t, before, count(t, env, `SELECT count(*) FROM company_api_keys`))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM operator_tokens`))
	require.Equal(t, "Company acme", orgName(t, env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil)))
}
