package platform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// auditEntry is an entry of the audit log as the API shows it.
type auditEntry struct {
	ID      string `json:"id"`
	Company string `json:"company"`
	Actor   struct {
		Kind   string `json:"kind"`
		ID     int64  `json:"id"`
		Prefix string `json:"prefix"`
		Name   string `json:"name"`
	} `json:"actor"`
	Action string   `json:"action"`
	Path   string   `json:"path"`
	Fields []string `json:"fields"`
}

// readAudit reads a whole audit log at path, page by page of limit
// entries, with authorization, checking that pages follow each other
// newest first without a gap or a repeat.
func readAudit(t *testing.T, env *testkit.Env, path, authorization string, limit int) []auditEntry {
	t.Helper()
	var all []auditEntry
	next := ""
	for page := 0; ; page++ {
		require.Less(t, page, 100, "the audit log never ends")
		url := fmt.Sprintf("%s?limit=%d", path, limit)
		if next != "" {
			url += "&before=" + next
		}
		resp := env.Do(t, http.MethodGet, env.PublicURL(url), nil, "Authorization", authorization)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		var body struct {
			Entries []auditEntry `json:"entries"`
			Next    string       `json:"next"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &body))
		require.LessOrEqual(t, len(body.Entries), limit)
		all = append(all, body.Entries...)
		if body.Next == "" {
			break
		}
		next = body.Next
	}
	for i := 1; i < len(all); i++ {
		var a, b int64
		_, err := fmt.Sscan(all[i-1].ID, &a)
		require.NoError(t, err)
		_, err = fmt.Sscan(all[i].ID, &b)
		require.NoError(t, err)
		require.Greater(t, a, b, "newest first, each entry once")
	}
	return all
}

// actions lists the entries' actions, oldest first.
func actions(entries []auditEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[len(entries)-1-i] = e.Action
	}
	return out
}

// TestAuditLog makes a change through every kind of write route of the
// admin and Company APIs and reads each back from the audit log: by whom
// (the credential's kind, id and prefix), the route, the fields; failed
// writes and reads leave nothing; no secret appears anywhere in the
// audit log's table; and a Company reads only its own entries.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	ok := func(resp *peers.Response, status int) map[string]any {
		t.Helper()
		require.Equal(t, status, resp.Status, "%s", resp.Body)
		if len(resp.Body) == 0 {
			return nil
		}
		return resp.JSON(t)
	}
	var secrets []string

	// The operator: a new operator token, with which the rest is done.
	tok := ok(env.Admin(t, http.MethodPost, "/admin/v1/operator-tokens", map[string]any{"name": "ci"}), http.StatusCreated)
	opToken := tok["token"].(string)
	secrets = append(secrets, opToken, testkit.AdminToken)
	op := "Bearer " + opToken
	admin := func(method, path string, body any) *peers.Response {
		return env.Do(t, method, env.PublicURL(path), body, "Authorization", op)
	}
	ok(admin(http.MethodPost, "/admin/v1/companies",
		`{"slug":"audited","organization":{"name":"Audited","domain":"audited.example"},"auth":{"issuer":true}}`), http.StatusCreated)
	createTenant(t, env, "other", "other.example", "")
	ok(admin(http.MethodPatch, "/admin/v1/companies/audited", `{"organization":{"name":"Renamed"},"rate_limits":{"per_agent":50}}`), http.StatusOK)
	// A refused change is not recorded.
	requireTenantError(t, admin(http.MethodPatch, "/admin/v1/companies/audited", `{"slug":"x"}`), http.StatusBadRequest, "invalid_request")
	const password = "correct horse battery staple 42"
	secrets = append(secrets, password)
	ok(admin(http.MethodPost, "/admin/v1/companies/audited/accounts", map[string]any{"username": "alice", "password": password}), http.StatusCreated)
	key := ok(admin(http.MethodPost, "/admin/v1/companies/audited/api-keys", map[string]any{"name": "deploy"}), http.StatusCreated)
	apiKey := key["key"].(string)
	spare := ok(admin(http.MethodPost, "/admin/v1/companies/audited/api-keys", nil), http.StatusCreated)
	secrets = append(secrets, apiKey, spare["key"].(string))
	ok(admin(http.MethodPost, "/admin/v1/companies/audited/keys/rotate", nil), http.StatusNoContent)
	tool := map[string]any{"description": "Lookup", "input_schema": map[string]any{"type": "object"}, "url": "https://tools.audited.example/x"}
	ok(admin(http.MethodPut, "/admin/v1/companies/audited/tools/lookup", tool), http.StatusCreated)
	ok(admin(http.MethodDelete, "/admin/v1/companies/audited/tools/lookup", nil), http.StatusNoContent)
	// Reads leave nothing.
	ok(admin(http.MethodGet, "/admin/v1/companies/audited", nil), http.StatusOK)

	// The Company, with its key.
	co := "Bearer " + apiKey
	company := func(method, path string, body any) *peers.Response {
		return env.Do(t, method, env.PublicURL("/company/v1"+path), body, "Authorization", co)
	}
	ok(company(http.MethodPut, "/tools/lookup", tool), http.StatusCreated)
	rotated := ok(company(http.MethodPost, "/conversations/webhook-secret", map[string]any{}), http.StatusCreated)
	secrets = append(secrets, rotated["secret"].(string))
	ok(company(http.MethodDelete, fmt.Sprintf("/api-keys/%v", spare["id"]), nil), http.StatusNoContent)
	// Not the Company's key: 404, and nothing recorded.
	otherKey := ok(env.Admin(t, http.MethodPost, "/admin/v1/companies/other/api-keys", nil), http.StatusCreated)
	secrets = append(secrets, otherKey["key"].(string))
	requireTenantError(t, company(http.MethodDelete, fmt.Sprintf("/api-keys/%v", otherKey["id"]), nil), http.StatusNotFound, "not_found")

	// The operator revokes its own token last.
	ok(admin(http.MethodDelete, fmt.Sprintf("/admin/v1/operator-tokens/%v", tok["id"]), nil), http.StatusNoContent)

	entries := readAudit(t, env, "/admin/v1/companies/audited/audit", "Bearer "+testkit.AdminToken, 2)
	require.Equal(t, []string{
		"POST /admin/v1/companies",
		"PATCH /admin/v1/companies/{slug}",
		"POST /admin/v1/companies/{slug}/accounts",
		"POST /admin/v1/companies/{slug}/api-keys",
		"POST /admin/v1/companies/{slug}/api-keys",
		"POST /admin/v1/companies/{slug}/keys/rotate",
		"PUT /admin/v1/companies/{slug}/tools/{name}",
		"DELETE /admin/v1/companies/{slug}/tools/{name}",
		"PUT /company/v1/tools/{name}",
		"POST /company/v1/conversations/webhook-secret",
		"DELETE /company/v1/api-keys/{id}",
	}, actions(entries))
	byAction := map[string]auditEntry{}
	for _, e := range entries {
		require.Equal(t, "audited", e.Company)
		byAction[e.Action] = e
	}
	patch := byAction["PATCH /admin/v1/companies/{slug}"]
	require.Equal(t, "/admin/v1/companies/audited", patch.Path)
	require.Equal(t, []string{"organization.name", "rate_limits.per_agent"}, patch.Fields)
	require.Equal(t, "operator_token", patch.Actor.Kind)
	require.EqualValues(t, tok["id"], patch.Actor.ID)
	require.Equal(t, "ci", patch.Actor.Name)
	require.True(t, strings.HasPrefix(opToken, patch.Actor.Prefix) && len(patch.Actor.Prefix) > len("pho_"),
		"prefix %q of the token", patch.Actor.Prefix)
	require.Equal(t, []string{"username", "password"}, byAction["POST /admin/v1/companies/{slug}/accounts"].Fields)
	require.Equal(t, []string{"organization.domain", "organization.name"}, byAction["POST /admin/v1/companies"].Fields,
		"the settings set to other than their defaults")
	put := byAction["PUT /company/v1/tools/{name}"]
	require.Equal(t, "/company/v1/tools/lookup", put.Path)
	require.Equal(t, []string{"description", "input_schema", "url"}, put.Fields)
	require.Equal(t, "api_key", put.Actor.Kind)
	require.EqualValues(t, key["id"], put.Actor.ID)
	require.Equal(t, "deploy", put.Actor.Name)
	require.True(t, strings.HasPrefix(apiKey, put.Actor.Prefix) && len(put.Actor.Prefix) > len("phk_"))
	require.Equal(t, []string{"revoked_at"}, byAction["DELETE /company/v1/api-keys/{id}"].Fields)

	// The Company reads the same entries through its API; the other
	// Company none of them.
	require.Equal(t, entries, readAudit(t, env, "/company/v1/audit", co, 5))
	require.Equal(t, []string{"POST /admin/v1/companies", "POST /admin/v1/companies/{slug}/api-keys"},
		actions(readAudit(t, env, "/company/v1/audit", "Bearer "+otherKey["key"].(string), 5)))

	// The whole log has the operator's own changes, with no Company.
	all := readAudit(t, env, "/admin/v1/audit", "Bearer "+testkit.AdminToken, 100)
	require.Equal(t, "POST /admin/v1/operator-tokens", actions(all)[0])
	require.Equal(t, "DELETE /admin/v1/operator-tokens/{id}", actions(all)[len(all)-1])
	require.Empty(t, all[0].Company)
	require.Len(t, all, len(entries)+4)

	// No secret is stored in the audit log, in any column.
	rows, err := env.Pool.Query(context.Background(), `SELECT row_to_json(a)::text FROM audit_log a`)
	require.NoError(t, err)
	var dump strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		dump.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, dump.String())
	for _, s := range secrets {
		require.NotContains(t, dump.String(), s)
	}

	// A bad cursor is refused.
	resp := env.Admin(t, http.MethodGet, "/admin/v1/audit?before=x", nil)
	requireTenantError(t, resp, http.StatusBadRequest, "invalid_request")
}
