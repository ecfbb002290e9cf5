package tenant_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
)

// getWithHost sends a GET to url with r.Host set to host, so that the Host header
// can differ from the TLS server name.
func getWithHost(t *testing.T, env *kit, url, host string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Host = host
	resp, err := env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

func TestHostRouting(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", `{"domains": ["acme.example.org"]}`)
	_, key := createAPIKey(t, env, "acme")

	// Every Company domain serves that Company.
	for _, d := range []string{"acme.example", "acme.example.org"} {
		resp := poppyJSON(t, env, d)
		require.Equal(t, http.StatusOK, resp.Status, "%s: %s", d, resp.Body)
		require.Equal(t, "Company acme", orgName(t, resp))
	}
	// The Host header is matched ignoring case, port and a trailing dot.
	for _, host := range []string{"ACME.Example", "acme.example.", "acme.example:" + env.Port} {
		status, body := getWithHost(t, env, env.URL("acme.example", "/.well-known/poppy.json"), host)
		require.Equal(t, http.StatusOK, status, "%s: %s", host, body)
	}

	// What any unknown host gets: the same 404 as an unknown path.
	notFound := env.Do(t, http.MethodGet, env.URL("acme.example", "/no/such/path"), nil)
	requireError(t, notFound, http.StatusNotFound, "not_found")
	unknown := []struct {
		name, url string
		host      string // "" keeps the URL's host
	}{
		{"unregistered domain", env.URL("nobody.example", "/.well-known/poppy.json"), ""},
		{"unregistered subdomain", env.URL("www.acme.example", "/.well-known/poppy.json"), ""},
		{"parent of a domain", env.URL("example.org", "/.well-known/poppy.json"), ""},
		{"registered domain's root", env.URL("nobody.example", "/"), ""},
		{"IP address", env.URL("acme.example", "/.well-known/poppy.json"), "127.0.0.1:" + env.Port},
		{"short IP address", env.URL("acme.example", "/.well-known/poppy.json"), "127.1"},
		{"single label", env.URL("acme.example", "/.well-known/poppy.json"), "acme"},
		{"empty label", env.URL("acme.example", "/.well-known/poppy.json"), "acme..example"},
	}
	for _, u := range unknown {
		t.Run(u.name, func(t *testing.T) {
			t.Parallel()
			host := u.host
			if host == "" {
				req, err := http.NewRequest(http.MethodGet, u.url, nil)
				require.NoError(t, err)
				host = req.URL.Host
			}
			status, body := getWithHost(t, env, u.url, host)
			require.Equal(t, http.StatusNotFound, status, "body: %s", body)
			require.JSONEq(t, string(notFound.Body), string(body))
			require.NotContains(t, string(body), "acme")
			// Nor does it reach the platform's own routes. (Health and
			// metrics answer on IP literals, for probes; see
			// internal/platform.)
			platformURL, err := url.Parse(u.url)
			require.NoError(t, err)
			platformURL.Path = "/admin/v1/companies"
			status, body = getWithHost(t, env, platformURL.String(), host)
			require.Equal(t, http.StatusNotFound, status, "body: %s", body)
			require.JSONEq(t, string(notFound.Body), string(body))
		})
	}

	// A Company domain serves none of the platform's routes, and the
	// platform's host no Company documents: TestTenantHostSplit in
	// internal/platform, with every route mounted.
	for _, path := range []string{"/admin/v1/companies", "/company/v1/company", "/t/acme/poppy/excluded-tasks.json"} {
		resp := env.Do(t, http.MethodGet, env.URL("acme.example", path), nil, bearer(adminToken)...)
		requireError(t, resp, http.StatusNotFound, "not_found")
		resp = env.Do(t, http.MethodGet, env.URL("acme.example", path), nil, bearer(key)...)
		requireError(t, resp, http.StatusNotFound, "not_found")
	}
	requireError(t, env.Do(t, http.MethodGet, env.PublicURL("/.well-known/poppy.json"), nil), http.StatusNotFound, "not_found")
}

// TestCrossCompany proves one Company cannot reach another's data through
// keys, admin routes, domains or accounts.
func TestCrossCompany(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "alpha", "alpha.example", `{"organization": {"name": "Alpha Secret Name"}, "domains": ["alpha.example.org"]}`)
	createCompany(t, env, "beta", "beta.example", `{"organization": {"name": "Beta Name"}}`)
	alphaKeyID, alphaKey := createAPIKey(t, env, "alpha")
	betaKeyID, betaKey := createAPIKey(t, env, "beta")
	alphaID, betaID := companyID(t, env, "alpha"), companyID(t, env, "beta")

	// Each key reads its own Company only.
	for key, want := range map[string]string{alphaKey: "alpha", betaKey: "beta"} {
		resp := companyAPI(t, env, http.MethodGet, "/company", key)
		require.Equal(t, http.StatusOK, resp.Status)
		require.Equal(t, want, resp.JSON(t)["slug"])
	}

	// A Company API key is no operator token: it cannot list, revoke or
	// create another Company's keys.
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/admin/v1/companies/beta/api-keys"},
		{http.MethodPost, "/admin/v1/companies/beta/api-keys"},
		{http.MethodDelete, "/admin/v1/companies/beta/api-keys/" + strconv.FormatInt(betaKeyID, 10)},
		{http.MethodGet, "/admin/v1/companies/alpha/api-keys"},
		{http.MethodGet, "/admin/v1/companies/beta"},
	} {
		resp := env.Do(t, r.method, env.PublicURL(r.path), nil, bearer(alphaKey)...)
		requireError(t, resp, http.StatusUnauthorized, "unauthorized")
	}

	// Revoking alpha's key under beta's slug finds nothing and changes
	// nothing.
	resp := env.Admin(t, http.MethodDelete, "/admin/v1/companies/beta/api-keys/"+strconv.FormatInt(alphaKeyID, 10), nil)
	requireError(t, resp, http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", alphaKey).Status)
	require.Zero(t, count(t, env, `SELECT count(*) FROM company_api_keys WHERE revoked_at IS NOT NULL`))

	// Each Company's key list holds only its own keys.
	var list struct {
		APIKeys []struct {
			ID int64 `json:"id"`
		} `json:"api_keys"`
	}
	require.NoError(t, json.Unmarshal(env.Admin(t, http.MethodGet, "/admin/v1/companies/beta/api-keys", nil).Body, &list))
	require.Len(t, list.APIKeys, 1)
	require.Equal(t, betaKeyID, list.APIKeys[0].ID)

	// Beta's domain serves beta, never alpha.
	r := poppyJSON(t, env, "beta.example")
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "Beta Name", orgName(t, r))
	require.NotContains(t, string(r.Body), "Alpha")
	require.NotContains(t, string(r.Body), "alpha")
	r = poppyJSON(t, env, "alpha.example.org")
	require.Equal(t, "Alpha Secret Name", orgName(t, r))
	require.NotContains(t, string(r.Body), "beta")

	// Accounts are per Company: the same username exists in both, and a
	// password of one never signs in at the other.
	for slug, pw := range map[string]string{"alpha": "alpha password", "beta": "beta password"} {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts", `{"username": "alice", "password": "`+pw+`"}`)
		require.Equal(t, http.StatusCreated, resp.Status, "%s: %s", slug, resp.Body)
	}
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM accounts WHERE company_id = $1`, alphaID))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM accounts WHERE company_id = $1`, betaID))

	ctx := context.Background()
	a, err := env.Accounts.Authenticate(ctx, alphaID, "alice", "alpha password")
	require.NoError(t, err)
	b, err := env.Accounts.Authenticate(ctx, betaID, "alice", "beta password")
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	_, err = env.Accounts.Authenticate(ctx, betaID, "alice", "alpha password")
	require.ErrorIs(t, err, accounts.ErrNotFound)
	_, err = env.Accounts.Authenticate(ctx, alphaID, "alice", "beta password")
	require.ErrorIs(t, err, accounts.ErrNotFound)

	// Deleting beta leaves alpha whole.
	require.Equal(t, http.StatusNoContent, env.Admin(t, http.MethodDelete, "/admin/v1/companies/beta", nil).Status)
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", alphaKey).Status)
	requireError(t, companyAPI(t, env, http.MethodGet, "/company", betaKey), http.StatusUnauthorized, "unauthorized")
	_, err = env.Accounts.Authenticate(ctx, alphaID, "alice", "alpha password")
	require.NoError(t, err)
	require.Equal(t, []string{"alpha.example*", "alpha.example.org"}, domainsOf(t, env, "alpha"))
}
