package platform_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The tenant package's settings and routing as the whole platform serves
// them: the documents and endpoints other packages derive from a
// Company's settings, and the Host split between the platform's routes
// and a Company's. The rules themselves are tested in internal/tenant.

// createTenant creates the Company slug with its organization on domain,
// patch merged into the body (RFC 7396).
func createTenant(t *testing.T, env *testkit.Env, slug, domain, patch string) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"slug":%q,"organization":{"name":"Company %s","domain":%q}}`, slug, slug, domain)
	if patch != "" {
		merged, err := jsonpatch.MergePatch([]byte(body), []byte(patch))
		require.NoError(t, err, "patch %s", patch)
		body = string(merged)
	}
	return env.CreateCompany(t, body)
}

// tenantError is the JSON error body of every API error.
type tenantError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
	Fields      []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"fields"`
}

// requireTenantError checks that resp is a JSON error with status and code.
func requireTenantError(t *testing.T, resp *peers.Response, status int, code string) tenantError {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e tenantError
	require.NoError(t, json.Unmarshal(resp.Body, &e), "body: %s", resp.Body)
	require.Equal(t, code, e.Error, "body: %s", resp.Body)
	require.NotEmpty(t, e.Description, "body: %s", resp.Body)
	return e
}

// requireTenantInvalid checks for a 400 invalid_request naming exactly
// fields, each with a message.
func requireTenantInvalid(t *testing.T, resp *peers.Response, fields ...string) {
	t.Helper()
	e := requireTenantError(t, resp, http.StatusBadRequest, "invalid_request")
	got := make([]string, 0, len(e.Fields))
	for _, f := range e.Fields {
		require.NotEmpty(t, f.Message, "field %s has no message", f.Field)
		got = append(got, f.Field)
	}
	require.Equal(t, fields, got, "body: %s", resp.Body)
}

// TestSignInRoundTrips turns the issuer and sign-in off and on again with
// the smallest patches: grant_types left empty means both sign-in types,
// so nothing else has to be reset. The AS metadata follows each step.
func TestSignInRoundTrips(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	const device = "urn:ietf:params:oauth:grant-type:device_code"
	both := []any{"refresh_token", "authorization_code", device}

	patch := func(t *testing.T, slug, body string) map[string]any {
		t.Helper()
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+slug, body)
		require.Equal(t, http.StatusOK, resp.Status, "%s: %s", body, resp.Body)
		m := resp.JSON(t)
		require.Equal(t, m, env.Admin(t, http.MethodGet, "/admin/v1/companies/"+slug, nil).JSON(t), "stored as answered")
		return m
	}
	authOf := func(m map[string]any) map[string]any { return m["auth"].(map[string]any) }
	asURL := func(slug string) string { return env.PublicURL("/.well-known/oauth-authorization-server/t/" + slug) }
	// grants returns grant_types_supported of slug's AS metadata, or nil
	// when it answers 404 (no issuer).
	grants := func(t *testing.T, slug string) []any {
		t.Helper()
		resp := env.Do(t, http.MethodGet, asURL(slug), nil)
		if resp.Status == http.StatusNotFound {
			requireTenantError(t, resp, http.StatusNotFound, "not_found")
			return nil
		}
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
		as := resp.JSON(t)
		g, _ := as["grant_types_supported"].([]any)
		require.Equal(t, slices.Contains(g, "authorization_code"), as["authorization_endpoint"] != nil)
		require.Equal(t, slices.Contains(g, device), as["device_authorization_endpoint"] != nil)
		return g
	}
	prm := func(t *testing.T, domain string) int {
		t.Helper()
		return env.Do(t, http.MethodGet, env.URL(domain, "/.well-known/oauth-protected-resource"), nil).Status
	}

	t.Run("issuer off and on", func(t *testing.T) {
		t.Parallel()
		createTenant(t, env, "issuer", "issuer.example", "")
		require.Equal(t, both, grants(t, "issuer"))

		m := patch(t, "issuer", `{"auth": {"issuer": false}}`)
		require.Equal(t, "https://issuer.example", m["identifier"])
		require.NotContains(t, m, "issuer")
		require.NotContains(t, authOf(m), "grant_types")
		require.Nil(t, grants(t, "issuer"), "no issuer: no AS metadata")
		require.Equal(t, http.StatusNotFound, prm(t, "issuer.example"))

		m = patch(t, "issuer", `{"auth": {"issuer": true}}`)
		require.Equal(t, env.PublicURL("/t/issuer"), m["identifier"])
		require.NotContains(t, authOf(m), "grant_types")
		require.Equal(t, both, grants(t, "issuer"), "back on: both sign-in types")
		require.Equal(t, http.StatusOK, prm(t, "issuer.example"))
	})

	t.Run("sign-in off and on", func(t *testing.T) {
		t.Parallel()
		createTenant(t, env, "signin", "signin.example", "")
		require.Equal(t, both, grants(t, "signin"))

		m := patch(t, "signin", `{"auth": {"disabled": true}}`)
		require.Equal(t, true, authOf(m)["disabled"])
		require.NotContains(t, authOf(m), "grant_types")
		require.Equal(t, []any{"refresh_token"}, grants(t, "signin"), "sign-in off: refresh only")
		require.Equal(t, map[string]any{"disabled": true}, env.Do(t, http.MethodGet, env.URL("signin.example", "/.well-known/poppy.json"), nil).JSON(t)["auth"])

		m = patch(t, "signin", `{"auth": {"disabled": false}}`)
		require.Equal(t, false, authOf(m)["disabled"])
		require.Equal(t, both, grants(t, "signin"), "back on: both sign-in types")
		require.NotContains(t, env.Do(t, http.MethodGet, env.URL("signin.example", "/.well-known/poppy.json"), nil).JSON(t), "auth")
	})

	t.Run("a chosen sign-in type survives sign-in off and on", func(t *testing.T) {
		t.Parallel()
		createTenant(t, env, "device", "device.example", `{"auth": {"grant_types": ["`+device+`"]}}`)
		require.Equal(t, []any{"refresh_token", device}, grants(t, "device"))
		patch(t, "device", `{"auth": {"disabled": true}}`)
		require.Equal(t, []any{"refresh_token"}, grants(t, "device"))
		m := patch(t, "device", `{"auth": {"disabled": false}}`)
		require.Equal(t, []any{device}, authOf(m)["grant_types"])
		require.Equal(t, []any{"refresh_token", device}, grants(t, "device"))

		// A list of its own needs an issuer, so the issuer goes only with
		// it; back on, the default is both.
		requireTenantInvalid(t, env.Admin(t, http.MethodPatch, "/admin/v1/companies/device", `{"auth": {"issuer": false}}`), "auth.grant_types")
		require.Equal(t, []any{"refresh_token", device}, grants(t, "device"), "the refused patch changed nothing")
		patch(t, "device", `{"auth": {"issuer": false, "grant_types": null}}`)
		require.Nil(t, grants(t, "device"))
		patch(t, "device", `{"auth": {"issuer": true}}`)
		require.Equal(t, both, grants(t, "device"))
	})

	t.Run("created without an issuer", func(t *testing.T) {
		t.Parallel()
		createTenant(t, env, "later", "later.example", `{"auth": {"issuer": false}}`)
		require.Nil(t, grants(t, "later"))
		m := patch(t, "later", `{"auth": {"issuer": true, "disabled": true}}`)
		require.Equal(t, env.PublicURL("/t/later"), m["identifier"])
		require.Equal(t, []any{"refresh_token"}, grants(t, "later"))
		patch(t, "later", `{"auth": {"disabled": null}}`)
		require.Equal(t, both, grants(t, "later"))
	})
}

// TestTenantHostSplit: a Company domain serves none of the platform's
// routes, the platform's host none of a Company's documents, and the
// token endpoint, like every route, refuses two Authorization header
// fields.
func TestTenantHostSplit(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	createTenant(t, env, "acme", "acme.example", "")
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/api-keys", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	key, _ := resp.JSON(t)["key"].(string)
	require.NotEmpty(t, key)
	require.Equal(t, http.StatusOK, env.Do(t, http.MethodGet, env.URL("acme.example", "/.well-known/poppy.json"), nil).Status)

	for _, path := range []string{"/admin/v1/companies", "/company/v1/company", "/t/acme/poppy/excluded-tasks.json",
		"/.well-known/oauth-authorization-server/t/acme", "/healthz", "/metrics"} {
		for _, token := range []string{testkit.AdminToken, key} {
			resp := env.Do(t, http.MethodGet, env.URL("acme.example", path), nil, "Authorization", "Bearer "+token)
			requireTenantError(t, resp, http.StatusNotFound, "not_found")
		}
	}
	requireTenantError(t, env.Do(t, http.MethodGet, env.PublicURL("/.well-known/poppy.json"), nil), http.StatusNotFound, "not_found")

	req := peers.NewRequest(t, http.MethodPost, env.PublicURL("/t/acme/oauth/token"), "grant_type=refresh_token&refresh_token=x")
	req.Header.Add("Authorization", "Basic eDp5")
	req.Header.Add("Authorization", "Bearer nope")
	e := requireTenantError(t, peers.Send(t, env.Client, req), http.StatusBadRequest, "invalid_request")
	require.Contains(t, e.Description, "more than one Authorization header")
}
