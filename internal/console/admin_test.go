package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdminCreatesFirstOwner: the operator creates a Company's first
// owner through the admin API, who then signs in to the console; bad
// fields and a taken email are refused, and the API needs the operator's
// token.
func TestAdminCreatesFirstOwner(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	path := "/admin/v1/companies/" + r.Slug + "/staff"
	resp := r.env.Admin(t, http.MethodPost, path, map[string]any{
		"email": "Ada@Example.com", "name": "Ada", "password": "a long enough password"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	view := resp.JSON(t)
	require.Equal(t, "ada@example.com", view["email"])
	require.Equal(t, "owner", view["role"])
	require.Equal(t, r.env.PublicURL("/console/"+r.Slug+"/signin"), view["console_url"])
	require.NotContains(t, string(resp.Body), "password")

	c := r.client(t)
	got := r.passwordSignIn(t, c, "ada@example.com", "a long enough password")
	require.Equal(t, http.StatusSeeOther, got.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/", got.Header.Get("Location"))

	resp = r.env.Admin(t, http.MethodPost, path, map[string]any{"email": "ada@example.com", "password": "another password"})
	require.Equal(t, http.StatusConflict, resp.Status, "%s", resp.Body)
	resp = r.env.Admin(t, http.MethodPost, path, map[string]any{"email": "nope", "role": "king", "password": "short"})
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Contains(t, string(resp.Body), `"email"`)
	require.Contains(t, string(resp.Body), `"role"`)
	require.Contains(t, string(resp.Body), `"password"`)
	resp = r.env.Do(t, http.MethodPost, r.env.PublicURL(path), map[string]any{"email": "eve@example.com", "password": "a long enough password"})
	require.Equal(t, http.StatusUnauthorized, resp.Status)
	resp = r.env.Admin(t, http.MethodPost, "/admin/v1/companies/nosuch/staff", map[string]any{"email": "eve@example.com", "password": "a long enough password"})
	require.Equal(t, http.StatusNotFound, resp.Status)
}
