package tenant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// apiError is the JSON error body every admin and Company API error has.
type apiError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
	Fields      []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"fields"`
	RequestID string `json:"request_id"`
}

// requireError checks that resp is a JSON error with status and code.
func requireError(t *testing.T, resp *peers.Response, status int, code string) apiError {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e apiError
	require.NoError(t, json.Unmarshal(resp.Body, &e), "body: %s", resp.Body)
	require.Equal(t, code, e.Error, "body: %s", resp.Body)
	require.NotEmpty(t, e.Description, "body: %s", resp.Body)
	return e
}

// requireInvalid checks for a 400 invalid_request naming exactly fields,
// each with a message.
func requireInvalid(t *testing.T, resp *peers.Response, fields ...string) apiError {
	t.Helper()
	e := requireError(t, resp, http.StatusBadRequest, "invalid_request")
	got := make([]string, 0, len(e.Fields))
	for _, f := range e.Fields {
		require.NotEmpty(t, f.Message, "field %s has no message", f.Field)
		got = append(got, f.Field)
	}
	require.Equal(t, fields, got, "body: %s", resp.Body)
	return e
}

// count runs a count(*) query.
func count(t *testing.T, env *testkit.Env, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// requireNoCompanies checks that nothing of a Company was written.
func requireNoCompanies(t *testing.T, env *testkit.Env) {
	t.Helper()
	require.Zero(t, count(t, env, `SELECT count(*) FROM companies`), "a company was stored")
	require.Zero(t, count(t, env, `SELECT count(*) FROM company_domains`), "a domain was stored")
}

// companyID returns the database ID of the Company with slug.
func companyID(t *testing.T, env *testkit.Env, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&id))
	return id
}

// domainsOf returns a Company's domains as stored, primary first, with
// "*" after the primary one.
func domainsOf(t *testing.T, env *testkit.Env, slug string) []string {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT d.domain || CASE WHEN d.is_primary THEN '*' ELSE '' END
		FROM company_domains d JOIN companies c ON c.id = d.company_id
		WHERE c.slug = $1 ORDER BY d.is_primary DESC, d.domain`, slug)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var d string
		require.NoError(t, rows.Scan(&d))
		out = append(out, d)
	}
	require.NoError(t, rows.Err())
	return out
}

// merge applies a JSON merge patch to a JSON document; null deletes.
func merge(t *testing.T, doc, patch string) string {
	t.Helper()
	if patch == "" {
		return doc
	}
	out, err := jsonpatch.MergePatch([]byte(doc), []byte(patch))
	require.NoError(t, err, "patch %s", patch)
	return string(out)
}

// minimalBody is the smallest valid Company body.
func minimalBody(slug, domain string) string {
	return fmt.Sprintf(`{"slug":%q,"organization":{"name":"Company %s","domain":%q}}`, slug, slug, domain)
}

// createCompany creates a Company from a minimal body plus patch.
func createCompany(t *testing.T, env *testkit.Env, slug, domain, patch string) map[string]any {
	t.Helper()
	return env.CreateCompany(t, merge(t, minimalBody(slug, domain), patch))
}

// createAPIKey creates an API key for slug and returns its id and secret.
func createAPIKey(t *testing.T, env *testkit.Env, slug string) (int64, string) {
	t.Helper()
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	var k struct {
		ID  int64  `json:"id"`
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &k))
	require.NotZero(t, k.ID)
	require.NotEmpty(t, k.Key)
	return k.ID, k.Key
}

// bearer returns the Authorization header pair for token.
func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// companyAPI calls /company/v1 path with an API key.
func companyAPI(t *testing.T, env *testkit.Env, method, path, key string) *peers.Response {
	t.Helper()
	return env.Do(t, method, env.PublicURL("/company/v1"+path), nil, bearer(key)...)
}

// poppyJSON fetches poppy.json from a domain.
func poppyJSON(t *testing.T, env *testkit.Env, domain string) *peers.Response {
	t.Helper()
	return env.Do(t, http.MethodGet, env.URL(domain, "/.well-known/poppy.json"), nil)
}

// orgName returns organization.name of a poppy.json or Company body.
func orgName(t *testing.T, resp *peers.Response) string {
	t.Helper()
	var doc struct {
		Organization struct {
			Name string `json:"name"`
		} `json:"organization"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &doc), "body: %s", resp.Body)
	return doc.Organization.Name
}
