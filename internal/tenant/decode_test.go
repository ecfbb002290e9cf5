package tenant_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxAdminBody mirrors the admin API's body limit (256 KiB).
const maxAdminBody = 256 << 10

// testCreateBadBodies sends bodies that cannot be read as a Company: each
// gets its error.
func testCreateBadBodies(t *testing.T, env *kit) {
	valid := minimalBody("acme", "acme.example")
	tests := []struct {
		name        string
		body        any
		contentType string // "" keeps application/json
		status      int
		code        string
		field       string // "" when the error names no field
	}{
		// Unknown fields are refused wherever they are.
		{"unknown top-level field", merge(t, valid, `{"bogus": 1}`), "", 400, "invalid_request", "bogus"},
		{"unknown organization field", merge(t, valid, `{"organization": {"nickname": "A"}}`), "", 400, "invalid_request", "organization.nickname"},
		{"unknown auth field", merge(t, valid, `{"auth": {"issuer_url": "https://x.example"}}`), "", 400, "invalid_request", "auth.issuer_url"},
		{"identifier is read-only", merge(t, valid, `{"identifier": "https://x.example"}`), "", 400, "invalid_request", "identifier"},
		{"created_at is read-only", merge(t, valid, `{"created_at": "2020-01-01T00:00:00Z"}`), "", 400, "invalid_request", "created_at"},
		{"unknown skill field", merge(t, valid, `{"skill_index": {"$schema": "`+schema020+`", "skills": [{"nom": "x"}]}}`), "", 400, "invalid_request", "skill_index.skills[0].nom"},
		{"unknown agents field", merge(t, valid, `{"agents": {"deny": []}}`), "", 400, "invalid_request", "agents.deny"},
		{"unknown sessions field", merge(t, valid, `{"sessions": {"max_age_seconds": 60}}`), "", 400, "invalid_request", "sessions.max_age_seconds"},
		{"unknown rate limit", merge(t, valid, `{"rate_limits": {"per_user": 5}}`), "", 400, "invalid_request", "rate_limits.per_user"},
		{"unknown feedback alternative field", merge(t, valid, `{"feedback": {"alternatives": [{"task": "T", "answer": "A"}]}}`), "", 400, "invalid_request", "feedback.alternatives[0].answer"},

		// Exact reading (issue 25): member names are case-sensitive, a name
		// twice in one object is refused, and so is text that is not UTF-8.
		{"slug in upper case", `{"SLUG": "acme", "organization": {"name": "A", "domain": "acme.example"}}`, "", 400, "invalid_request", "SLUG"},
		{"organization in another case", `{"slug": "acme", "Organization": {"name": "A", "domain": "acme.example"}}`, "", 400, "invalid_request", "Organization"},
		{"rate_limits twice in two cases", `{"slug": "acme", "organization": {"name": "A", "domain": "acme.example"}, "rate_limits": {"per_agent": 5}, "RATE_LIMITS": {"per_agent": 6}}`, "", 400, "invalid_request", "RATE_LIMITS"},
		{"slug twice", `{"slug": "acme", "slug": "acme2", "organization": {"name": "A", "domain": "acme.example"}}`, "", 400, "invalid_request", "slug"},
		{"domain twice", `{"slug": "acme", "organization": {"name": "A", "domain": "acme.example", "domain": "b.example"}}`, "", 400, "invalid_request", "organization.domain"},
		{"invalid UTF-8 in a name", "{\"slug\": \"acme\", \"organization\": {\"name\": \"Acme \xc3\x28\", \"domain\": \"acme.example\"}}", "", 400, "invalid_request", "organization.name"},
		{"invalid UTF-8 in a member name", "{\"slug\": \"acme\", \"organization\": {\"name\": \"Acme\", \"domain\": \"acme.example\"}, \"x\xff\": 1}", "", 400, "invalid_request", "(body)"},
		{"lone surrogate escape", `{"slug": "acme", "organization": {"name": "Acme \udc00", "domain": "acme.example"}}`, "", 400, "invalid_request", "organization.name"},

		// Wrong JSON types name the field by its path.
		{"slug a number", `{"slug": 5, "organization": {"name": "A", "domain": "acme.example"}}`, "", 400, "invalid_request", "slug"},
		{"organization a string", merge(t, valid, `{"organization": "Acme"}`), "", 400, "invalid_request", "organization"},
		{"organization.name a number", merge(t, valid, `{"organization": {"name": 5}}`), "", 400, "invalid_request", "organization.name"},
		{"domains a string", merge(t, valid, `{"domains": "b.example"}`), "", 400, "invalid_request", "domains"},
		{"domains of numbers", merge(t, valid, `{"domains": [1]}`), "", 400, "invalid_request", "domains[0]"},
		{"auth.issuer a string", merge(t, valid, `{"auth": {"issuer": "yes"}}`), "", 400, "invalid_request", "auth.issuer"},
		{"auth.scopes an array", merge(t, valid, `{"auth": {"scopes": ["orders"]}}`), "", 400, "invalid_request", "auth.scopes"},
		{"auth.scopes values numbers", merge(t, valid, `{"auth": {"scopes": {"orders": 1}}}`), "", 400, "invalid_request", "auth.scopes.orders"},
		{"personal_data a string", merge(t, valid, `{"auth": {"scope_hints": {"o": {"changes": "none", "personal_data": "yes"}}}}`), "", 400, "invalid_request", "auth.scope_hints.o.personal_data"},
		{"feedback.enabled a number", merge(t, valid, `{"feedback": {"enabled": 1}}`), "", 400, "invalid_request", "feedback.enabled"},
		{"excluded_tasks an object", merge(t, valid, `{"excluded_tasks": {"task": "T"}}`), "", 400, "invalid_request", "excluded_tasks"},
		{"extension entry a string", merge(t, valid, `{"extensions": {"acme.example/x": "1"}}`), "", 400, "invalid_request", "extensions.acme.example/x"},
		{"skill_index an array", merge(t, valid, `{"skill_index": []}`), "", 400, "invalid_request", "skill_index"},
		{"feedback.alternatives an object", merge(t, valid, `{"feedback": {"alternatives": {"task": "T"}}}`), "", 400, "invalid_request", "feedback.alternatives"},
		{"feedback alternative task a number", merge(t, valid, `{"feedback": {"alternatives": [{"task": 1}]}}`), "", 400, "invalid_request", "feedback.alternatives[0].task"},
		{"agents.accept a boolean", merge(t, valid, `{"agents": {"accept": true}}`), "", 400, "invalid_request", "agents.accept"},
		{"agents.client_ids a string", merge(t, valid, `{"agents": {"client_ids": "https://agent.example/agent.json"}}`), "", 400, "invalid_request", "agents.client_ids"},
		{"idle timeout a string", merge(t, valid, `{"sessions": {"idle_timeout_seconds": "3600"}}`), "", 400, "invalid_request", "sessions.idle_timeout_seconds"},
		{"idle timeout a fraction", merge(t, valid, `{"sessions": {"idle_timeout_seconds": 3600.5}}`), "", 400, "invalid_request", "sessions.idle_timeout_seconds"},
		{"rate limit a string", merge(t, valid, `{"rate_limits": {"per_agent": "many"}}`), "", 400, "invalid_request", "rate_limits.per_agent"},
		{"rate limit beyond int64", merge(t, valid, `{"rate_limits": {"per_session": 1e30}}`), "", 400, "invalid_request", "rate_limits.per_session"},
		{"sessions a number", merge(t, valid, `{"sessions": 3600}`), "", 400, "invalid_request", "sessions"},
		{"body an array", `[]`, "", 400, "invalid_request", "(body)"},
		{"body a string", `"acme"`, "", 400, "invalid_request", "(body)"},

		// Not one JSON value.
		{"malformed JSON", `{"slug": "acme",}`, "", 400, "invalid_request", ""},
		{"truncated JSON", `{"slug": "acme"`, "", 400, "invalid_request", ""},
		{"not JSON", `slug=acme`, "", 400, "invalid_request", ""},
		{"two values", valid + ` {}`, "", 400, "invalid_request", ""},
		{"trailing garbage", valid + `x`, "", 400, "invalid_request", ""},
		{"empty body", "", "", 400, "invalid_request", ""},
		{"whitespace only", "  \n ", "", 400, "invalid_request", ""},

		// Size and media type.
		{"oversized body", `{"slug": "acme", "organization": {"name": "` + strings.Repeat("a", maxAdminBody) + `", "domain": "acme.example"}}`, "", 413, "request_too_large", ""},
		{"oversized by trailing space", valid + strings.Repeat(" ", maxAdminBody-len(valid)+1), "", 413, "request_too_large", ""},
		{"text/plain", valid, "text/plain", 415, "unsupported_media_type", ""},
		{"form", valid, "application/x-www-form-urlencoded", 415, "unsupported_media_type", ""},
		{"xml", valid, "application/xml", 415, "unsupported_media_type", ""},
		{"malformed media type", valid, "application/", 415, "unsupported_media_type", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var headers []string
			if tt.contentType != "" {
				headers = []string{"Content-Type", tt.contentType}
			}
			resp := env.Do(t, http.MethodPost, env.PublicURL("/admin/v1/companies"), tt.body,
				append(headers, bearer(adminToken)...)...)
			if tt.field != "" {
				requireInvalid(t, resp, tt.field)
				return
			}
			e := requireError(t, resp, tt.status, tt.code)
			require.Empty(t, e.Fields)
		})
	}
}

// testCreateBodyLimits checks the edges of what is accepted: a body of
// exactly the limit, a JSON media type with parameters or a +json suffix,
// and no Content-Type at all.
func testCreateBodyLimits(t *testing.T, env *kit) {
	tests := []struct {
		name        string
		pad         bool
		contentType string
	}{
		{"exactly the limit", true, ""},
		{"charset parameter", false, "application/json; charset=utf-8"},
		{"+json suffix", false, "application/merge-patch+json"},
		{"upper-case media type", false, "Application/JSON"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slug := "lim" + string(rune('a'+i))
			body := minimalBody(slug, slug+".example")
			if tt.pad {
				body += strings.Repeat(" ", maxAdminBody-len(body))
				require.Len(t, body, maxAdminBody)
			}
			var headers []string
			if tt.contentType != "" {
				headers = []string{"Content-Type", tt.contentType}
			}
			resp := env.Do(t, http.MethodPost, env.PublicURL("/admin/v1/companies"), body,
				append(headers, bearer(adminToken)...)...)
			require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
		})
	}

	t.Run("no content type", func(t *testing.T) {
		t.Parallel()
		req, err := http.NewRequest(http.MethodPost, env.PublicURL("/admin/v1/companies"),
			strings.NewReader(minimalBody("nocontenttype", "nocontenttype.example")))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := env.Client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	})
}
