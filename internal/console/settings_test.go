package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// signInAs signs in a new member with role and returns the client and the
// member.
func (r *rig) signInAs(t *testing.T, role console.Role) (*http.Client, console.Member) {
	t.Helper()
	m, password := r.member(t, role)
	c := r.client(t)
	resp := r.post(t, c, "/signin", url.Values{"email": {m.Email}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	return c, m
}

// settings returns the settings of the Company id as stored.
func (r *rig) settings(t *testing.T, id int64) tenant.Settings {
	t.Helper()
	co, err := r.env.Platform.Tenants.GetByID(context.Background(), id)
	require.NoError(t, err)
	return co.Settings
}

// auditLog returns the entries of the Company id's audit log made in the
// console, newest first (creating the Company made one through the admin
// API).
func (r *rig) auditLog(t *testing.T, id int64) []audit.Entry {
	t.Helper()
	all, err := audit.NewStore(r.env.Pool, 0).List(context.Background(), id, 0, 500)
	require.NoError(t, err)
	var out []audit.Entry
	for _, e := range all {
		if e.Actor.Kind == audit.KindStaff {
			out = append(out, e)
		}
	}
	return out
}

// postPage sends form with c's CSRF token and returns the answer with its
// body.
func (r *rig) postPage(t *testing.T, c *http.Client, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	form.Set("csrf", r.csrf(t, c))
	resp, err := c.PostForm(r.url(path), form)
	require.NoError(t, err)
	return resp, readBody(t, resp)
}

var versionField = regexp.MustCompile(`name="version" value="([^"]*)"`)

// organizationForm reads the organization form as c sees it: its inputs
// with their values, as a browser would post them unchanged.
func (r *rig) organizationForm(t *testing.T, c *http.Client) url.Values {
	t.Helper()
	resp, body := r.get(t, c, "/settings/organization")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	m := versionField.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	s := r.settings(t, r.ID)
	return url.Values{
		"version":               {html.UnescapeString(m[1])},
		"organization.name":     {s.Organization.Name},
		"organization.domain":   {s.Organization.Domain},
		"organization.logo_uri": {s.Organization.LogoURI},
		"domains":               {strings.Join(s.Domains, "\n")},
	}
}

// TestSettingsRoles checks who may open and use the Settings pages: owners
// and admins change settings; only owners see API keys; auditors read the
// audit log; agents none of these. A refused change changes nothing.
func TestSettingsRoles(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	owner, _ := r.signInAs(t, console.RoleOwner)
	admin, _ := r.signInAs(t, console.RoleAdmin)
	agent, _ := r.signInAs(t, console.RoleAgent)
	auditor, _ := r.signInAs(t, console.RoleAuditor)

	for _, tc := range []struct {
		path    string
		allowed map[*http.Client]bool
	}{
		{"/settings", map[*http.Client]bool{owner: true, admin: true}},
		{"/settings/agents", map[*http.Client]bool{owner: true, admin: true}},
		{"/settings/console", map[*http.Client]bool{owner: true}},
		{"/settings/apis", map[*http.Client]bool{owner: true, admin: true}},
		{"/settings/webhook", map[*http.Client]bool{owner: true, admin: true}},
		{"/settings/api-keys", map[*http.Client]bool{owner: true}},
		{"/audit", map[*http.Client]bool{owner: true, admin: true, auditor: true}},
	} {
		for c, name := range map[*http.Client]string{owner: "owner", admin: "admin", agent: "agent", auditor: "auditor"} {
			resp, body := r.get(t, c, tc.path)
			if tc.allowed[c] {
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", name, tc.path, body)
			} else {
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", name, tc.path)
			}
		}
	}

	before := r.settings(t, r.ID)
	form := r.organizationForm(t, owner)
	form.Set("organization.name", "Renamed")
	for _, c := range []*http.Client{agent, auditor} {
		resp, _ := r.postPage(t, c, "/settings/organization", form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		resp, _ = r.postPage(t, c, "/settings/webhook", url.Values{})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}
	for _, c := range []*http.Client{admin, agent, auditor} {
		resp, body := r.postPage(t, c, "/settings/api-keys", url.Values{"name": {"sneaky"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.NotContains(t, body, tenant.APIKeyPrefix)
		// Only owners decide whether staff need a second factor.
		resp, _ = r.postPage(t, c, "/settings/console", url.Values{"console.require_second_factor": {"on"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}
	require.Equal(t, before, r.settings(t, r.ID))
	keys, err := r.env.Platform.Tenants.ListAPIKeys(context.Background(), r.ID)
	require.NoError(t, err)
	require.Empty(t, keys)
	require.Empty(t, r.auditLog(t, r.ID))
}

// TestSettingsForm changes a setting through its form: a bad value is
// shown beside its input with what was entered, and changes nothing; a
// good one is saved and audited in the member's name; a form filled
// before someone else's change is refused as stale; a form without a
// valid CSRF token is refused.
func TestSettingsForm(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, m := r.signInAs(t, console.RoleAdmin)
	before := r.settings(t, r.ID)

	// Bad values: the API's field errors, each beside its input; the
	// entered values kept; nothing written.
	form := r.organizationForm(t, c)
	form.Set("organization.name", "")
	form.Set("domains", "shop.acme.example\r\nbad..host")
	resp, body := r.postPage(t, c, "/settings/organization", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	require.Regexp(t, `<p class="field-error" id="f-organization-name-error">is required</p>`, body)
	require.Regexp(t, `id="f-domains"[^>]*aria-invalid="true"`, body)
	require.Regexp(t, `<p class="field-error" id="f-domains-error">domains\[1\]: [^<]+</p>`, body)
	require.Contains(t, body, "shop.acme.example\r\nbad..host</textarea>", "the entered value is kept")
	require.Equal(t, before, r.settings(t, r.ID))
	require.Empty(t, r.auditLog(t, r.ID))

	// A value that is not a number, before the API sees it.
	resp, body = r.postPage(t, c, "/settings/agents", url.Values{"version": {form.Get("version")},
		"agents.accept": {"all"}, "rate_limits.per_agent": {"lots"}, "rate_limits.per_session": {"600"},
		"rate_limits.per_address": {"1200"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `id="f-rate-limits-per-agent-error">must be a whole number<`)
	require.Contains(t, body, `value="lots"`)
	require.Equal(t, before, r.settings(t, r.ID))

	// Without the CSRF token, or with another's: refused, nothing changed.
	form.Set("organization.name", "Acme Renamed")
	form.Set("domains", "")
	for _, token := range []string{"", "not-the-token"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Del("csrf")
		if token != "" {
			f.Set("csrf", token)
		}
		resp := r.postRaw(t, c, "/settings/organization", f)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}
	require.Equal(t, before, r.settings(t, r.ID))

	// A good value: saved, and audited in the member's name.
	resp, _ = r.postPage(t, c, "/settings/organization", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/settings/organization?saved=1", resp.Header.Get("Location"))
	require.Equal(t, "Acme Renamed", r.settings(t, r.ID).Organization.Name)
	entries := r.auditLog(t, r.ID)
	require.Len(t, entries, 1)
	require.Equal(t, audit.Actor{Kind: audit.KindStaff, ID: m.ID, Name: m.Email}, entries[0].Actor)
	require.Equal(t, "POST /console/{slug}/settings/{section}", entries[0].Action)
	require.Equal(t, []string{"organization.name"}, entries[0].Fields)
	_, body = r.get(t, c, "/settings/organization?saved=1")
	require.Contains(t, body, `value="Acme Renamed"`)

	// The same form again, now stale: someone changed the Company since.
	form.Set("organization.name", "Acme Stale")
	resp, body = r.postPage(t, c, "/settings/organization", form)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, `id="stale"`)
	require.Contains(t, body, `value="Acme Stale"`, "the entered value is kept")
	require.Equal(t, "Acme Renamed", r.settings(t, r.ID).Organization.Name)
	require.Len(t, r.auditLog(t, r.ID), 1)

	// A change through the admin API makes an open form stale too.
	form = r.organizationForm(t, c)
	resp2 := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.Slug,
		json.RawMessage(`{"organization": {"logo_uri": "https://acme.example/logo.png"}}`))
	require.Equal(t, http.StatusOK, resp2.Status, "%s", resp2.Body)
	form.Set("organization.name", "Acme Late")
	resp, _ = r.postPage(t, c, "/settings/organization", form)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Equal(t, "Acme Renamed", r.settings(t, r.ID).Organization.Name)

	// Scopes are replaced as a whole: a removed line removes the scope.
	r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.Slug,
		json.RawMessage(`{"auth": {"scopes": {"orders": "Your orders", "profile": "Your profile"}}}`))
	resp, body = r.get(t, c, "/settings/sign-in")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "orders Your orders\nprofile Your profile</textarea>")
	v := versionField.FindStringSubmatch(body)
	resp, body = r.postPage(t, c, "/settings/sign-in", url.Values{"version": {html.UnescapeString(v[1])},
		"auth.issuer": {"on"}, "auth.scopes": {"orders Your orders"}, "auth.dpop": {"off"},
		"auth.token_lifetimes.access_seconds": {"0"}, "auth.token_lifetimes.refresh_seconds": {"0"},
		"sessions.idle_timeout_seconds": {"2592000"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, map[string]string{"orders": "Your orders"}, r.settings(t, r.ID).Auth.Scopes)
	require.Equal(t, []string{"auth.scopes.profile"}, r.auditLog(t, r.ID)[0].Fields)
}

// TestSettingsAPIKeys makes, lists and revokes API keys as an owner: a new
// key is shown once and works at the Company API; a revoked one does not;
// another Company's key cannot be revoked; forms without the CSRF token
// change nothing; each change is audited.
func TestSettingsAPIKeys(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, m := r.signInAs(t, console.RoleOwner)
	ctx := context.Background()

	for _, form := range []url.Values{{"name": {"deploy"}}, {"name": {"deploy"}, "csrf": {"wrong"}}} {
		resp := r.postRaw(t, c, "/settings/api-keys", form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}
	resp, body := r.postPage(t, c, "/settings/api-keys", url.Values{"name": {"bad\x01name"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `id="key-name-error"`)
	// A NUL byte, which PostgreSQL refuses, is refused with the form.
	resp, _ = r.postPage(t, c, "/settings/api-keys", url.Values{"name": {"bad\x00name"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	keys, err := r.env.Platform.Tenants.ListAPIKeys(ctx, r.ID)
	require.NoError(t, err)
	require.Empty(t, keys)

	resp, body = r.postPage(t, c, "/settings/api-keys", url.Values{"name": {"deploy"}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	secret := regexp.MustCompile(`value="(` + tenant.APIKeyPrefix + `[^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, secret, body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	got := r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/company"), nil, "Authorization", "Bearer "+secret[1])
	require.Equal(t, http.StatusOK, got.Status, "the new key works")
	_, body = r.get(t, c, "/settings/api-keys")
	require.Contains(t, body, "deploy")
	require.NotContains(t, body, secret[1], "shown once")

	// The CSRF token in its header instead of the form: the form is read
	// all the same.
	req, err := http.NewRequest(http.MethodPost, r.url("/settings/api-keys"), strings.NewReader("name=by+header"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", r.csrf(t, c))
	resp, err = c.Do(req)
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	keys, err = r.env.Platform.Tenants.ListAPIKeys(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "by header", keys[0].Name)
	require.NoError(t, r.env.Platform.Tenants.RevokeAPIKey(ctx, r.ID, keys[0].ID))
	keys = keys[1:]
	revoke := "/settings/api-keys/" + itoa(keys[0].ID) + "/revoke"

	// Another Company's key is not found, and stays live.
	_, otherID := r.company(t, "other")
	other, otherSecret, err := r.env.Platform.Tenants.CreateAPIKey(ctx, otherID, "theirs")
	require.NoError(t, err)
	resp, _ = r.postPage(t, c, "/settings/api-keys/"+itoa(other.ID)+"/revoke", url.Values{})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	got = r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/company"), nil, "Authorization", "Bearer "+otherSecret)
	require.Equal(t, http.StatusOK, got.Status)

	resp = r.postRaw(t, c, revoke, url.Values{})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	got = r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/company"), nil, "Authorization", "Bearer "+secret[1])
	require.Equal(t, http.StatusOK, got.Status, "still live")

	resp, _ = r.postPage(t, c, revoke, url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got = r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/company"), nil, "Authorization", "Bearer "+secret[1])
	require.Equal(t, http.StatusUnauthorized, got.Status, "revoked")

	entries := r.auditLog(t, r.ID)
	require.Len(t, entries, 3)
	staff := audit.Actor{Kind: audit.KindStaff, ID: m.ID, Name: m.Email}
	require.Equal(t, staff, entries[0].Actor)
	require.Equal(t, "POST /console/{slug}/settings/api-keys/{id}/revoke", entries[0].Action)
	for _, e := range entries[1:] {
		require.Equal(t, staff, e.Actor)
		require.Equal(t, "POST /console/{slug}/settings/api-keys", e.Action)
		require.Equal(t, []string{"name"}, e.Fields)
	}
}

// TestSettingsWebhookSecret rotates the webhook secret as an admin: shown
// once, audited; without the CSRF token nothing is rotated.
func TestSettingsWebhookSecret(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, m := r.signInAs(t, console.RoleAdmin)
	resp := r.postRaw(t, c, "/settings/webhook", url.Values{"csrf": {"wrong"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	var n int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM conversation_webhook_secrets WHERE company_id = $1`, r.ID).Scan(&n))
	require.Zero(t, n)
	require.Empty(t, r.auditLog(t, r.ID))

	resp, body := r.postPage(t, c, "/settings/webhook", url.Values{})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, `value="whsec_[A-Za-z0-9+/=&#;]+"`, body)
	require.NoError(t, r.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM conversation_webhook_secrets WHERE company_id = $1`, r.ID).Scan(&n))
	require.Equal(t, 1, n)
	_, body = r.get(t, c, "/settings/webhook")
	require.NotContains(t, body, "whsec_", "shown once")
	entries := r.auditLog(t, r.ID)
	require.Len(t, entries, 1)
	require.Equal(t, audit.Actor{Kind: audit.KindStaff, ID: m.ID, Name: m.Email}, entries[0].Actor)
	require.Equal(t, "POST /console/{slug}/settings/webhook", entries[0].Action)
}

// TestSettingsRegistrations shows the Company's APIs and tools, and not
// another Company's, by name; another Company's settings pages are closed
// to the Company's staff.
func TestSettingsRegistrations(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, _ := r.signInAs(t, console.RoleAdmin)
	_, otherID := r.company(t, "other")
	store := registry.NewStore(r.env.Pool)
	ctx := context.Background()
	tool := func(name, desc string) *registry.Tool {
		return &registry.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(`{"type":"object"}`),
			Scopes: []string{}, URL: "https://tools.acme.example/" + name, TimeoutSeconds: 30}
	}
	_, err := store.PutTool(ctx, r.ID, tool("track", "Track a parcel <b>now</b>"), time.Now())
	require.NoError(t, err)
	_, err = store.PutTool(ctx, otherID, tool("secret-tool", "Their secret tool"), time.Now())
	require.NoError(t, err)

	resp, body := r.get(t, c, "/settings/apis")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Track a parcel &lt;b&gt;now&lt;/b&gt;", "text, never HTML")
	require.NotContains(t, body, "secret-tool")
	resp, body = r.get(t, c, "/settings/tools/track")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "https://tools.acme.example/track")
	resp, body = r.get(t, c, "/settings/tools/secret-tool")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NotContains(t, body, "Their secret tool")
	resp, _ = r.get(t, c, "/settings/apis/orders")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	// Another Company's settings pages: a session of acme is nothing
	// there, and its CSRF token changes nothing.
	before := r.settings(t, otherID)
	resp, err = c.Get(r.env.PublicURL("/console/other/settings/organization"))
	require.NoError(t, err)
	body = readBody(t, resp)
	require.NotEqual(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, body, "Company other")
	resp, err = c.PostForm(r.env.PublicURL("/console/other/settings/organization"), url.Values{
		"csrf": {r.csrf(t, c)}, "organization.name": {"Taken over"}, "organization.domain": {"other.example"}})
	require.NoError(t, err)
	readBody(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, before, r.settings(t, otherID))
}

// TestAuditLogPage pages through the Company's audit log, newest first,
// without another Company's entries.
func TestAuditLogPage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, _ := r.signInAs(t, console.RoleAuditor)
	_, otherID := r.company(t, "other")
	_, err := r.env.Pool.Exec(context.Background(), `INSERT INTO audit_log (company_id, company_slug, actor_kind,
		actor_id, actor_name, action, path, fields)
		SELECT $1, 'acme', 'staff', 7, 'Ada', 'POST /console/{slug}/settings/{section}', '/x', ARRAY['entry-' || i]
		FROM generate_series(1, 60) AS i`, r.ID)
	require.NoError(t, err)
	_, err = r.env.Pool.Exec(context.Background(), `INSERT INTO audit_log (company_id, company_slug, actor_kind,
		actor_id, action, path, fields) VALUES ($1, 'other', 'api_key', 1, 'PATCH /x', '/x', ARRAY['theirs'])`, otherID)
	require.NoError(t, err)

	resp, body := r.get(t, c, "/audit")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 50, strings.Count(body, "<code>entry-"))
	require.Contains(t, body, "<code>entry-60</code>")
	require.Contains(t, body, "staff Ada (#7)")
	require.NotContains(t, body, "theirs")
	next := regexp.MustCompile(`href="/console/acme(/audit\?before=\d+)" rel="next"`).FindStringSubmatch(body)
	require.NotNil(t, next, body)
	_, body = r.get(t, c, next[1])
	require.Equal(t, 10, strings.Count(body, "<code>entry-"))
	require.Contains(t, body, "<code>entry-1</code>")
	require.NotContains(t, body, `rel="next"`)

	// A cursor that names no entry is a page that does not exist, not the
	// first page again.
	for _, bad := range []string{"x", "-1", "0", "1e3"} {
		resp, body := r.get(t, c, "/audit?before="+bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "before=%s", bad)
		require.NotContains(t, body, "<code>entry-", "before=%s", bad)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
