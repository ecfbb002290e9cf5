package tenant_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestPatchSettingsAsTheAPI checks that Admin.PatchSettings, which the
// console changes settings through, is PATCH of a Company without HTTP:
// Version is the ETag the API answers with; a bad value is refused with
// the same field errors, by path, as the API's body lists (FieldErrors),
// a taken domain too, and nothing is written; a stale or missing version
// is precondition_failed and nothing is written; the current one applies
// the patch.
func TestPatchSettingsAsTheAPI(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", `{"auth": {"issuer": true}}`)
	createCompany(t, env, "other", "other.example", `{}`)
	admin := tenant.NewAdmin(env.Tenants, env.Accounts, env.URLs, true)
	ctx := context.Background()
	id := companyID(t, env, "acme")

	version := func() string {
		t.Helper()
		c, err := env.Tenants.Get(ctx, "acme")
		require.NoError(t, err)
		v, err := admin.Version(c)
		require.NoError(t, err)
		tag, _ := companyTag(t, env, "acme")
		require.Equal(t, tag, v, "Version is the API's ETag")
		return v
	}
	v := version()

	// The API's field errors of a patch, as its body lists them.
	apiFields := func(patch string, status int) []httpx.FieldError {
		t.Helper()
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/acme", json.RawMessage(patch))
		require.Equal(t, status, resp.Status, "body: %s", resp.Body)
		var body struct {
			Fields []httpx.FieldError `json:"fields"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &body))
		return body.Fields
	}

	for _, tc := range []struct {
		name, patch string
		status      int
		fields      []string
	}{
		{"invalid", `{"organization": {"name": ""}, "domains": ["shop.acme.example", "bad..host"],
			"auth": {"scopes": {"bad scope": "x"}}, "rate_limits": {"per_agent": 0}}`, http.StatusBadRequest,
			[]string{"organization.name", "domains[1]", "auth.scopes.bad scope", "rate_limits.per_agent"}},
		{"undecodable", `{"sessions": {"idle_timeout_seconds": "soon"}}`, http.StatusBadRequest,
			[]string{"sessions.idle_timeout_seconds"}},
		{"taken domain", `{"domains": ["other.example"]}`, http.StatusConflict, []string{"domains[0]"}},
	} {
		_, err := admin.PatchSettings(ctx, id, httpx.MatchTag(v), []byte(tc.patch))
		require.Error(t, err, tc.name)
		got := tenant.FieldErrors(err)
		var names []string
		for _, f := range got {
			require.NotEmpty(t, f.Message, "%s: %s", tc.name, f.Field)
			names = append(names, f.Field)
		}
		require.Equal(t, tc.fields, names, tc.name)
		require.Equal(t, apiFields(tc.patch, tc.status), got, "%s: the API's body names the same fields", tc.name)
		require.Equal(t, v, version(), "%s: nothing was written", tc.name)
	}

	for _, stale := range []string{`"stale"`, ""} {
		_, err := admin.PatchSettings(ctx, id, httpx.MatchTag(stale), []byte(`{"organization": {"name": "Acme Two"}}`))
		require.Equal(t, httpx.CodePreconditionFailed, httpx.AsError(err).Code, "version %q", stale)
		require.Nil(t, tenant.FieldErrors(err))
		require.Equal(t, v, version(), "version %q: nothing was written", stale)
	}

	c, err := admin.PatchSettings(ctx, id, httpx.MatchTag(v), []byte(`{"organization": {"name": "Acme Two"}}`))
	require.NoError(t, err)
	require.Equal(t, "Acme Two", c.Settings.Organization.Name)
	now := version()
	require.NotEqual(t, v, now)
	got, err := admin.Version(c)
	require.NoError(t, err)
	require.Equal(t, now, got, "the Company returned is the one stored")
	_, err = admin.PatchSettings(ctx, id, httpx.MatchTag(v), []byte(`{"organization": {"name": "Acme Three"}}`))
	require.Equal(t, httpx.CodePreconditionFailed, httpx.AsError(err).Code, "the old version is stale now")
}
