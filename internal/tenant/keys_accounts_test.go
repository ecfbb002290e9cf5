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

	"github.com/poppyhost/poppyhost/internal/accounts"
)

func TestAccounts(t *testing.T) {
	t.Parallel()
	env := setup(t)
	t.Run("create", func(t *testing.T) {
		t.Parallel()
		testCreateAccount(t, env)
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		testCreateAccountRefused(t, env)
	})
}

func testCreateAccount(t *testing.T, env *kit) {
	createCompany(t, env, "acme", "acme.example", "")
	const password = "correct horse battery"

	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/accounts",
		`{"username": "alice@example.com", "password": "`+password+`"}`)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	got := resp.JSON(t)
	require.Equal(t, "alice@example.com", got["username"])
	require.NotZero(t, got["id"])
	require.NotEmpty(t, got["created_at"])
	require.ElementsMatch(t, []string{"id", "username", "created_at"}, keys(got), "no password or hash in the response")
	require.NotContains(t, string(resp.Body), password)
	require.NotContains(t, string(resp.Body), "argon2")

	// Stored as an Argon2id encoding of the password, never the password.
	var (
		hash      string
		companyOf int64
	)
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT password_hash, company_id FROM accounts WHERE username = $1`, "alice@example.com").Scan(&hash, &companyOf))
	require.Equal(t, companyID(t, env, "acme"), companyOf)
	require.NotContains(t, hash, password)
	require.True(t, strings.HasPrefix(hash, "$argon2id$v=19$m=65536,t=3,p=2$"), hash)
	require.Len(t, strings.Split(hash, "$"), 6)
	require.True(t, accounts.VerifyPassword(hash, password))
	require.False(t, accounts.VerifyPassword(hash, password+"!"))

	// The account signs in.
	acct, err := env.Accounts.Authenticate(context.Background(), companyOf, "alice@example.com", password)
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", acct.Username)

	// The same username again is a conflict, whatever the password.
	resp = env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/accounts",
		`{"username": "alice@example.com", "password": "another password"}`)
	e := requireError(t, resp, http.StatusConflict, "conflict")
	require.Len(t, e.Fields, 1)
	require.Equal(t, "username", e.Fields[0].Field)
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM accounts WHERE company_id = $1`, companyOf))

	// Unknown Company.
	requireError(t, env.Admin(t, http.MethodPost, "/admin/v1/companies/nosuch/accounts",
		`{"username": "bob", "password": "`+password+`"}`), http.StatusNotFound, "not_found")
}

func testCreateAccountRefused(t *testing.T, env *kit) {
	createCompany(t, env, "refuser", "refuser.example", "")
	refuser := companyID(t, env, "refuser")

	tests := []struct {
		name   string
		body   string
		status int
		fields []string
	}{
		{"password too short", `{"username": "bob", "password": "1234567"}`, 400, []string{"password"}},
		{"password of 7 runes and 14 bytes", `{"username": "bob", "password": "ééééééé"}`, 400, []string{"password"}},
		{"password missing", `{"username": "bob"}`, 400, []string{"password"}},
		{"password too long", `{"username": "bob", "password": "` + strings.Repeat("p", 257) + `"}`, 400, []string{"password"}},
		{"username missing", `{"password": "long enough"}`, 400, []string{"username"}},
		{"username empty", `{"username": "", "password": "long enough"}`, 400, []string{"username"}},
		{"username with space", `{"username": "bob smith", "password": "long enough"}`, 400, []string{"username"}},
		{"username with tab", `{"username": "bob\tsmith", "password": "long enough"}`, 400, []string{"username"}},
		{"username with newline", `{"username": "bob\n", "password": "long enough"}`, 400, []string{"username"}},
		{"username with control", `{"username": "bob\u0000", "password": "long enough"}`, 400, []string{"username"}},
		{"username with no-break space", `{"username": "bob\u00a0smith", "password": "long enough"}`, 400, []string{"username"}},
		{"username too long", `{"username": "` + strings.Repeat("u", 101) + `", "password": "long enough"}`, 400, []string{"username"}},
		{"both bad", `{"username": "", "password": "short"}`, 400, []string{"username", "password"}},
		{"unknown field", `{"username": "bob", "password": "long enough", "admin": true}`, 400, []string{"admin"}},
		{"username a number", `{"username": 5, "password": "long enough"}`, 400, []string{"username"}},
		{"malformed", `{"username": "bob",`, 400, nil},
		{"empty body", ``, 400, nil},
		{"body over 4 KiB", `{"username": "bob", "password": "` + strings.Repeat("p", 5000) + `"}`, 413, nil},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/refuser/accounts", tt.body)
				switch {
				case tt.fields != nil:
					requireInvalid(t, resp, tt.fields...)
				case tt.status == 413:
					requireError(t, resp, tt.status, "request_too_large")
				default:
					requireError(t, resp, tt.status, "invalid_request")
				}
			})
		}
	})
	require.Zero(t, count(t, env, `SELECT count(*) FROM accounts WHERE company_id = $1`, refuser))

	// Edge values that are accepted.
	for _, body := range []string{
		`{"username": "` + strings.Repeat("u", 100) + `", "password": "12345678"}`,
		`{"username": "ünïcödé", "password": "` + strings.Repeat("p", 256) + `"}`,
	} {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/refuser/accounts", body)
		require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	}
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	env := setup(t)
	t.Run("lifecycle", func(t *testing.T) {
		t.Parallel()
		testAPIKeyLifecycle(t, env)
	})
	t.Run("company API refuses", func(t *testing.T) {
		t.Parallel()
		testCompanyAPIRequiresKey(t, env)
	})
}

func testAPIKeyLifecycle(t *testing.T, env *kit) {
	createCompany(t, env, "acme", "acme.example", "")
	acme := companyID(t, env, "acme")

	type apiKey struct {
		ID        int64   `json:"id"`
		Name      string  `json:"name"`
		Key       string  `json:"key"`
		CreatedAt string  `json:"created_at"`
		RevokedAt *string `json:"revoked_at"`
	}
	create := func(body any) apiKey {
		t.Helper()
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/api-keys", body)
		require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
		var k apiKey
		require.NoError(t, json.Unmarshal(resp.Body, &k))
		require.True(t, strings.HasPrefix(k.Key, "phk_"), k.Key)
		require.Greater(t, len(k.Key), 40, "the key must carry enough randomness")
		require.NotEmpty(t, k.CreatedAt)
		require.Nil(t, k.RevokedAt)
		return k
	}
	backend := create(`{"name": "backend"}`)
	require.Equal(t, "backend", backend.Name)
	unnamed := create(nil)
	require.Empty(t, unnamed.Name)
	require.NotEqual(t, backend.Key, unnamed.Key)

	// The list shows both, newest first, and no secret.
	list := env.Admin(t, http.MethodGet, "/admin/v1/companies/acme/api-keys", nil)
	require.Equal(t, http.StatusOK, list.Status)
	require.NotContains(t, string(list.Body), backend.Key)
	require.NotContains(t, string(list.Body), unnamed.Key)
	require.NotContains(t, string(list.Body), `"key"`)
	var listed struct {
		APIKeys []apiKey `json:"api_keys"`
	}
	require.NoError(t, json.Unmarshal(list.Body, &listed))
	require.Len(t, listed.APIKeys, 2)
	require.Equal(t, []int64{unnamed.ID, backend.ID}, []int64{listed.APIKeys[0].ID, listed.APIKeys[1].ID})
	require.Equal(t, "backend", listed.APIKeys[1].Name)

	// Stored as hashes only.
	var hash []byte
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT key_hash FROM company_api_keys WHERE id = $1`, backend.ID).Scan(&hash))
	require.NotEqual(t, []byte(backend.Key), hash)
	sum := sha256.Sum256([]byte(backend.Key))
	require.Equal(t, sum[:], hash)
	for _, k := range []string{backend.Key, unnamed.Key} {
		require.Zero(t, count(t, env, `SELECT count(*) FROM company_api_keys t
			WHERE strpos(row_to_json(t)::text, $1) > 0 OR strpos(encode(t.key_hash, 'escape'), $1) > 0`, k))
		require.Equal(t, 1, count(t, env, `SELECT count(*) FROM company_api_keys WHERE key_hash = sha256(convert_to($1, 'UTF8')) AND company_id = $2`, k, acme))
	}

	// The key reads its Company.
	resp := companyAPI(t, env, http.MethodGet, "/company", backend.Key)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.JSONEq(t, string(env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil).Body), string(resp.Body))

	// Revoked, it stops working; the other key keeps working.
	r := env.Admin(t, http.MethodDelete, "/admin/v1/companies/acme/api-keys/"+strconv.FormatInt(backend.ID, 10), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "body: %s", r.Body)
	resp = companyAPI(t, env, http.MethodGet, "/company", backend.Key)
	requireError(t, resp, http.StatusUnauthorized, "unauthorized")
	require.Equal(t, `Bearer realm="poppyhost-company"`, resp.Header.Get("WWW-Authenticate"))
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", unnamed.Key).Status)
	// Revoking again is fine and changes nothing.
	r = env.Admin(t, http.MethodDelete, "/admin/v1/companies/acme/api-keys/"+strconv.FormatInt(backend.ID, 10), nil)
	require.Equal(t, http.StatusNoContent, r.Status)
	requireError(t, companyAPI(t, env, http.MethodGet, "/company", backend.Key), http.StatusUnauthorized, "unauthorized")

	require.NoError(t, json.Unmarshal(env.Admin(t, http.MethodGet, "/admin/v1/companies/acme/api-keys", nil).Body, &listed))
	require.Len(t, listed.APIKeys, 2)
	require.Nil(t, listed.APIKeys[0].RevokedAt)
	require.NotNil(t, listed.APIKeys[1].RevokedAt)

	// Bad ids and names.
	for _, id := range []string{"999999", "0", "-1", "abc"} {
		requireError(t, env.Admin(t, http.MethodDelete, "/admin/v1/companies/acme/api-keys/"+id, nil), http.StatusNotFound, "not_found")
	}
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/api-keys", `{"name": "`+strings.Repeat("n", 201)+`"}`), "name")
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/api-keys", `{"name": "a\u0007"}`), "name")
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/api-keys", `{"label": "x"}`), "label")
	requireError(t, env.Admin(t, http.MethodPost, "/admin/v1/companies/nosuch/api-keys", nil), http.StatusNotFound, "not_found")
	require.Equal(t, 2, count(t, env, `SELECT count(*) FROM company_api_keys WHERE company_id = $1`, acme))
}

func testCompanyAPIRequiresKey(t *testing.T, env *kit) {
	createCompany(t, env, "keyed", "keyed.example", "")
	_, key := createAPIKey(t, env, "keyed")

	tests := []struct {
		name    string
		headers []string
	}{
		{"no key", nil},
		{"unknown key", bearer("phk_" + strings.Repeat("A", 43))},
		{"key with a character changed", bearer(key[:len(key)-1] + flip(key[len(key)-1]))},
		{"key prefix only", bearer("phk_")},
		{"key without prefix", bearer(strings.TrimPrefix(key, "phk_"))},
		{"operator token", bearer(adminToken)},
		{"key in basic scheme", []string{"Authorization", "Basic " + key}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp := env.Do(t, http.MethodGet, env.PublicURL("/company/v1/company"), nil, tt.headers...)
			requireError(t, resp, http.StatusUnauthorized, "unauthorized")
			require.Equal(t, `Bearer realm="poppyhost-company"`, resp.Header.Get("WWW-Authenticate"))
			require.NotContains(t, string(resp.Body), "keyed")
		})
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
