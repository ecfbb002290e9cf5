package platform_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
)

// TestHostileAPIText: a NUL or invalid UTF-8 in the path or query of the
// operator and Company APIs, which PostgreSQL text refuses, is a 400
// invalid_request before any handler runs, never a 500, and changes
// nothing.
func TestHostileAPIText(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"}})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/shop/api-keys", map[string]any{"name": "hostile"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	key := resp.JSON(t)["key"].(string)

	cases := []struct{ method, path string }{
		{http.MethodGet, "/admin/v1/companies?after=%00"},
		{http.MethodGet, "/admin/v1/companies?after=a%00b"},
		{http.MethodGet, "/admin/v1/companies?after=%ff%fe"},
		{http.MethodGet, "/admin/v1/companies?limit=1&a%00=1"},
		{http.MethodGet, "/admin/v1/companies/shop/operations?after=%00"},
		{http.MethodGet, "/admin/v1/companies/shop/feedback?after=%c3"},
		{http.MethodGet, "/admin/v1/companies/shop/apis/a%00b"},
		{http.MethodPut, "/admin/v1/companies/shop/apis/a%00b"},
		{http.MethodDelete, "/admin/v1/companies/shop/api-keys/1%00"},
		{http.MethodGet, "/company/v1/operations?after=%00"},
		{http.MethodGet, "/company/v1/apis/%ff"},
		{http.MethodPut, "/company/v1/tools/t%00"},
		{http.MethodGet, "/company/v1/conversations?status=%00"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			t.Parallel()
			body := `{"openapi_url":"https://origin.example/openapi.json"}`
			if c.method == http.MethodGet || c.method == http.MethodDelete {
				body = ""
			}
			auth := "Bearer " + testkit.AdminToken
			if c.path[:len("/company/")] == "/company/" {
				auth = "Bearer " + key
			}
			var b any
			if body != "" {
				b = body
			}
			resp := env.Do(t, c.method, env.PublicURL(c.path), b, "Authorization", auth)
			require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
			var e struct {
				Error string `json:"error"`
			}
			require.NoError(t, json.Unmarshal(resp.Body, &e), "%s", resp.Body)
			require.Equal(t, "invalid_request", e.Error)
		})
	}
	t.Cleanup(func() {
		var n int
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM gateway_apis)
			+ (SELECT count(*) FROM gateway_tools) + (SELECT count(*) FROM company_api_keys WHERE revoked_at IS NOT NULL)`).Scan(&n))
		require.Zero(t, n, "nothing was written")
	})
}
