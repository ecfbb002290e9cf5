package tenant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

func TestCreateCompanyConflicts(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "alpha", "alpha.example", `{"domains": ["alpha.example.org", "shop.alpha.example"]}`)
	before := domainsOf(t, env, "alpha")

	tests := []struct {
		name  string
		body  string
		field string
	}{
		{"organization.domain taken", minimalBody("beta", "alpha.example"), "organization.domain"},
		{"organization.domain is another's extra domain", minimalBody("beta", "shop.alpha.example"), "organization.domain"},
		{"extra domain taken", merge(t, minimalBody("beta", "beta.example"), `{"domains": ["beta.example.org", "alpha.example.org"]}`), "domains[1]"},
		{"extra domain is another's primary", merge(t, minimalBody("beta", "beta.example"), `{"domains": ["alpha.example"]}`), "domains[0]"},
		{"slug taken", minimalBody("alpha", "beta.example"), "slug"},
		{"slug taken with extra domains", merge(t, minimalBody("alpha", "beta.example"), `{"domains": ["beta.example.org"]}`), "slug"},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				slug, settings, err := tenant.DecodeCompany([]byte(tt.body))
				require.NoError(t, err)
				_, err = env.Tenants.Create(context.Background(), slug, settings)
				var ce *tenant.ConflictError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tt.field, ce.Field)
				require.NotEmpty(t, ce.Message)
			})
		}
	})
	// The admin API answers a conflict 409, naming the field.
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", tests[0].body)
	e := requireError(t, resp, http.StatusConflict, "conflict")
	require.Len(t, e.Fields, 1, "body: %s", resp.Body)
	require.Equal(t, tests[0].field, e.Fields[0].Field)

	// Nothing was written, and alpha still owns its domains.
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM companies`))
	require.Equal(t, before, domainsOf(t, env, "alpha"))
	require.Equal(t, 3, count(t, env, `SELECT count(*) FROM company_domains`))
	for _, d := range []string{"alpha.example", "alpha.example.org", "shop.alpha.example"} {
		r := poppyJSON(t, env, d)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "Company alpha", orgName(t, r))
	}
	for _, d := range []string{"beta.example", "beta.example.org"} {
		requireError(t, poppyJSON(t, env, d), http.StatusNotFound, "not_found")
	}
}

func TestGetAndListCompanies(t *testing.T) {
	t.Parallel()
	env := setup(t)

	// With no Company, the list is an empty array.
	resp := env.Admin(t, http.MethodGet, "/admin/v1/companies", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.JSONEq(t, `{"companies": []}`, string(resp.Body))

	testGetCompany(t, env)
	testListCompanies(t, env)
}

func testGetCompany(t *testing.T, env *kit) {
	created := createCompany(t, env, "acme", "acme.example", "")

	resp := env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, created, resp.JSON(t))
	requireError(t, env.Admin(t, http.MethodPost, "/admin/v1/companies/acme", nil), http.StatusMethodNotAllowed, "method_not_allowed")

	for _, path := range []string{"/admin/v1/companies/nosuch", "/admin/v1/companies/Acme",
		"/admin/v1/companies/-acme", "/admin/v1/companies/acme%20", "/admin/v1/companies/acme/nosuch"} {
		requireError(t, env.Admin(t, http.MethodGet, path, nil), http.StatusNotFound, "not_found")
	}
	requireError(t, env.Admin(t, http.MethodPut, "/admin/v1/companies/acme", minimalBody("acme", "acme.example")),
		http.StatusMethodNotAllowed, "method_not_allowed")
	require.Equal(t, http.StatusNoContent, env.Admin(t, http.MethodDelete, "/admin/v1/companies/acme", nil).Status)
}

func testListCompanies(t *testing.T, env *kit) {
	// Created out of order; listed by slug.
	slugs := []string{"delta", "alpha", "echo", "charlie", "bravo"}
	for _, s := range slugs {
		createCompany(t, env, s, s+".example", "")
	}
	sorted := []string{"alpha", "bravo", "charlie", "delta", "echo"}

	type page struct {
		Companies []map[string]any `json:"companies"`
		Next      *string          `json:"next"`
	}
	list := func(query string) page {
		t.Helper()
		resp := env.Admin(t, http.MethodGet, "/admin/v1/companies"+query, nil)
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
		var p page
		require.NoError(t, json.Unmarshal(resp.Body, &p))
		require.NotNil(t, p.Companies, "companies must be an array: %s", resp.Body)
		return p
	}
	slugsOf := func(p page) []string {
		out := []string{}
		for _, c := range p.Companies {
			out = append(out, c["slug"].(string))
		}
		return out
	}

	// One page with everything: full views, no next.
	all := list("")
	require.Equal(t, sorted, slugsOf(all))
	require.Nil(t, all.Next)
	require.Equal(t, "Company alpha", all.Companies[0]["organization"].(map[string]any)["name"])
	require.Equal(t, env.URLs.Public.String()+"/t/alpha", all.Companies[0]["identifier"])

	// Paging with limit and after visits each Company once, in order.
	var seen []string
	after := ""
	for range 10 {
		q := url.Values{"limit": {"2"}}
		if after != "" {
			q.Set("after", after)
		}
		p := list("?" + q.Encode())
		require.LessOrEqual(t, len(p.Companies), 2)
		seen = append(seen, slugsOf(p)...)
		if p.Next == nil {
			break
		}
		require.Equal(t, slugsOf(p)[len(p.Companies)-1], *p.Next)
		after = *p.Next
	}
	require.Equal(t, sorted, seen)

	tests := []struct {
		query string
		want  []string
	}{
		{"?limit=1", []string{"alpha"}},
		{"?limit=500", sorted},
		{"?after=bravo", []string{"charlie", "delta", "echo"}},
		{"?after=b", []string{"bravo", "charlie", "delta", "echo"}},
		{"?after=echo", []string{}},
		{"?after=zzz&limit=3", []string{}},
		{"?after=alpha&limit=2", []string{"bravo", "charlie"}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, slugsOf(list(tt.query)), tt.query)
	}
	require.Equal(t, "alpha", *list("?limit=1").Next)
	require.Nil(t, list("?after=charlie&limit=3").Next)

	for _, bad := range []string{"0", "-1", "501", "abc", "1.5", "1e2", "%20"} {
		requireInvalid(t, env.Admin(t, http.MethodGet, "/admin/v1/companies?limit="+bad, nil), "limit")
	}
}

func TestPatchCompany(t *testing.T) {
	t.Parallel()
	env := setup(t)
	t.Run("merge patch", func(t *testing.T) {
		t.Parallel()
		testPatchMerge(t, env)
	})
	t.Run("media type", func(t *testing.T) {
		t.Parallel()
		testPatchMediaType(t, env)
	})
	t.Run("domains", func(t *testing.T) {
		t.Parallel()
		testPatchDomains(t, env)
	})
}

func testPatchMerge(t *testing.T, env *kit) {
	const start = `{
		"organization": {"logo_uri": "https://acme.example/logo.png"},
		"domains": ["acme.example.org"],
		"auth": {"grant_types": ["authorization_code"], "scopes": {"orders": "Your orders"},
			"token_lifetimes": {"access_seconds": 600, "refresh_seconds": 7200}},
		"conversations": {"enabled": false, "access": "signed_in"},
		"feedback": {"enabled": false, "alternatives": [{"task": "Pay with a gift card", "alternative": {"instructions": "Gift cards are sold in our shops."}}]},
		"web": {"browser_join": true},
		"operations": {"enabled": true, "web": false},
		"excluded_tasks": [{"task": "Close an account"}],
		"skill_index": {"$schema": "` + schema020 + `", "skills": []},
		"agents": {"accept": "listed", "client_ids": ["https://agent.example/agent.json"],
			"sign_in_refused": {"https://agent.example/agent.json": ["authorization_code"]}},
		"sessions": {"idle_timeout_seconds": 3600},
		"rate_limits": {"per_agent": 100, "per_session": 10, "per_address": 50}
	}`

	tests := []struct {
		name  string
		patch string
		want  string // merge patch from the created view to the expected one
	}{
		{
			name:  "change one field",
			patch: `{"organization": {"name": "Acme Corp"}}`,
			want:  `{"organization": {"name": "Acme Corp"}}`,
		},
		{
			name:  "change nested fields, keep siblings",
			patch: `{"auth": {"scopes": {"addresses": "Your addresses"}}, "web": {"origin": "https://origin.acme.example"}}`,
			want:  `{"auth": {"scopes": {"orders": "Your orders", "addresses": "Your addresses"}}, "web": {"origin": "https://origin.acme.example"}}`,
		},
		{
			name:  "null removes a map entry",
			patch: `{"auth": {"scopes": {"orders": null}}}`,
			want:  `{"auth": {"scopes": {"orders": null}}}`,
		},
		{
			name:  "null resets settings to their defaults",
			patch: `{"conversations": null, "feedback": null, "web": null, "operations": null, "organization": {"logo_uri": null}, "skill_index": null}`,
			want: `{"conversations": {"enabled": true, "access": "session"}, "feedback": {"enabled": true, "alternatives": []},
				"mcp": {"signed_out": false}, "web": {"browser_join": false}, "operations": {"enabled": false, "web": false},
				"organization": {"logo_uri": null}, "skill_index": null}`,
		},
		{
			name:  "null resets lists to empty",
			patch: `{"domains": null, "excluded_tasks": null}`,
			want:  `{"domains": [], "excluded_tasks": []}`,
		},
		{
			name:  "null resets the new settings to their defaults",
			patch: `{"agents": null, "sessions": null, "rate_limits": null, "feedback": {"alternatives": null}}`,
			want: `{"agents": {"accept": "all", "client_ids": [], "sign_in_refused": {"https://agent.example/agent.json": null}},
				"sessions": {"idle_timeout_seconds": 2592000},
				"rate_limits": {"per_agent": 6000, "per_session": 600, "per_address": 1200}, "feedback": {"alternatives": []}}`,
		},
		{
			name:  "null resets one member, keeps its siblings",
			patch: `{"rate_limits": {"per_session": null}, "agents": {"client_ids": null}}`,
			want:  `{"rate_limits": {"per_session": 600}, "agents": {"client_ids": []}}`,
		},
		{
			name:  "change one rate limit and the idle timeout",
			patch: `{"rate_limits": {"per_address": 5}, "sessions": {"idle_timeout_seconds": 60}}`,
			want:  `{"rate_limits": {"per_address": 5}, "sessions": {"idle_timeout_seconds": 60}}`,
		},
		{
			name:  "lists replace whole",
			patch: `{"agents": {"accept": "unlisted", "client_ids": ["https://bad.example/agent.json"]}, "feedback": {"alternatives": [{"task": "Track a parcel", "alternative": {"instructions": "See the email."}}]}}`,
			want:  `{"agents": {"accept": "unlisted", "client_ids": ["https://bad.example/agent.json"]}, "feedback": {"alternatives": [{"task": "Track a parcel", "alternative": {"instructions": "See the email."}}]}}`,
		},
		{
			name:  "null grant types go back to the default: both, left out of the view",
			patch: `{"auth": {"grant_types": null}}`,
			want:  `{"auth": {"grant_types": null}}`,
		},
		{
			name:  "empty grant types are the default too",
			patch: `{"auth": {"grant_types": []}}`,
			want:  `{"auth": {"grant_types": null}}`,
		},
		{
			// The start has a list of its own, which needs an issuer; with
			// the default grant types the issuer goes with less (see
			// TestSignInRoundTrips in internal/platform).
			name:  "turn the issuer off",
			patch: `{"auth": {"issuer": false, "grant_types": null, "scopes": null, "token_lifetimes": null}, "domains": null, "conversations": {"access": "session"}}`,
			want: `{"auth": {"issuer": false, "grant_types": null, "scopes": {"orders": null}, "token_lifetimes": {"access_seconds": 0, "refresh_seconds": 0}}, "domains": [], "conversations": {"access": "session"},
				"identifier": "https://{domain}", "issuer": null}`,
		},
		{
			name:  "change both token lifetimes",
			patch: `{"auth": {"token_lifetimes": {"access_seconds": 86400, "refresh_seconds": 31536000}}}`,
			want:  `{"auth": {"token_lifetimes": {"access_seconds": 86400, "refresh_seconds": 31536000}}}`,
		},
		{
			name:  "change one token lifetime, keep the other",
			patch: `{"auth": {"token_lifetimes": {"access_seconds": 60}}}`,
			want:  `{"auth": {"token_lifetimes": {"access_seconds": 60}}}`,
		},
		{
			name:  "0 or null puts one token lifetime back to the default",
			patch: `{"auth": {"token_lifetimes": {"access_seconds": 0, "refresh_seconds": null}}}`,
			want:  `{"auth": {"token_lifetimes": {"access_seconds": 0, "refresh_seconds": 0}}}`,
		},
		{
			name:  "null resets the token lifetimes, keeps the rest of auth",
			patch: `{"auth": {"token_lifetimes": null}}`,
			want:  `{"auth": {"token_lifetimes": {"access_seconds": 0, "refresh_seconds": 0}}}`,
		},
		{
			name:  "refuse sign-in to another client_id, keep the first",
			patch: `{"agents": {"sign_in_refused": {"https://other.example/agent.json": []}}}`,
			want:  `{"agents": {"sign_in_refused": {"https://other.example/agent.json": []}}}`,
		},
		{
			name:  "a client_id's list of refused sign-in types replaces whole",
			patch: `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": ["urn:ietf:params:oauth:grant-type:device_code", "authorization_code"]}}}`,
			want:  `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": ["urn:ietf:params:oauth:grant-type:device_code", "authorization_code"]}}}`,
		},
		{
			name:  "an empty list refuses every sign-in type",
			patch: `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": []}}}`,
			want:  `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": []}}}`,
		},
		{
			name:  "null lets a client_id sign in again",
			patch: `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": null}}}`,
			want:  `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": null}}}`,
		},
		{
			name:  "null resets sign_in_refused to empty, keeps the rest of agents",
			patch: `{"agents": {"sign_in_refused": null}}`,
			want:  `{"agents": {"sign_in_refused": {"https://agent.example/agent.json": null}}}`,
		},
		{
			name:  "turn operations off",
			patch: `{"operations": {"enabled": false}}`,
			want:  `{"operations": {"enabled": false}}`,
		},
		{
			name:  "empty patch changes nothing",
			patch: `{}`,
			want:  `{}`,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slug := fmt.Sprintf("patch%d", i)
			domain := slug + ".example"
			startFor := strings.ReplaceAll(start, "acme.example.org", slug+".example.org")
			created := createCompany(t, env, slug, domain, startFor)

			resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+slug, tt.patch)
			require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
			got := resp.JSON(t)
			require.False(t, timeOf(t, got["updated_at"]).Before(timeOf(t, created["updated_at"])))
			delete(got, "updated_at")
			delete(created, "updated_at")
			createdJSON, err := json.Marshal(created)
			require.NoError(t, err)
			want := merge(t, string(createdJSON), strings.ReplaceAll(tt.want, "{domain}", domain))
			gotJSON, err := json.Marshal(got)
			require.NoError(t, err)
			require.JSONEq(t, want, string(gotJSON))

			// The change is stored.
			again := env.Admin(t, http.MethodGet, "/admin/v1/companies/"+slug, nil).JSON(t)
			delete(again, "updated_at")
			againJSON, err := json.Marshal(again)
			require.NoError(t, err)
			require.JSONEq(t, want, string(againJSON))
		})
	}
}

// timeOf parses a timestamp of a JSON body.
func timeOf(t *testing.T, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "not a timestamp: %v", v)
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts
}

func testPatchMediaType(t *testing.T, env *kit) {
	createCompany(t, env, "mediatype", "mediatype.example", "")
	resp := env.Do(t, http.MethodPatch, env.PublicURL("/admin/v1/companies/mediatype"), `{"organization": {"name": "Merged"}}`,
		append(bearer(adminToken), "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "Merged", orgName(t, resp))
}

// TestPatchCompanyRefused checks patches that must change nothing.
func TestPatchCompanyRefused(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", `{"domains": ["acme.example.org"], "auth": {"scopes": {"orders": "Your orders"}},
		"apis": [{"type": "mcp", "url": "https://mcp.acme.example/mcp"}],
		"feedback": {"alternatives": [{"task": "Track a parcel", "alternative": {"references": [{"type": "mcp", "url": "https://mcp.acme.example/mcp"}]}}]}}`)
	createCompany(t, env, "other", "other.example", `{"domains": ["other.example.org"]}`)
	before := env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil)
	require.Equal(t, http.StatusOK, before.Status)

	tests := []struct {
		name        string
		patch       string
		contentType string
		status      int
		code        string
		field       string
	}{
		{"unknown field", `{"bogus": true}`, "", 400, "invalid_request", "bogus"},
		{"unknown nested field", `{"organization": {"nickname": "A"}}`, "", 400, "invalid_request", "organization.nickname"},
		// Member names are read exactly (issue 25): another case is another,
		// unknown, name; a name twice in one object and text that is not
		// UTF-8 are refused, not resolved or repaired.
		{"member in upper case", `{"ORGANIZATION": {"name": "X"}}`, "", 400, "invalid_request", "ORGANIZATION"},
		{"nested member in another case", `{"organization": {"Name": "X"}}`, "", 400, "invalid_request", "organization.Name"},
		{"member twice", `{"rate_limits": {"per_agent": 5}, "rate_limits": {"per_agent": 6}}`, "", 400, "invalid_request", "rate_limits"},
		{"member twice in other cases", `{"rate_limits": {"per_agent": 5}, "RATE_LIMITS": {"per_agent": 6}}`, "", 400, "invalid_request", "RATE_LIMITS"},
		{"nested member twice", `{"organization": {"name": "A", "name": "B"}}`, "", 400, "invalid_request", "organization.name"},
		{"map key twice", `{"auth": {"scopes": {"x": "A", "x": "B"}}}`, "", 400, "invalid_request", "auth.scopes.x"},
		{"invalid UTF-8", "{\"organization\": {\"name\": \"Acme \xff\xfe\"}}", "", 400, "invalid_request", "organization.name"},
		{"lone surrogate", `{"organization": {"name": "Acme \ud800"}}`, "", 400, "invalid_request", "organization.name"},
		{"read-only identifier", `{"identifier": "https://x.example"}`, "", 400, "invalid_request", "identifier"},
		{"wrong type", `{"organization": {"name": 5}}`, "", 400, "invalid_request", "organization.name"},
		{"slug change", `{"slug": "acme2"}`, "", 400, "invalid_request", "slug"},
		{"slug removed", `{"slug": null}`, "", 400, "invalid_request", "slug"},
		{"invalid result: name emptied", `{"organization": {"name": ""}}`, "", 400, "invalid_request", "organization.name"},
		{"invalid result: name removed", `{"organization": {"name": null}}`, "", 400, "invalid_request", "organization.name"},
		{"invalid result: domain removed", `{"organization": {"domain": null}}`, "", 400, "invalid_request", "organization.domain"},
		{"invalid result: issuer off with extra domains", `{"auth": {"issuer": false, "scopes": null}}`, "", 400, "invalid_request", "domains"},
		{"invalid result: idle timeout too short", `{"sessions": {"idle_timeout_seconds": 30}}`, "", 400, "invalid_request", "sessions.idle_timeout_seconds"},
		{"invalid result: rate limit zero", `{"rate_limits": {"per_agent": 0}}`, "", 400, "invalid_request", "rate_limits.per_agent"},
		{"invalid result: unknown acceptance", `{"agents": {"accept": "none"}}`, "", 400, "invalid_request", "agents.accept"},
		{"invalid result: client_id not https", `{"agents": {"client_ids": ["http://agent.example/agent.json"]}}`, "", 400, "invalid_request", "agents.client_ids[0]"},
		{"invalid result: access lifetime too short", `{"auth": {"token_lifetimes": {"access_seconds": 59}}}`, "", 400, "invalid_request", "auth.token_lifetimes.access_seconds"},
		{"invalid result: access lifetime too long", `{"auth": {"token_lifetimes": {"access_seconds": 86401}}}`, "", 400, "invalid_request", "auth.token_lifetimes.access_seconds"},
		{"invalid result: refresh lifetime too short", `{"auth": {"token_lifetimes": {"refresh_seconds": 3599}}}`, "", 400, "invalid_request", "auth.token_lifetimes.refresh_seconds"},
		{"invalid result: refresh lifetime too long", `{"auth": {"token_lifetimes": {"refresh_seconds": 31536001}}}`, "", 400, "invalid_request", "auth.token_lifetimes.refresh_seconds"},
		{"wrong type: token lifetimes", `{"auth": {"token_lifetimes": 900}}`, "", 400, "invalid_request", "auth.token_lifetimes"},
		{"invalid result: refused client_id not https", `{"agents": {"sign_in_refused": {"http://a.example/agent.json": []}}}`, "", 400, "invalid_request",
			"agents.sign_in_refused.http://a.example/agent.json"},
		{"invalid result: refused grant type unknown", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": ["authorization_code", "password"]}}}`, "", 400, "invalid_request",
			"agents.sign_in_refused.https://a.example/agent.json[1]"},
		{"wrong type: refused grant types", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": "authorization_code"}}}`, "", 400, "invalid_request",
			"agents.sign_in_refused.https://a.example/agent.json"},
		{"invalid result: removing the API a feedback alternative names", `{"apis": null}`, "", 400, "invalid_request", "feedback.alternatives[0].alternative.references[0].url"},
		{"invalid result: feedback task listed twice", `{"feedback": {"alternatives": [{"task": "T", "alternative": {"instructions": "A"}}, {"task": "t ", "alternative": {"instructions": "B"}}]}}`, "", 400, "invalid_request", "feedback.alternatives[1].task"},
		{"wrong type: idle timeout", `{"sessions": {"idle_timeout_seconds": "1h"}}`, "", 400, "invalid_request", "sessions.idle_timeout_seconds"},
		{"invalid result: signed_in and disabled", `{"auth": {"disabled": true}, "conversations": {"access": "signed_in"}}`, "", 400, "invalid_request", "conversations.access"},
		{"invalid result: duplicate domain", `{"domains": ["acme.example"]}`, "", 400, "invalid_request", "domains[0]"},
		{"another Company's primary domain", `{"domains": ["acme.example.org", "other.example"]}`, "", 409, "conflict", "domains[1]"},
		{"another Company's extra domain as primary", `{"organization": {"domain": "other.example.org"}}`, "", 409, "conflict", "organization.domain"},
		{"array body", `[{"op": "replace", "path": "/organization/name", "value": "X"}]`, "", 400, "invalid_request", ""},
		{"string body", `"x"`, "", 400, "invalid_request", ""},
		{"null body", `null`, "", 400, "invalid_request", ""},
		{"malformed", `{"organization": `, "", 400, "invalid_request", ""},
		{"empty body", ``, "", 400, "invalid_request", ""},
		{"oversized", `{"organization": {"name": "` + strings.Repeat("a", maxAdminBody) + `"}}`, "", 413, "request_too_large", ""},
		{"json-patch media type", `{"organization": {"name": "X"}}`, "text/plain", 415, "unsupported_media_type", ""},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var headers []string
				if tt.contentType != "" {
					headers = []string{"Content-Type", tt.contentType}
				}
				resp := env.Do(t, http.MethodPatch, env.PublicURL("/admin/v1/companies/acme"), tt.patch,
					append(headers, bearer(adminToken)...)...)
				if tt.status == 400 && tt.field != "" {
					requireInvalid(t, resp, tt.field)
					return
				}
				e := requireError(t, resp, tt.status, tt.code)
				if tt.field != "" {
					require.Len(t, e.Fields, 1)
					require.Equal(t, tt.field, e.Fields[0].Field)
				}
			})
		}
	})

	// The stored Company is unchanged, updated_at included, and its
	// domains still route to it.
	after := env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil)
	require.JSONEq(t, string(before.Body), string(after.Body))
	require.Equal(t, []string{"acme.example*", "acme.example.org"}, domainsOf(t, env, "acme"))
	require.Equal(t, []string{"other.example*", "other.example.org"}, domainsOf(t, env, "other"))
	for _, d := range []string{"acme.example", "acme.example.org"} {
		require.Equal(t, "Company acme", orgName(t, poppyJSON(t, env, d)))
	}
	requireError(t, env.Admin(t, http.MethodPatch, "/admin/v1/companies/nosuch", `{}`), http.StatusNotFound, "not_found")
}

func testPatchDomains(t *testing.T, env *kit) {
	createCompany(t, env, "acme", "acme.example", `{"domains": ["old.acme.example", "kept.acme.example"]}`)

	// Replace an extra domain.
	resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/acme", `{"domains": ["kept.acme.example", "new.acme.example"]}`)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, []string{"acme.example*", "kept.acme.example", "new.acme.example"}, domainsOf(t, env, "acme"))
	requireError(t, poppyJSON(t, env, "old.acme.example"), http.StatusNotFound, "not_found")
	for _, d := range []string{"acme.example", "kept.acme.example", "new.acme.example"} {
		r := poppyJSON(t, env, d)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", d, r.Body)
		require.Equal(t, "Company acme", orgName(t, r))
	}

	// Move the primary domain: the old one is freed, the new one is primary.
	resp = env.Admin(t, http.MethodPatch, "/admin/v1/companies/acme", `{"organization": {"domain": "acme.example.net"}}`)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, []string{"acme.example.net*", "kept.acme.example", "new.acme.example"}, domainsOf(t, env, "acme"))
	requireError(t, poppyJSON(t, env, "acme.example"), http.StatusNotFound, "not_found")
	require.Equal(t, "Company acme", orgName(t, poppyJSON(t, env, "acme.example.net")))

	// Swap a domain between primary and extra in one patch.
	resp = env.Admin(t, http.MethodPatch, "/admin/v1/companies/acme",
		`{"organization": {"domain": "kept.acme.example"}, "domains": ["acme.example.net", "new.acme.example"]}`)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, []string{"kept.acme.example*", "acme.example.net", "new.acme.example"}, domainsOf(t, env, "acme"))

	// The freed domains can belong to another Company.
	createCompany(t, env, "newco", "acme.example", `{"domains": ["old.acme.example"]}`)
	require.Equal(t, "Company newco", orgName(t, poppyJSON(t, env, "acme.example")))
	require.Equal(t, "Company newco", orgName(t, poppyJSON(t, env, "old.acme.example")))
	require.Equal(t, "Company acme", orgName(t, poppyJSON(t, env, "new.acme.example")))
}

func TestDeleteCompany(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", `{"domains": ["acme.example.org"]}`)
	createCompany(t, env, "other", "other.example", "")
	_, key := createAPIKey(t, env, "acme")
	_, otherKey := createAPIKey(t, env, "other")
	r := env.Admin(t, http.MethodPost, "/admin/v1/companies/acme/accounts", `{"username": "alice", "password": "correct horse"}`)
	require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Body)
	require.Equal(t, http.StatusOK, poppyJSON(t, env, "acme.example").Status)

	resp := env.Admin(t, http.MethodDelete, "/admin/v1/companies/acme", nil)
	require.Equal(t, http.StatusNoContent, resp.Status, "body: %s", resp.Body)
	require.Empty(t, resp.Body)

	requireError(t, env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil), http.StatusNotFound, "not_found")
	requireError(t, env.Admin(t, http.MethodDelete, "/admin/v1/companies/acme", nil), http.StatusNotFound, "not_found")
	requireError(t, env.Admin(t, http.MethodGet, "/admin/v1/companies/acme/api-keys", nil), http.StatusNotFound, "not_found")
	for _, d := range []string{"acme.example", "acme.example.org"} {
		requireError(t, poppyJSON(t, env, d), http.StatusNotFound, "not_found")
	}
	requireError(t, env.Do(t, http.MethodGet, env.PublicURL("/t/acme/poppy/excluded-tasks.json"), nil), http.StatusNotFound, "not_found")
	requireError(t, companyAPI(t, env, http.MethodGet, "/company", key), http.StatusUnauthorized, "unauthorized")

	// Everything it owned is gone; the other Company is untouched.
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM companies`))
	require.Equal(t, []string{"other.example*"}, domainsOf(t, env, "other"))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM company_domains`))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM company_api_keys`))
	require.Zero(t, count(t, env, `SELECT count(*) FROM accounts`))
	require.Equal(t, http.StatusOK, poppyJSON(t, env, "other.example").Status)
	require.Equal(t, http.StatusOK, companyAPI(t, env, http.MethodGet, "/company", otherKey).Status)

	// The slug is retired: an issuer stands for exactly one Company
	// (spec 3.2), so a new Company cannot take it (TestRetiredSlugs).
	e := requireError(t, env.Admin(t, http.MethodPost, "/admin/v1/companies", minimalBody("acme", "acme.example")),
		http.StatusConflict, "conflict")
	require.Len(t, e.Fields, 1)
	require.Equal(t, "slug", e.Fields[0].Field)

	// The domains are free again, for a new Company under a new slug; it
	// is a new one, which the old key does not open.
	createCompany(t, env, "acme2", "acme.example", `{"domains": ["acme.example.org"]}`)
	for _, d := range []string{"acme.example", "acme.example.org"} {
		require.Equal(t, "Company acme2", orgName(t, poppyJSON(t, env, d)))
	}
	requireError(t, companyAPI(t, env, http.MethodGet, "/company", key), http.StatusUnauthorized, "unauthorized")
	list := env.Admin(t, http.MethodGet, "/admin/v1/companies/acme2/api-keys", nil)
	require.JSONEq(t, `{"api_keys": []}`, string(list.Body))
	requireError(t, env.Admin(t, http.MethodGet, "/admin/v1/companies/acme", nil), http.StatusNotFound, "not_found")
}

// TestRetiredSlugs: the slug of a deleted Company is never used again,
// since it is part of the issuer and an issuer stands for exactly one
// Company (spec 3.2). Creating a Company with it is a 409 naming slug that
// stores nothing; other slugs, however alike, are free.
func TestRetiredSlugs(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "gone", "gone.example", "")
	createCompany(t, env, "plain", "plain.example", `{"auth": {"issuer": false}}`)
	createCompany(t, env, "kept", "kept.example", "")
	for _, slug := range []string{"gone", "plain"} {
		require.Equal(t, http.StatusNoContent, env.Admin(t, http.MethodDelete, "/admin/v1/companies/"+slug, nil).Status)
	}
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM retired_slugs WHERE slug = 'gone'`))

	tests := []struct {
		name string
		body string
	}{
		{"same slug, same domain", minimalBody("gone", "gone.example")},
		{"same slug, new domain", minimalBody("gone", "new.example")},
		{"same slug, without an issuer", merge(t, minimalBody("gone", "new.example"), `{"auth": {"issuer": false}}`)},
		{"slug of a Company that had no issuer", minimalBody("plain", "new.example")},
		// The retired slug is named even when a domain is taken too.
		{"same slug, another Company's domain", minimalBody("gone", "kept.example")},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				slug, settings, err := tenant.DecodeCompany([]byte(tt.body))
				require.NoError(t, err)
				_, err = env.Tenants.Create(context.Background(), slug, settings)
				var ce *tenant.ConflictError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, "slug", ce.Field)
				require.Contains(t, ce.Message, "deleted Company")
			})
		}
	})
	// The admin API answers it 409, naming the slug.
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", tests[0].body)
	e := requireError(t, resp, http.StatusConflict, "conflict")
	require.Len(t, e.Fields, 1, "body: %s", resp.Body)
	require.Equal(t, "slug", e.Fields[0].Field)
	require.Contains(t, e.Fields[0].Message, "deleted Company")
	require.Equal(t, []string{"kept"}, slugs(t, env))
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM company_domains`))
	for _, d := range []string{"gone.example", "new.example", "plain.example"} {
		requireError(t, poppyJSON(t, env, d), http.StatusNotFound, "not_found")
	}
	requireError(t, env.Admin(t, http.MethodGet, "/admin/v1/companies/gone", nil), http.StatusNotFound, "not_found")
	requireError(t, env.Admin(t, http.MethodPatch, "/admin/v1/companies/gone", `{}`), http.StatusNotFound, "not_found")

	// Slugs that only look alike are free, and the old domains with them.
	for _, slug := range []string{"gone2", "gone-again", "g", "plain-co"} {
		createCompany(t, env, slug, slug+".example", "")
	}
	createCompany(t, env, "gone3", "gone.example", "")
	require.Equal(t, "Company gone3", orgName(t, poppyJSON(t, env, "gone.example")))

	// A slug that was refused, not deleted, is not retired.
	requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/companies",
		merge(t, minimalBody("fresh", "fresh.example"), `{"sessions": {"idle_timeout_seconds": 1}}`)), "sessions.idle_timeout_seconds")
	createCompany(t, env, "fresh", "fresh.example", "")

	// Deleting its successor retires a slug once; the first slug stays
	// retired.
	require.Equal(t, http.StatusNoContent, env.Admin(t, http.MethodDelete, "/admin/v1/companies/gone3", nil).Status)
	require.Equal(t, 3, count(t, env, `SELECT count(*) FROM retired_slugs`))
	for _, slug := range []string{"gone", "gone3"} {
		requireError(t, env.Admin(t, http.MethodPost, "/admin/v1/companies", minimalBody(slug, "again.example")),
			http.StatusConflict, "conflict")
	}
}

// slugs lists the stored Companies' slugs in order.
func slugs(t *testing.T, env *kit) []string {
	t.Helper()
	rows, err := env.Pool.Query(t.Context(), `SELECT slug FROM companies ORDER BY slug`)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}
