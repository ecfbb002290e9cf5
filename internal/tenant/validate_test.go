package tenant_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

const (
	schema020 = "https://schemas.agentskills.io/discovery/0.2.0/schema.json"
	digestA   = "sha256:1b2a8cde934e632f7e14fa080a627ad7191e29d412d2b8a7aa07d9c9ab2f475e"
	digestB   = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
)

// fullBody uses every setting a Company has.
const fullBody = `{
  "slug": "stormline",
  "organization": {
    "name": "Stormline Outfitters",
    "domain": "stormline.example",
    "logo_uri": "https://cdn.stormline.example/logo.png"
  },
  "domains": ["stormline.example.co.uk", "shop.stormline.example"],
  "auth": {
    "issuer": true,
    "disabled": false,
    "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "authorization_code"],
    "scopes": {
      "orders:read": "See your orders",
      "orders:write": "Exchange or return items",
      "addresses": "See and change your saved addresses\nincluding the default one"
    },
    "scope_hints": {
      "orders:read": {"changes": "none", "personal_data": true},
      "orders:write": {"changes": "irreversible", "personal_data": true},
      "addresses": {"changes": "reversible", "personal_data": false},
      "https://scopes.stormline.example/loyalty": {"changes": "none", "personal_data": false}
    },
    "other_authorization_servers": ["https://staff-login.stormline.example"],
    "token_lifetimes": {"access_seconds": 300, "refresh_seconds": 604800}
  },
  "conversations": {
    "enabled": true,
    "access": "signed_in",
    "agent_webhook": "https://agent.stormline.example/poppy/webhook",
    "handoff_timeout_seconds": 600,
    "handoff_unavailable_message": "Nobody from our team is free right now. Can I help instead?",
    "idle_close_seconds": 86400,
    "retention_days": 30
  },
  "feedback": {
    "enabled": false,
    "alternatives": [
      {
        "task": "Pay with a gift card",
        "alternative": {
          "instructions": "Gift cards are applied with the payment API, before the order is placed.",
          "references": [
            {"type": "openapi", "url": "https://api.stormline.example/openapi.json", "operation_id": "applyGiftCard"},
            {"type": "web", "url": "https://stormline.example/checkout"}
          ]
        }
      },
      {"task": "Find my size", "alternative": {"references": [{"type": "mcp", "url": "https://mcp.stormline.example/mcp"}]}},
      {"task": "Track a parcel", "alternative": {"instructions": "Use the tracking link in the dispatch email."}}
    ]
  },
  "agents": {
    "accept": "unlisted",
    "require_signature": true,
    "client_ids": ["https://bad-agent.example/agent.json", "https://agents.example/clients/42"],
    "sign_in_refused": {
      "https://agents.example/clients/7": [],
      "https://agents.example/clients/8": ["urn:ietf:params:oauth:grant-type:device_code"]
    }
  },
  "sessions": {"idle_timeout_seconds": 86400},
  "rate_limits": {"per_agent": 3000, "per_session": 300, "per_address": 900},
  "console": {"require_second_factor": true},
  "excluded_tasks": [
    {
      "task": "Send a wire transfer",
      "alternative": {
        "instructions": "Gift cards are applied with the payment API.",
        "references": [
          {"type": "openapi", "url": "https://api.stormline.example/openapi.json", "operation_id": "applyGiftCard"},
          {"type": "mcp", "url": "https://mcp.stormline.example/mcp"},
          {"type": "web", "url": "https://stormline.example/checkout"}
        ]
      }
    },
    {"task": "Close an account", "alternative": {"instructions": "Call us."}},
    {"task": "Buy a gift card", "alternative": {"references": [{"type": "web", "url": "https://stormline.example/gift"}]}},
    {"task": "Change the account owner"}
  ],
  "apis": [
    {"type": "openapi", "url": "https://api.stormline.example/openapi.json", "description": "Orders, returns, and exchanges"},
    {"type": "mcp", "url": "https://mcp.stormline.example/mcp", "description": "Product search and sizing"},
    {"type": "openapi", "url": "https://api.stormline.example/v2/openapi.json"}
  ],
  "operations": {"enabled": true, "web": false, "approval_hook": "https://hooks.acme.example/approvals"},
  "mcp": {"signed_out": true, "description": "Product search and sizing"},
  "web": {
    "browser_join": true,
    "origin": "https://origin.stormline.example",
    "cookie_name": "__Secure-stormline_session",
    "cookie_domain": "stormline.example",
    "landing_path": "/account?from=agent",
    "scope_rules": [
      {"path": "/account/orders", "scopes": ["orders:read"]},
      {"path": "/account/orders", "methods": ["POST", "DELETE"], "scopes": ["orders:read", "orders:write"]},
      {"path": "/account/addresses/", "scopes": ["addresses"]}
    ]
  },
  "extensions": {
    "mediated-sign-in": {"version": "1"},
    "stormline.example/gift-wrap": {
      "version": "2",
      "endpoint": "https://api.stormline.example/poppy/gift-wrap",
      "links": [{"href": "https://stormline.example/gift-wrap"}, "not a url", 3, true, null],
      "options": {"max_items": 4, "doc": {"url": "https://docs.stormline.example/gift-wrap"}}
    },
    "stormline.example/a/b.c~d_e-f": {"version": "10"}
  },
  "skill_index": {
    "$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
    "skills": [
      {"name": "manage-bookings", "description": "Manage the User's bookings with this Company.", "type": "skill-md",
       "url": "https://cdn.stormline.example/skills/manage-bookings/SKILL.md", "digest": "` + digestA + `"},
      {"name": "returns", "description": "Return an item.", "type": "archive",
       "url": "skills/returns.zip", "digest": "` + digestB + `"},
      {"name": "size-guide-2", "description": "Find a size.", "type": "skill-md",
       "url": "/skills/size-guide/SKILL.md?v=2", "digest": "` + digestA + `"}
    ]
  }
}`

// TestCreateCompanyAccepted covers bodies that must be stored: every
// setting used at once, the defaults a minimal body gets, values at the
// edge of each rule, and the edges of body size and media type. The
// subtests share one server and use distinct slugs and domains.
func TestCreateCompanyAccepted(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for name, f := range map[string]func(*testing.T, *kit){
		"full body":      testCreateFullBody,
		"defaults":       testCreateDefaults,
		"edge cases":     testCreateEdgeCases,
		"body limits":    testCreateBodyLimits,
		"sign-in limits": testCreateSignInLimits,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, env)
		})
	}
}

// many200 joins 200 items made from format and their index.
func many200(format string) string { return manyN(200, format) }

// manyN joins n items made from format and their index.
func manyN(n int, format string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(items, ",")
}

func testCreateFullBody(t *testing.T, env *kit) {
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", fullBody)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/admin/v1/companies/stormline", resp.Header.Get("Location"))

	// Every setting comes back exactly as sent, plus the derived members.
	got := resp.JSON(t)
	issuer := env.URLs.Public.String() + "/t/stormline"
	require.Equal(t, issuer, got["identifier"])
	require.Equal(t, issuer, got["issuer"])
	require.NotEmpty(t, got["created_at"])
	require.Equal(t, got["created_at"], got["updated_at"])
	for _, k := range []string{"identifier", "issuer", "created_at", "updated_at"} {
		delete(got, k)
	}
	echo, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, fullBody, string(echo))

	// GET returns the same Company.
	again := env.Admin(t, http.MethodGet, "/admin/v1/companies/stormline", nil)
	require.Equal(t, http.StatusOK, again.Status)
	require.JSONEq(t, string(resp.Body), string(again.Body))

	require.Equal(t, []string{"stormline.example*", "shop.stormline.example", "stormline.example.co.uk"},
		domainsOf(t, env, "stormline"))
	// Every domain routes to the Company.
	for _, d := range []string{"stormline.example", "stormline.example.co.uk", "shop.stormline.example"} {
		r := poppyJSON(t, env, d)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", d, r.Body)
		require.Equal(t, "Stormline Outfitters", orgName(t, r))
	}
}

// testCreateDefaults checks what a minimal body becomes: an issuer
// offering both sign-in types, conversations and feedback on (DESIGN.md),
// every Personal Agent accepted and none refused sign-in, the platform's
// token lifetimes (0), Sessions ending after 30 idle days, and the default
// rate limits. grant_types is left out of the view while it is empty,
// which means both sign-in types.
func testCreateDefaults(t *testing.T, env *kit) {
	tests := []struct {
		name  string
		patch string
		want  string // merged onto the expected minimal view
	}{
		{
			name: "issuer by default",
			want: `{"domains": [], "auth": {"issuer": true, "disabled": false,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []}}`,
		},
		{
			name:  "no issuer",
			patch: `{"auth": {"issuer": false}}`,
			want: `{"identifier": "https://{domain}", "issuer": null, "domains": [], "auth": {"issuer": false, "disabled": false,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []}}`,
		},
		{
			name:  "sign-in disabled",
			patch: `{"auth": {"disabled": true}}`,
			want: `{"domains": [], "auth": {"issuer": true, "disabled": true,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []}}`,
		},
		{
			name:  "one grant type",
			patch: `{"auth": {"grant_types": ["authorization_code"]}, "conversations": {"enabled": false}}`,
			want: `{"domains": [], "auth": {"issuer": true, "disabled": false,
				"grant_types": ["authorization_code"], "scopes": {}, "scope_hints": {}, "other_authorization_servers": []},
				"conversations": {"enabled": false, "access": "session"}}`,
		},
		{
			name:  "empty grant types mean both",
			patch: `{"auth": {"grant_types": []}}`,
			want: `{"domains": [], "auth": {"issuer": true, "disabled": false,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []}}`,
		},
		{
			name:  "one setting of a group keeps the other defaults",
			patch: `{"rate_limits": {"per_session": 60}, "agents": {"client_ids": ["https://agent.example/agent.json"]}}`,
			want: `{"domains": [], "auth": {"issuer": true, "disabled": false,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []},
				"rate_limits": {"per_agent": 6000, "per_session": 60, "per_address": 1200},
				"agents": {"accept": "all", "client_ids": ["https://agent.example/agent.json"]}}`,
		},
		{
			name:  "empty agents.accept means all",
			patch: `{"agents": {"accept": ""}}`,
			want: `{"domains": [], "auth": {"issuer": true, "disabled": false,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []}}`,
		},
		{
			name:  "skill index without skills",
			patch: `{"skill_index": {"$schema": "` + schema020 + `"}}`,
			want: `{"domains": [], "auth": {"issuer": true, "disabled": false,
				"scopes": {}, "scope_hints": {}, "other_authorization_servers": []},
				"skill_index": {"$schema": "` + schema020 + `", "skills": []}}`,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slug := "co" + string(rune('a'+i))
			domain := slug + ".example"
			resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", merge(t, minimalBody(slug, domain), tt.patch))
			require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
			got := resp.JSON(t)
			delete(got, "created_at")
			delete(got, "updated_at")
			base := `{"slug": "` + slug + `", "organization": {"name": "Company ` + slug + `", "domain": "` + domain + `"},
				"identifier": "` + env.URLs.Public.String() + `/t/` + slug + `",
				"issuer": "` + env.URLs.Public.String() + `/t/` + slug + `",
				"conversations": {"enabled": true, "access": "session", "handoff_timeout_seconds": 0, "idle_close_seconds": 0,
					"retention_days": 0},
				"feedback": {"enabled": true, "alternatives": []},
				"excluded_tasks": [], "apis": [], "operations": {"enabled": false, "web": false}, "mcp": {"signed_out": false}, "web": {"browser_join": false, "scope_rules": []}, "extensions": {},
				"auth": {"token_lifetimes": {"access_seconds": 0, "refresh_seconds": 0}},
				"agents": {"accept": "all", "client_ids": [], "sign_in_refused": {}, "require_signature": false}, "sessions": {"idle_timeout_seconds": 2592000},
				"rate_limits": {"per_agent": 6000, "per_session": 600, "per_address": 1200},
				"console": {"require_second_factor": false}}`
			want := merge(t, base, strings.ReplaceAll(tt.want, "{domain}", domain))
			gotJSON, err := json.Marshal(got)
			require.NoError(t, err)
			require.JSONEq(t, want, string(gotJSON))

			// GET shows the same: the stored document has the same shape.
			again := env.Admin(t, http.MethodGet, "/admin/v1/companies/"+slug, nil).JSON(t)
			delete(again, "created_at")
			delete(again, "updated_at")
			againJSON, err := json.Marshal(again)
			require.NoError(t, err)
			require.JSONEq(t, want, string(againJSON))
		})
	}
}

// testCreateSignInLimits covers auth.token_lifetimes and
// agents.sign_in_refused: values at the edge of each rule are stored and
// returned as sent, by POST and by GET.
func testCreateSignInLimits(t *testing.T, env *kit) {
	const device = "urn:ietf:params:oauth:grant-type:device_code"
	longID := "https://agent.example/" + strings.Repeat("a", 2048-len("https://agent.example/"))
	tests := []struct {
		name     string
		lifetime string // auth.token_lifetimes sent, "" for none
		refused  string // agents.sign_in_refused sent, "" for none
		// wantLifetime and wantRefused are returned; empty means as sent.
		wantLifetime, wantRefused string
	}{
		{name: "0 given is the default", lifetime: `{"access_seconds": 0, "refresh_seconds": 0}`},
		{name: "lower edges", lifetime: `{"access_seconds": 60, "refresh_seconds": 3600}`},
		{name: "upper edges", lifetime: `{"access_seconds": 86400, "refresh_seconds": 31536000}`},
		{name: "only the access lifetime", lifetime: `{"access_seconds": 900}`,
			wantLifetime: `{"access_seconds": 900, "refresh_seconds": 0}`},
		{name: "only the refresh lifetime", lifetime: `{"refresh_seconds": 7200}`,
			wantLifetime: `{"access_seconds": 0, "refresh_seconds": 7200}`},
		{name: "empty lifetimes", lifetime: `{}`, wantLifetime: `{"access_seconds": 0, "refresh_seconds": 0}`},

		{name: "every sign-in type refused", refused: `{"https://agent.example/agent.json": []}`},
		{name: "one sign-in type refused", refused: `{"https://agent.example/agent.json": ["` + device + `"]}`},
		{name: "both sign-in types refused", refused: `{"https://agent.example/agent.json": ["authorization_code", "` + device + `"]}`},
		{name: "several client_ids", refused: `{"https://a.example/agent.json": [], "https://b.example/c?id=1": ["authorization_code"],
			"https://c.example:8443/agent.json": ["` + device + `"]}`},
		{name: "client_id of 2048 characters", refused: `{"` + longID + `": []}`},
		{name: "empty map", refused: `{}`},
		{name: "both settings", lifetime: `{"access_seconds": 120, "refresh_seconds": 86400}`,
			refused: `{"https://agent.example/agent.json": ["authorization_code"]}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slug := fmt.Sprintf("signin%d", i)
			patch := map[string]any{}
			if tt.lifetime != "" {
				patch["auth"] = map[string]any{"token_lifetimes": json.RawMessage(tt.lifetime)}
			}
			if tt.refused != "" {
				patch["agents"] = map[string]any{"sign_in_refused": json.RawMessage(tt.refused)}
			}
			raw, err := json.Marshal(patch)
			require.NoError(t, err)
			body := merge(t, minimalBody(slug, slug+".example"), string(raw))
			resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", body)
			require.Equal(t, http.StatusCreated, resp.Status, "body: %s\nresponse: %s", body, resp.Body)

			wantLifetime := cmp.Or(tt.wantLifetime, tt.lifetime, `{"access_seconds": 0, "refresh_seconds": 0}`)
			wantRefused := cmp.Or(tt.wantRefused, tt.refused, `{}`)
			again := env.Admin(t, http.MethodGet, "/admin/v1/companies/"+slug, nil)
			require.Equal(t, http.StatusOK, again.Status)
			for _, got := range []map[string]any{resp.JSON(t), again.JSON(t)} {
				requireMemberJSON(t, wantLifetime, got, "auth", "token_lifetimes")
				requireMemberJSON(t, wantRefused, got, "agents", "sign_in_refused")
			}
		})
	}
}

// requireMemberJSON checks that the member of doc at path is the JSON want.
func requireMemberJSON(t *testing.T, want string, doc map[string]any, path ...string) {
	t.Helper()
	var v any = doc
	for _, k := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%v: not an object at %s", path, k)
		v, ok = m[k]
		require.True(t, ok, "%v: no member %s", path, k)
	}
	got, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, want, string(got), "%v", path)
}

// testCreateEdgeCases covers values at the edge of each rule that must
// still be accepted.
func testCreateEdgeCases(t *testing.T, env *kit) {
	tests := []struct {
		name  string
		patch string
	}{
		{"slug of 63 characters", `{"slug": "` + strings.Repeat("a", 62) + `9"}`},
		{"slug of one character", `{"slug": "x"}`},
		{"name of 200 characters", `{"organization": {"name": "` + strings.Repeat("é", 200) + `"}}`},
		{"name with newline and tab", `{"organization": {"name": "Acme\n\tOutfitters"}}`},
		{"punycode domain", `{"organization": {"domain": "xn--bcher-kva.example"}}`},
		{"domain with digits", `{"organization": {"domain": "shop1.123.example"}}`},
		{"scope names with punctuation", `{"auth": {"scopes": {"a:b/c.d!#$%&'()*+,-;<=>?@[]^_{|}~": "All of it"}}}`},
		{"scope name of 128 characters", `{"auth": {"scopes": {"` + strings.Repeat("s", 128) + `": "Long"}}}`},
		{"scope hint without a scope description", `{"auth": {"scope_hints": {"orders": {"changes": "none", "personal_data": false}}}}`},
		{"no issuer and no auth fields", `{"auth": {"issuer": false}}`},
		{"disabled keeps scopes", `{"auth": {"disabled": true, "scopes": {"orders": "Orders"}}}`},
		{"only device sign-in", `{"auth": {"grant_types": ["urn:ietf:params:oauth:grant-type:device_code"]}}`},
		{"conversations signed_in", `{"conversations": {"access": "signed_in"}}`},
		{"agent webhook of 2048 characters with port and query", `{"conversations": {"agent_webhook": "https://agent.acme.example:8443/hook?k=` +
			strings.Repeat("a", 2048-len("https://agent.acme.example:8443/hook?k=")) + `"}}`},
		{"conversation limits at their lower edges", `{"conversations": {"handoff_timeout_seconds": 10, "idle_close_seconds": 60, "retention_days": 1}}`},
		{"conversation limits at their upper edges", `{"conversations": {"handoff_timeout_seconds": 86400, "idle_close_seconds": 31536000, "retention_days": 3650}}`},
		{"conversation limits 0 are the defaults", `{"conversations": {"handoff_timeout_seconds": 0, "idle_close_seconds": 0, "retention_days": 0}}`},
		{"handoff message of 1000 characters", `{"conversations": {"handoff_unavailable_message": "` + strings.Repeat("é", 1000) + `"}}`},
		{"handoff message with newline", `{"conversations": {"handoff_unavailable_message": "Nobody is free.\nTry again later."}}`},
		{"relative skill urls", `{"skill_index": {"$schema": "` + schema020 + `", "skills": [
			{"name": "a", "description": "A", "type": "skill-md", "url": "a/SKILL.md", "digest": "` + digestA + `"},
			{"name": "b", "description": "B", "type": "archive", "url": "/b.tar.gz", "digest": "` + digestA + `"},
			{"name": "c", "description": "C", "type": "skill-md", "url": "../c/SKILL.md", "digest": "` + digestA + `"}]}}`},
		{"empty skill index", `{"skill_index": {"$schema": "` + schema020 + `", "skills": []}}`},
		{"extension with relative and non-URL strings", `{"extensions": {"acme.example/x": {"version": "1", "path": "/x", "text": "see https:/nothing"}}}`},
		{"mediated sign-in with issuer", `{"extensions": {"mediated-sign-in": {"version": "1"}}}`},
		{"alternative with references only", `{"excluded_tasks": [{"task": "T", "alternative": {"references": [{"type": "web", "url": "https://acme.example/t"}]}}]}`},
		{"excluded task without alternative", `{"excluded_tasks": [{"task": "T"}]}`},
		{"200 scopes and 200 excluded tasks", `{"auth": {"scopes": {` + many200(`"s%d": "S"`) + `}}, "excluded_tasks": [` + many200(`{"task": "T%d"}`) + `]}`},
		{"extension nested 8 deep", `{"extensions": {"acme.example/x": {"version": "1", "x": ` +
			strings.Repeat(`{"a": `, 8) + `"https://acme.example/ok"` + strings.Repeat("}", 8) + `}}}`},

		// Grant types: empty means both sign-in types, so an empty list is
		// fine with or without an issuer, and a kept list is fine while
		// sign-in is disabled.
		{"empty grant types with an issuer", `{"auth": {"grant_types": []}}`},
		{"empty grant types without an issuer", `{"auth": {"issuer": false, "grant_types": []}}`},
		{"grant types kept while sign-in is disabled", `{"auth": {"disabled": true, "grant_types": ["authorization_code"]}}`},
		{"200 scope hints", `{"auth": {"scope_hints": {` + many200(`"s%d": {"changes": "none", "personal_data": false}`) + `}}}`},
		{"10 other authorization servers", `{"auth": {"other_authorization_servers": [` + manyN(10, `"https://idp%d.acme.example"`) + `]}}`},

		// agents (spec 4.1)
		{"accept listed, none listed", `{"agents": {"accept": "listed"}}`},
		{"accept listed", `{"agents": {"accept": "listed", "client_ids": ["https://agent.example/agent.json", "https://agent.example/other.json"]}}`},
		{"accept unlisted", `{"agents": {"accept": "unlisted", "client_ids": ["https://agent.example/agent.json"]}}`},
		{"client_ids while accepting all", `{"agents": {"accept": "all", "client_ids": ["https://agent.example/agent.json"]}}`},
		{"client_id with query and port", `{"agents": {"client_ids": ["https://agent.example:8443/c?id=1"]}}`},
		{"client_id of 2048 characters", `{"agents": {"client_ids": ["https://agent.example/` + strings.Repeat("a", 2048-len("https://agent.example/")) + `"]}}`},
		{"10000 client_ids", `{"agents": {"accept": "listed", "client_ids": [` + manyN(10000, `"https://a.co/%d"`) + `]}}`},

		// sessions (spec 5.5) and rate limits (spec 5.6)
		{"idle timeout of a minute", `{"sessions": {"idle_timeout_seconds": 60}}`},
		{"idle timeout of 366 days", `{"sessions": {"idle_timeout_seconds": 31622400}}`},
		{"rate limits at their edges", `{"rate_limits": {"per_agent": 1, "per_session": 1000000, "per_address": 1}}`},

		// feedback alternatives (spec 9.3)
		{"feedback alternative with instructions", `{"feedback": {"alternatives": [{"task": "T", "alternative": {"instructions": "Call us."}}]}}`},
		{"feedback alternative naming listed APIs", `{"apis": [{"type": "openapi", "url": "https://api.acme.example/openapi.json"}, {"type": "mcp", "url": "https://mcp.acme.example/mcp"}],
			"feedback": {"alternatives": [{"task": "T", "alternative": {"references": [
				{"type": "openapi", "url": "https://api.acme.example/openapi.json", "operation_id": "applyGiftCard"},
				{"type": "mcp", "url": "https://mcp.acme.example/mcp"}]}}]}}`},
		{"feedback alternative task of 200 characters", `{"feedback": {"alternatives": [{"task": "` + strings.Repeat("é", 200) + `", "alternative": {"instructions": "I"}}]}}`},
		{"feedback alternative with 20 references", `{"feedback": {"alternatives": [{"task": "T", "alternative": {"references": [` +
			manyN(20, `{"type": "web", "url": "https://acme.example/%d"}`) + `]}}]}}`},
		{"excluded task alternative with 20 references", `{"excluded_tasks": [{"task": "T", "alternative": {"references": [` +
			manyN(20, `{"type": "web", "url": "https://acme.example/%d"}`) + `]}}]}`},
		{"feedback tasks that differ by more than case and space", `{"feedback": {"alternatives": [
			{"task": "Pay with a gift card", "alternative": {"instructions": "A"}},
			{"task": "Pay with gift cards", "alternative": {"instructions": "B"}}]}}`},
		{"feedback alternatives while feedback is off", `{"feedback": {"enabled": false, "alternatives": [{"task": "T", "alternative": {"instructions": "I"}}]}}`},
		{"200 feedback alternatives", `{"feedback": {"alternatives": [` + many200(`{"task": "T%d", "alternative": {"instructions": "I"}}`) + `]}}`},

		// web (spec 6; docs/website.md)
		{"website settings at their edges", `{"organization": {"domain": "shop.web1.example"},
			"auth": {"scopes": {"orders": "Orders", "returns": "Returns"}},
			"web": {"origin": "https://www.web1.example:8443/site", "cookie_domain": "web1.example",
				"cookie_name": "__Secure-!#$%&'*+-.^_|~` + strings.Repeat("c", 64-len("__Secure-!#$%&'*+-.^_|~")) + `",
				"landing_path": "/welcome?a=%C3%A9&b=1#top` + strings.Repeat("x", 2048-len("/welcome?a=%C3%A9&b=1#top")) + `",
				"scope_rules": [` + manyN(100, `{"path": "/r%d/", "methods": ["GET", "M-SEARCH"], "scopes": ["orders", "returns"]}`) + `]}}`},
		{"cookie domain an extra domain", `{"organization": {"domain": "web2.example"}, "domains": ["www.web2.example"],
			"web": {"cookie_name": "sid", "cookie_domain": "www.web2.example"}}`},
		{"__Host- cookie name, host-only", `{"web": {"cookie_name": "__Host-acme"}}`},
		{"scope rules at one path, with and without methods", `{"auth": {"scopes": {"orders": "Orders", "returns": "Returns"}},
			"web": {"origin": "https://www.acme.example", "scope_rules": [
				{"path": "/orders", "scopes": ["orders"]},
				{"path": "/orders", "methods": ["POST"], "scopes": ["orders", "returns"]},
				{"path": "/orders", "methods": ["DELETE"], "scopes": ["returns"]},
				{"path": "/", "scopes": ["orders"]},
				{"path": "/caf%C3%A9/", "scopes": ["orders"]}]}}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slug := fmt.Sprintf("ok%d", i)
			body := merge(t, minimalBody(slug, slug+".example"), tt.patch)
			resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", body)
			require.Equal(t, http.StatusCreated, resp.Status, "body: %s\nresponse: %s", body, resp.Body)
		})
	}
}

// TestCreateCompanyRefused sends bodies that must not be stored: each
// breaks one rule of Validate, or cannot be read as a Company at all.
// Afterwards the database holds no Company and no domain.
func TestCreateCompanyRefused(t *testing.T) {
	t.Parallel()
	env := setup(t)
	t.Run("validation", func(t *testing.T) {
		// One broken rule (TestValidate has them all) is a 400 naming
		// its field.
		requireInvalid(t, env.Admin(t, http.MethodPost, "/admin/v1/companies",
			merge(t, minimalBody("acme", "acme.example"), `{"domains": ["`+publicHost+`"]}`)), "domains[0]")
	})
	t.Run("bad bodies", func(t *testing.T) { testCreateBadBodies(t, env) })
	requireNoCompanies(t, env)
}

// requireInvalidError checks that err is invalid_request naming exactly
// fields, each with a message.
func requireInvalidError(t *testing.T, err error, fields ...string) {
	t.Helper()
	var e *httpx.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, httpx.CodeInvalidRequest, e.Code, "%v", err)
	require.NotEmpty(t, e.Description)
	got := make([]string, 0, len(e.Fields))
	for _, f := range e.Fields {
		require.NotEmpty(t, f.Message, "field %s has no message", f.Field)
		got = append(got, f.Field)
	}
	require.Equal(t, fields, got, "%v", err)
}

// TestValidate breaks one rule of Validate per row, on a body read as
// the admin API reads it: each is refused naming exactly that field.
func TestValidate(t *testing.T) {
	t.Parallel()
	const (
		openapiURL = "https://api.acme.example/openapi.json"
		mcpURL     = "https://mcp.acme.example/mcp"
		twoAPIs    = `"apis": [{"type": "openapi", "url": "` + openapiURL + `"}, {"type": "mcp", "url": "` + mcpURL + `"}]`
	)
	skill := func(fields string) string {
		return merge(t, `{"name": "s", "description": "S", "type": "skill-md", "url": "s/SKILL.md", "digest": "`+digestA+`"}`, fields)
	}
	skills := func(s ...string) string {
		return `{"skill_index": {"$schema": "` + schema020 + `", "skills": [` + strings.Join(s, ",") + `]}}`
	}
	alt := func(refs string) string {
		return `{` + twoAPIs + `, "excluded_tasks": [{"task": "T", "alternative": {"references": [` + refs + `]}}]}`
	}
	ext := func(entry string) string {
		return `{"extensions": {"acme.example/gift-wrap": ` + entry + `}}`
	}
	// webRules makes a body with a website, two scopes and these scope
	// rules.
	webRules := func(rules string) string {
		return `{"auth": {"scopes": {"orders": "Orders", "returns": "Returns"}},
			"web": {"origin": "https://www.acme.example", "scope_rules": [` + rules + `]}}`
	}
	// raw marks a body sent as is, for members a merge patch would drop
	// (null values).
	const rawMark = "raw:"
	raw := func(members string) string {
		return rawMark + `{"slug": "{slug}", "organization": {"name": "Acme", "domain": "{domain}"}, ` + members + `}`
	}
	const refField = "excluded_tasks[0].alternative.references[0]"
	// feedback makes a body with the APIs and these feedback alternatives.
	feedback := func(alts ...string) string {
		return `{` + twoAPIs + `, "feedback": {"alternatives": [` + strings.Join(alts, ",") + `]}}`
	}
	const fbField = "feedback.alternatives[0]"
	// many returns n JSON items made by item from their index.
	many := func(n int, item func(i int) string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = item(i)
		}
		return strings.Join(items, ",")
	}
	deep := `"https://acme.example/deep"`
	for range 9 {
		deep = `{"a": ` + deep + `}`
	}

	tests := []struct {
		name  string
		patch string
		field string
	}{
		// slug
		{"slug missing", `{"slug": null}`, "slug"},
		{"slug empty", `{"slug": ""}`, "slug"},
		{"slug uppercase", `{"slug": "Acme"}`, "slug"},
		{"slug leading hyphen", `{"slug": "-acme"}`, "slug"},
		{"slug trailing hyphen", `{"slug": "acme-"}`, "slug"},
		{"slug underscore", `{"slug": "ac_me"}`, "slug"},
		{"slug dot", `{"slug": "ac.me"}`, "slug"},
		{"slug slash", `{"slug": "ac/me"}`, "slug"},
		{"slug of 64 characters", `{"slug": "` + strings.Repeat("a", 64) + `"}`, "slug"},

		// organization.name
		{"name missing", `{"organization": {"name": null}}`, "organization.name"},
		{"name empty", `{"organization": {"name": ""}}`, "organization.name"},
		{"name of 201 characters", `{"organization": {"name": "` + strings.Repeat("a", 201) + `"}}`, "organization.name"},
		{"name with control character", `{"organization": {"name": "Ac\u0007me"}}`, "organization.name"},
		{"name with carriage return", `{"organization": {"name": "Acme\r"}}`, "organization.name"},
		{"name with DEL-range C1 control", `{"organization": {"name": "Acme\u0085"}}`, "organization.name"},

		// organization.domain
		{"domain missing", `{"organization": {"domain": null}}`, "organization.domain"},
		{"domain uppercase", `{"organization": {"domain": "Acme.example"}}`, "organization.domain"},
		{"domain with port", `{"organization": {"domain": "acme.example:8443"}}`, "organization.domain"},
		{"domain with path", `{"organization": {"domain": "acme.example/shop"}}`, "organization.domain"},
		{"domain with trailing slash", `{"organization": {"domain": "acme.example/"}}`, "organization.domain"},
		{"domain with scheme", `{"organization": {"domain": "https://acme.example"}}`, "organization.domain"},
		{"domain IPv4", `{"organization": {"domain": "192.0.2.1"}}`, "organization.domain"},
		{"domain short IPv4", `{"organization": {"domain": "127.1"}}`, "organization.domain"},
		{"domain hex IPv4", `{"organization": {"domain": "acme.0x7f"}}`, "organization.domain"},
		{"domain IPv6", `{"organization": {"domain": "2001:db8::1"}}`, "organization.domain"},
		{"domain single label", `{"organization": {"domain": "localhost"}}`, "organization.domain"},
		{"domain trailing dot", `{"organization": {"domain": "acme.example."}}`, "organization.domain"},
		{"domain underscore", `{"organization": {"domain": "ac_me.example"}}`, "organization.domain"},
		{"domain with space", `{"organization": {"domain": "acme .example"}}`, "organization.domain"},
		{"domain is the platform host", `{"organization": {"domain": "` + publicHost + `"}}`, "organization.domain"},

		// organization.logo_uri
		{"logo http", `{"organization": {"logo_uri": "http://acme.example/logo.png"}}`, "organization.logo_uri"},
		{"logo relative", `{"organization": {"logo_uri": "/logo.png"}}`, "organization.logo_uri"},
		{"logo with fragment", `{"organization": {"logo_uri": "https://acme.example/logo.png#x"}}`, "organization.logo_uri"},
		{"logo with user info", `{"organization": {"logo_uri": "https://u:p@acme.example/logo.png"}}`, "organization.logo_uri"},
		{"logo without host", `{"organization": {"logo_uri": "https:///logo.png"}}`, "organization.logo_uri"},

		// domains
		{"domains without issuer", `{"auth": {"issuer": false}, "domains": ["acme.example.org"]}`, "domains"},
		{"domains repeat organization.domain", `{"domains": ["{domain}"]}`, "domains[0]"},
		{"domains listed twice", `{"domains": ["a.example", "b.example", "a.example"]}`, "domains[2]"},
		{"domains uppercase", `{"domains": ["Acme.org"]}`, "domains[0]"},
		{"domains with port", `{"domains": ["a.example", "acme.org:8443"]}`, "domains[1]"},
		{"domains IP", `{"domains": ["10.0.0.1"]}`, "domains[0]"},
		{"domains empty string", `{"domains": [""]}`, "domains[0]"},
		{"domains platform host", `{"domains": ["` + publicHost + `"]}`, "domains[0]"},

		// auth without an issuer
		{"disabled without issuer", `{"auth": {"issuer": false, "disabled": true}}`, "auth.disabled"},
		{"grant types without issuer", `{"auth": {"issuer": false, "grant_types": ["authorization_code"]}}`, "auth.grant_types"},
		{"scopes without issuer", `{"auth": {"issuer": false, "scopes": {"orders": "Orders"}}}`, "auth.scopes"},
		{"scope hints without issuer", `{"auth": {"issuer": false, "scope_hints": {"orders": {"changes": "none", "personal_data": true}}}}`, "auth.scope_hints"},
		{"other servers without issuer", `{"auth": {"issuer": false, "other_authorization_servers": ["https://staff.acme.example"]}}`, "auth.other_authorization_servers"},

		// grant types
		{"grant type unknown", `{"auth": {"grant_types": ["password"]}}`, "auth.grant_types[0]"},
		{"grant type refresh_token", `{"auth": {"grant_types": ["authorization_code", "refresh_token"]}}`, "auth.grant_types[1]"},
		{"grant type listed twice", `{"auth": {"grant_types": ["authorization_code", "authorization_code"]}}`, "auth.grant_types[1]"},

		// scopes
		{"scope name with space", `{"auth": {"scopes": {"orders read": "Orders"}}}`, "auth.scopes.orders read"},
		{"scope name with quote", `{"auth": {"scopes": {"a\"b": "Orders"}}}`, `auth.scopes.a"b`},
		{"scope name with backslash", `{"auth": {"scopes": {"a\\b": "Orders"}}}`, `auth.scopes.a\b`},
		{"scope name non-ASCII", `{"auth": {"scopes": {"café": "Orders"}}}`, "auth.scopes.café"},
		{"scope name empty", `{"auth": {"scopes": {"": "Orders"}}}`, "auth.scopes."},
		{"scope name of 129 characters", `{"auth": {"scopes": {"` + strings.Repeat("s", 129) + `": "Long"}}}`, "auth.scopes." + strings.Repeat("s", 129)},
		{"scope description empty", `{"auth": {"scopes": {"orders": ""}}}`, "auth.scopes.orders"},
		{"scope description with control", `{"auth": {"scopes": {"orders": "Or\u0000ders"}}}`, "auth.scopes.orders"},
		{"scope description too long", `{"auth": {"scopes": {"orders": "` + strings.Repeat("d", 1001) + `"}}}`, "auth.scopes.orders"},

		// scope hints (spec 4.7)
		{"hint scope name invalid", `{"auth": {"scope_hints": {"bad name": {"changes": "none", "personal_data": true}}}}`, "auth.scope_hints.bad name"},
		{"hint changes missing", `{"auth": {"scope_hints": {"orders": {"personal_data": true}}}}`, "auth.scope_hints.orders.changes"},
		{"hint changes unknown", `{"auth": {"scope_hints": {"orders": {"changes": "maybe", "personal_data": true}}}}`, "auth.scope_hints.orders.changes"},
		{"hint changes wrong case", `{"auth": {"scope_hints": {"orders": {"changes": "None", "personal_data": true}}}}`, "auth.scope_hints.orders.changes"},
		{"hint personal_data missing", `{"auth": {"scope_hints": {"orders": {"changes": "none"}}}}`, "auth.scope_hints.orders.personal_data"},
		{"hint personal_data null", raw(`"auth": {"scope_hints": {"orders": {"changes": "none", "personal_data": null}}}`), "auth.scope_hints.orders.personal_data"},

		// other authorization servers
		{"other server http", `{"auth": {"other_authorization_servers": ["http://staff.acme.example"]}}`, "auth.other_authorization_servers[0]"},
		{"other server empty", `{"auth": {"other_authorization_servers": ["https://ok.example", ""]}}`, "auth.other_authorization_servers[1]"},
		{"other server listed twice", `{"auth": {"other_authorization_servers": ["https://a.example", "https://b.example", "https://a.example"]}}`, "auth.other_authorization_servers[2]"},
		{"11 other servers", `{"auth": {"other_authorization_servers": [` + many(11, func(i int) string { return fmt.Sprintf(`"https://idp%d.acme.example"`, i) }) + `]}}`, "auth.other_authorization_servers"},

		// conversations (spec 3.2)
		{"access unknown", `{"conversations": {"access": "public"}}`, "conversations.access"},
		{"access signed_in without issuer", `{"auth": {"issuer": false}, "conversations": {"access": "signed_in"}}`, "conversations.access"},
		{"access signed_in with sign-in disabled", `{"auth": {"disabled": true}, "conversations": {"access": "signed_in"}}`, "conversations.access"},
		{"agent webhook http", `{"conversations": {"agent_webhook": "http://agent.acme.example/hook"}}`, "conversations.agent_webhook"},
		{"agent webhook relative", `{"conversations": {"agent_webhook": "/hook"}}`, "conversations.agent_webhook"},
		{"agent webhook with user info", `{"conversations": {"agent_webhook": "https://u:p@agent.acme.example/hook"}}`, "conversations.agent_webhook"},
		{"agent webhook with fragment", `{"conversations": {"agent_webhook": "https://agent.acme.example/hook#x"}}`, "conversations.agent_webhook"},
		{"agent webhook of 2049 characters", `{"conversations": {"agent_webhook": "https://agent.acme.example/` +
			strings.Repeat("a", 2049-len("https://agent.acme.example/")) + `"}}`, "conversations.agent_webhook"},
		{"agent webhook not a string", `{"conversations": {"agent_webhook": 1}}`, "conversations.agent_webhook"},
		{"handoff timeout under 10 seconds", `{"conversations": {"handoff_timeout_seconds": 9}}`, "conversations.handoff_timeout_seconds"},
		{"handoff timeout over a day", `{"conversations": {"handoff_timeout_seconds": 86401}}`, "conversations.handoff_timeout_seconds"},
		{"handoff timeout negative", `{"conversations": {"handoff_timeout_seconds": -1}}`, "conversations.handoff_timeout_seconds"},
		{"handoff timeout a fraction", `{"conversations": {"handoff_timeout_seconds": 30.5}}`, "conversations.handoff_timeout_seconds"},
		{"idle close under a minute", `{"conversations": {"idle_close_seconds": 59}}`, "conversations.idle_close_seconds"},
		{"idle close over a year", `{"conversations": {"idle_close_seconds": 31536001}}`, "conversations.idle_close_seconds"},
		{"retention negative", `{"conversations": {"retention_days": -1}}`, "conversations.retention_days"},
		{"retention over 10 years", `{"conversations": {"retention_days": 3651}}`, "conversations.retention_days"},
		{"handoff message too long", `{"conversations": {"handoff_unavailable_message": "` + strings.Repeat("m", 1001) + `"}}`,
			"conversations.handoff_unavailable_message"},
		{"handoff message with control", `{"conversations": {"handoff_unavailable_message": "a\u0007b"}}`, "conversations.handoff_unavailable_message"},

		// mcp
		{"mcp description too long", `{"mcp": {"description": "` + strings.Repeat("m", 1001) + `"}}`, "mcp.description"},
		{"mcp signed_out not a boolean", `{"mcp": {"signed_out": "yes"}}`, "mcp.signed_out"},

		// operations
		{"operations enabled not a boolean", `{"operations": {"enabled": "yes"}}`, "operations.enabled"},
		{"operations not an object", `{"operations": true}`, "operations"},
		{"operations approval hook not https", `{"operations": {"enabled": true, "approval_hook": "http://hooks.acme.example/a"}}`, "operations.approval_hook"},
		{"operations approval hook relative", `{"operations": {"enabled": true, "approval_hook": "/hooks"}}`, "operations.approval_hook"},
		{"operations approval hook while off", `{"operations": {"approval_hook": "https://hooks.acme.example/a"}}`, "operations"},
		{"operations web without website", `{"operations": {"enabled": true, "web": true}}`, "operations.web"},
		{"operations web while off", `{"operations": {"web": true}, "web": {"browser_join": true, "origin": "https://www-origin.acme.example"}}`, "operations"},

		// apis
		{"api type unknown", `{"apis": [{"type": "graphql", "url": "https://api.acme.example/graphql"}]}`, "apis[0].type"},
		{"api type missing", `{"apis": [{"url": "https://api.acme.example/openapi.json"}]}`, "apis[0].type"},
		{"api url http", `{"apis": [{"type": "openapi", "url": "http://api.acme.example/openapi.json"}]}`, "apis[0].url"},
		{"api url missing", `{"apis": [{"type": "mcp"}]}`, "apis[0].url"},
		{"api url relative", `{"apis": [{"type": "mcp", "url": "/mcp"}]}`, "apis[0].url"},
		{"api listed twice", `{"apis": [{"type": "openapi", "url": "` + openapiURL + `"}, {"type": "openapi", "url": "` + openapiURL + `"}]}`, "apis[1].url"},
		{"api description with control", `{"apis": [{"type": "mcp", "url": "` + mcpURL + `", "description": "a\u001bb"}]}`, "apis[0].description"},

		// excluded tasks and alternatives (spec 9.1, 9.2)
		{"task missing", `{"excluded_tasks": [{"alternative": {"instructions": "Call us."}}]}`, "excluded_tasks[0].task"},
		{"task too long", `{"excluded_tasks": [{"task": "` + strings.Repeat("t", 201) + `"}]}`, "excluded_tasks[0].task"},
		{"alternative empty", `{"excluded_tasks": [{"task": "T", "alternative": {}}]}`, "excluded_tasks[0].alternative"},
		{"alternative empty references", `{"excluded_tasks": [{"task": "T", "alternative": {"references": []}}]}`, "excluded_tasks[0].alternative"},
		{"openapi reference to unlisted API", alt(`{"type": "openapi", "url": "https://other.example/openapi.json"}`), refField + ".url"},
		{"mcp reference to unlisted API", alt(`{"type": "mcp", "url": "https://other.example/mcp"}`), refField + ".url"},
		{"mcp reference to an openapi API", alt(`{"type": "mcp", "url": "` + openapiURL + `"}`), refField + ".url"},
		{"openapi reference to an mcp API", alt(`{"type": "openapi", "url": "` + mcpURL + `"}`), refField + ".url"},
		{"openapi reference without APIs", `{"excluded_tasks": [{"task": "T", "alternative": {"references": [{"type": "openapi", "url": "` + openapiURL + `"}]}}]}`, refField + ".url"},
		{"web reference http", alt(`{"type": "web", "url": "http://acme.example/checkout"}`), refField + ".url"},
		{"web reference missing url", alt(`{"type": "web"}`), refField + ".url"},
		{"reference type unknown", alt(`{"type": "email", "url": "https://acme.example/contact"}`), refField + ".type"},
		{"operation_id on web reference", alt(`{"type": "web", "url": "https://acme.example/checkout", "operation_id": "x"}`), refField + ".operation_id"},
		{"operation_id on mcp reference", alt(`{"type": "mcp", "url": "` + mcpURL + `", "operation_id": "x"}`), refField + ".operation_id"},
		{"21 references", alt(many(21, func(i int) string { return fmt.Sprintf(`{"type": "web", "url": "https://acme.example/%d"}`, i) })),
			"excluded_tasks[0].alternative.references"},

		// feedback alternatives (spec 9.2, 9.3): the same rules as the
		// alternatives of excluded tasks, and a task names each once.
		{"feedback task missing", feedback(`{"alternative": {"instructions": "I"}}`), fbField + ".task"},
		{"feedback task empty", feedback(`{"task": "", "alternative": {"instructions": "I"}}`), fbField + ".task"},
		{"feedback task too long", feedback(`{"task": "` + strings.Repeat("t", 201) + `", "alternative": {"instructions": "I"}}`), fbField + ".task"},
		{"feedback task with control character", feedback(`{"task": "T\u0007", "alternative": {"instructions": "I"}}`), fbField + ".task"},
		{"feedback task listed twice", feedback(`{"task": "Pay with a gift card", "alternative": {"instructions": "A"}}`,
			`{"task": "Track a parcel", "alternative": {"instructions": "B"}}`,
			`{"task": "  PAY with a Gift Card\t", "alternative": {"instructions": "C"}}`), "feedback.alternatives[2].task"},
		{"feedback alternative missing", feedback(`{"task": "T"}`), fbField + ".alternative"},
		{"feedback alternative empty", feedback(`{"task": "T", "alternative": {}}`), fbField + ".alternative"},
		{"feedback alternative empty references", feedback(`{"task": "T", "alternative": {"references": []}}`), fbField + ".alternative"},
		{"feedback instructions too long", feedback(`{"task": "T", "alternative": {"instructions": "` + strings.Repeat("i", 4001) + `"}}`), fbField + ".alternative.instructions"},
		{"feedback openapi reference to unlisted API", feedback(`{"task": "T", "alternative": {"references": [{"type": "openapi", "url": "https://other.example/openapi.json"}]}}`),
			fbField + ".alternative.references[0].url"},
		{"feedback mcp reference to an openapi API", feedback(`{"task": "T", "alternative": {"references": [{"type": "mcp", "url": "` + openapiURL + `"}]}}`),
			fbField + ".alternative.references[0].url"},
		{"feedback web reference http", feedback(`{"task": "T", "alternative": {"references": [{"type": "web", "url": "http://acme.example/x"}]}}`),
			fbField + ".alternative.references[0].url"},
		{"feedback reference type unknown", feedback(`{"task": "T", "alternative": {"references": [{"type": "phone", "url": "https://acme.example/x"}]}}`),
			fbField + ".alternative.references[0].type"},
		{"feedback operation_id on web reference", feedback(`{"task": "T", "alternative": {"references": [{"type": "web", "url": "https://acme.example/x", "operation_id": "x"}]}}`),
			fbField + ".alternative.references[0].operation_id"},
		{"feedback 21 references", feedback(`{"task": "T", "alternative": {"references": [` +
			many(21, func(i int) string { return fmt.Sprintf(`{"type": "web", "url": "https://acme.example/%d"}`, i) }) + `]}}`),
			fbField + ".alternative.references"},
		{"201 feedback alternatives", `{"feedback": {"alternatives": [` +
			many(201, func(i int) string { return fmt.Sprintf(`{"task": "T%d", "alternative": {"instructions": "I"}}`, i) }) + `]}}`,
			"feedback.alternatives"},

		// agents (spec 4.1)
		{"accept unknown", `{"agents": {"accept": "some"}}`, "agents.accept"},
		{"accept wrong case", `{"agents": {"accept": "Listed"}}`, "agents.accept"},
		{"client_id http", `{"agents": {"client_ids": ["http://agent.example/agent.json"]}}`, "agents.client_ids[0]"},
		{"client_id relative", `{"agents": {"client_ids": ["https://agent.example/a.json", "agent.example/agent.json"]}}`, "agents.client_ids[1]"},
		{"client_id empty", `{"agents": {"client_ids": [""]}}`, "agents.client_ids[0]"},
		{"client_id with fragment", `{"agents": {"client_ids": ["https://agent.example/agent.json#x"]}}`, "agents.client_ids[0]"},
		{"client_id with user info", `{"agents": {"client_ids": ["https://u@agent.example/agent.json"]}}`, "agents.client_ids[0]"},
		{"client_id of 2049 characters", `{"agents": {"client_ids": ["https://agent.example/` + strings.Repeat("a", 2049-len("https://agent.example/")) + `"]}}`,
			"agents.client_ids[0]"},
		{"10001 client_ids", `{"agents": {"client_ids": [` + manyN(10001, `"https://a.co/%d"`) + `]}}`, "agents.client_ids"},

		// agents.sign_in_refused: keyed by client_id, each with the sign-in
		// types refused (spec 4.1).
		{"refused client_id http", `{"agents": {"sign_in_refused": {"http://a.example/agent.json": []}}}`,
			"agents.sign_in_refused.http://a.example/agent.json"},
		{"refused client_id relative", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": [], "a.example/agent.json": []}}}`,
			"agents.sign_in_refused.a.example/agent.json"},
		{"refused client_id empty", `{"agents": {"sign_in_refused": {"": []}}}`, "agents.sign_in_refused."},
		{"refused client_id with fragment", `{"agents": {"sign_in_refused": {"https://a.example/agent.json#x": []}}}`,
			"agents.sign_in_refused.https://a.example/agent.json#x"},
		{"refused client_id with user info", `{"agents": {"sign_in_refused": {"https://u@a.example/agent.json": []}}}`,
			"agents.sign_in_refused.https://u@a.example/agent.json"},
		{"refused client_id of 2049 characters", `{"agents": {"sign_in_refused": {"https://a.example/` + strings.Repeat("a", 2049-len("https://a.example/")) + `": []}}}`,
			"agents.sign_in_refused.https://a.example/" + strings.Repeat("a", 2049-len("https://a.example/"))},
		{"refused grant type unknown", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": ["password"]}}}`,
			"agents.sign_in_refused.https://a.example/agent.json[0]"},
		{"refused grant type refresh_token", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": ["authorization_code", "refresh_token"]}}}`,
			"agents.sign_in_refused.https://a.example/agent.json[1]"},
		{"refused grant type wrong case", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": ["Authorization_Code"]}}}`,
			"agents.sign_in_refused.https://a.example/agent.json[0]"},
		{"refused grant type empty", `{"agents": {"sign_in_refused": {"https://a.example/agent.json": [""]}}}`,
			"agents.sign_in_refused.https://a.example/agent.json[0]"},
		{"10001 refused client_ids", `{"agents": {"sign_in_refused": {` + manyN(10001, `"https://a.co/%d": []`) + `}}}`, "agents.sign_in_refused"},

		// auth.token_lifetimes: 0 (the default) or within bounds.
		{"access lifetime under a minute", `{"auth": {"token_lifetimes": {"access_seconds": 59}}}`, "auth.token_lifetimes.access_seconds"},
		{"access lifetime over a day", `{"auth": {"token_lifetimes": {"access_seconds": 86401}}}`, "auth.token_lifetimes.access_seconds"},
		{"access lifetime negative", `{"auth": {"token_lifetimes": {"access_seconds": -1}}}`, "auth.token_lifetimes.access_seconds"},
		{"access lifetime a string", `{"auth": {"token_lifetimes": {"access_seconds": "15m"}}}`, "auth.token_lifetimes.access_seconds"},
		{"access lifetime a fraction", `{"auth": {"token_lifetimes": {"access_seconds": 60.5}}}`, "auth.token_lifetimes.access_seconds"},
		{"refresh lifetime under an hour", `{"auth": {"token_lifetimes": {"refresh_seconds": 3599}}}`, "auth.token_lifetimes.refresh_seconds"},
		{"refresh lifetime over 365 days", `{"auth": {"token_lifetimes": {"refresh_seconds": 31536001}}}`, "auth.token_lifetimes.refresh_seconds"},
		{"refresh lifetime negative", `{"auth": {"token_lifetimes": {"refresh_seconds": -3600}}}`, "auth.token_lifetimes.refresh_seconds"},
		{"refresh lifetime valid, access not", `{"auth": {"token_lifetimes": {"access_seconds": 30, "refresh_seconds": 3600}}}`,
			"auth.token_lifetimes.access_seconds"},
		{"access lifetime valid, refresh not", `{"auth": {"token_lifetimes": {"access_seconds": 60, "refresh_seconds": 60}}}`,
			"auth.token_lifetimes.refresh_seconds"},
		{"token lifetimes unknown member", `{"auth": {"token_lifetimes": {"id_token_seconds": 60}}}`, "auth.token_lifetimes.id_token_seconds"},

		// auth.dpop (spec 4.5)
		{"dpop unknown value", `{"auth": {"dpop": "yes"}}`, "auth.dpop"},
		{"dpop wrong case", `{"auth": {"dpop": "Required"}}`, "auth.dpop"},
		{"dpop a boolean", `{"auth": {"dpop": true}}`, "auth.dpop"},
		{"dpop without an issuer", `{"auth": {"issuer": false, "dpop": "allowed"}}`, "auth.dpop"},
		{"dpop nonce without dpop", `{"auth": {"dpop_nonce": true}}`, "auth.dpop_nonce"},
		{"dpop nonce with dpop off", `{"auth": {"dpop": "off", "dpop_nonce": true}}`, "auth.dpop_nonce"},
		{"dpop nonce a string", `{"auth": {"dpop": "allowed", "dpop_nonce": "yes"}}`, "auth.dpop_nonce"},

		// sessions (spec 5.5)
		{"idle timeout under a minute", `{"sessions": {"idle_timeout_seconds": 59}}`, "sessions.idle_timeout_seconds"},
		{"idle timeout zero", `{"sessions": {"idle_timeout_seconds": 0}}`, "sessions.idle_timeout_seconds"},
		{"idle timeout negative", `{"sessions": {"idle_timeout_seconds": -60}}`, "sessions.idle_timeout_seconds"},
		{"idle timeout over 366 days", `{"sessions": {"idle_timeout_seconds": 31622401}}`, "sessions.idle_timeout_seconds"},

		// rate limits (spec 5.6)
		{"per_agent zero", `{"rate_limits": {"per_agent": 0}}`, "rate_limits.per_agent"},
		{"per_session negative", `{"rate_limits": {"per_session": -1}}`, "rate_limits.per_session"},
		{"per_address over a million", `{"rate_limits": {"per_address": 1000001}}`, "rate_limits.per_address"},

		// web
		{"web origin http", `{"web": {"origin": "http://origin.acme.example"}}`, "web.origin"},
		{"web origin relative", `{"web": {"origin": "origin.acme.example"}}`, "web.origin"},

		{"web origin with query", `{"web": {"origin": "https://origin.acme.example/?site=1"}}`, "web.origin"},
		{"web origin one of the Company's domains", `{"domains": ["www.loop.example"], "web": {"origin": "https://WWW.loop.example/site"}}`, "web.origin"},
		{"web origin with fragment", `{"web": {"origin": "https://origin.acme.example/#x"}}`, "web.origin"},
		{"web origin of 2049 characters", `{"web": {"origin": "https://origin.acme.example/` +
			strings.Repeat("a", 2049-len("https://origin.acme.example/")) + `"}}`, "web.origin"},
		{"cookie name with space", `{"web": {"cookie_name": "my session"}}`, "web.cookie_name"},
		{"cookie name with semicolon", `{"web": {"cookie_name": "a;b"}}`, "web.cookie_name"},
		{"cookie name with equals", `{"web": {"cookie_name": "a=b"}}`, "web.cookie_name"},
		{"cookie name with slash", `{"web": {"cookie_name": "a/b"}}`, "web.cookie_name"},
		{"cookie name non-ASCII", `{"web": {"cookie_name": "séance"}}`, "web.cookie_name"},
		{"cookie name with control", `{"web": {"cookie_name": "a\u0001b"}}`, "web.cookie_name"},
		{"cookie name of 65 characters", `{"web": {"cookie_name": "` + strings.Repeat("c", 65) + `"}}`, "web.cookie_name"},
		{"cookie name the join cookie's", `{"web": {"cookie_name": "__Host-poppy_join"}}`, "web.cookie_name"},
		{"__Host- cookie name with a domain", `{"web": {"cookie_name": "__Host-sid", "cookie_domain": "{domain}"}}`, "web.cookie_name"},
		{"__host- cookie name with a domain", `{"web": {"cookie_name": "__host-sid", "cookie_domain": "{domain}"}}`, "web.cookie_name"},
		{"cookie domain of another site", `{"web": {"cookie_domain": "other.example"}}`, "web.cookie_domain"},
		{"cookie domain ending like the domain", `{"web": {"cookie_domain": "x{domain}"}}`, "web.cookie_domain"},
		{"cookie domain below the domain", `{"web": {"cookie_domain": "www.{domain}"}}`, "web.cookie_domain"},
		{"cookie domain a single label", `{"web": {"cookie_domain": "example"}}`, "web.cookie_domain"},
		{"cookie domain a public suffix", `{"organization": {"domain": "{slug}.co.uk"}, "web": {"cookie_domain": "co.uk"}}`, "web.cookie_domain"},
		{"cookie domain a private public suffix", `{"organization": {"domain": "{slug}.github.io"}, "web": {"cookie_domain": "github.io"}}`, "web.cookie_domain"},
		{"cookie domain uppercase", `{"web": {"cookie_domain": "ROW.example"}}`, "web.cookie_domain"},
		{"cookie domain with dot", `{"web": {"cookie_domain": ".{domain}"}}`, "web.cookie_domain"},
		{"landing path relative", `{"web": {"landing_path": "welcome"}}`, "web.landing_path"},
		{"landing path absolute URL", `{"web": {"landing_path": "https://evil.example/"}}`, "web.landing_path"},
		{"landing path scheme-relative", `{"web": {"landing_path": "//evil.example/"}}`, "web.landing_path"},
		{"landing path with backslash", `{"web": {"landing_path": "/\\evil.example"}}`, "web.landing_path"},
		{"landing path with space", `{"web": {"landing_path": "/a b"}}`, "web.landing_path"},
		{"landing path with control", `{"web": {"landing_path": "/a\r\nSet-Cookie: x=1"}}`, "web.landing_path"},
		{"landing path non-ASCII", `{"web": {"landing_path": "/café"}}`, "web.landing_path"},
		{"landing path of 2049 characters", `{"web": {"landing_path": "/` + strings.Repeat("a", 2048) + `"}}`, "web.landing_path"},
		{"scope rules without origin", `{"auth": {"scopes": {"orders": "Orders"}}, "web": {"scope_rules": [{"path": "/", "scopes": ["orders"]}]}}`,
			"web.scope_rules"},
		{"101 scope rules", webRules(manyN(101, `{"path": "/r%d", "scopes": ["orders"]}`)), "web.scope_rules"},
		{"scope rule path relative", webRules(`{"path": "orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path missing", webRules(`{"scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with dot segment", webRules(`{"path": "/a/../orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with encoded dot segment", webRules(`{"path": "/a/%2e%2e/orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with empty segment", webRules(`{"path": "/a//orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		// The one path rule (safehttp.ValidPath): these were accepted.
		{"scope rule path with a path-parameter dot segment", webRules(`{"path": "/a/..;x/orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with encoded dot segment and parameter", webRules(`{"path": "/a/%2e%2e;/orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with encoded slash", webRules(`{"path": "/a%2Forders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with encoded backslash", webRules(`{"path": "/a%5Corders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with encoded NUL", webRules(`{"path": "/orders%00", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with encoded question mark", webRules(`{"path": "/orders%3F", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with a query", webRules(`{"path": "/orders?x=1", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with bad escape", webRules(`{"path": "/a%zz", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path with space", webRules(`{"path": "/my orders", "scopes": ["orders"]}`), "web.scope_rules[0].path"},
		{"scope rule path of 2049 characters", webRules(`{"path": "/` + strings.Repeat("a", 2048) + `", "scopes": ["orders"]}`),
			"web.scope_rules[0].path"},
		{"scope rule method lower-case", webRules(`{"path": "/", "methods": ["get"], "scopes": ["orders"]}`), "web.scope_rules[0].methods[0]"},
		{"scope rule method with space", webRules(`{"path": "/", "methods": ["GET", "G T"], "scopes": ["orders"]}`), "web.scope_rules[0].methods[1]"},
		{"scope rule method empty", webRules(`{"path": "/", "methods": [""], "scopes": ["orders"]}`), "web.scope_rules[0].methods[0]"},
		{"scope rule method listed twice", webRules(`{"path": "/", "methods": ["POST", "POST"], "scopes": ["orders"]}`), "web.scope_rules[0].methods[1]"},
		{"scope rule without scopes", webRules(`{"path": "/"}`), "web.scope_rules[0].scopes"},
		{"scope rule with empty scopes", webRules(`{"path": "/", "scopes": []}`), "web.scope_rules[0].scopes"},
		{"scope rule with an unknown scope", webRules(`{"path": "/", "scopes": ["orders", "payments"]}`), "web.scope_rules[0].scopes[1]"},
		{"scope rule with a scope twice", webRules(`{"path": "/", "scopes": ["orders", "orders"]}`), "web.scope_rules[0].scopes[1]"},
		{"scope rule without an issuer", `{"auth": {"issuer": false}, "web": {"origin": "https://www.acme.example",
			"scope_rules": [{"path": "/", "scopes": ["orders"]}]}}`, "web.scope_rules[0].scopes[0]"},
		{"scope rules repeating a path", webRules(`{"path": "/orders", "scopes": ["orders"]}, {"path": "/orders", "scopes": ["returns"]}`),
			"web.scope_rules[1]"},
		{"scope rules repeating a path and method", webRules(`{"path": "/orders", "methods": ["GET", "POST"], "scopes": ["orders"]},
			{"path": "/orders", "methods": ["POST"], "scopes": ["returns"]}`), "web.scope_rules[1]"},
		{"scope rules repeating an escaped path", webRules(`{"path": "/orders", "scopes": ["orders"]}, {"path": "/%6Frders", "scopes": ["returns"]}`),
			"web.scope_rules[1]"},

		// extensions (spec 3.3)
		{"plain extension name unknown", `{"extensions": {"gift-wrap": {"version": "1"}}}`, "extensions.gift-wrap"},
		{"operations listed by hand", `{"extensions": {"operations": {"version": "3", "endpoint": "https://acme.example/ops"}}}`, "extensions.operations"},
		{"mediated sign-in without issuer", `{"auth": {"issuer": false}, "extensions": {"mediated-sign-in": {"version": "1"}}}`, "extensions.mediated-sign-in"},
		{"mediated sign-in with sign-in disabled", `{"auth": {"disabled": true}, "extensions": {"mediated-sign-in": {"version": "1"}}}`, "extensions.mediated-sign-in"},
		{"extension prefix uppercase", `{"extensions": {"Acme.example/x": {"version": "1"}}}`, "extensions.Acme.example/x"},
		{"extension prefix not a domain", `{"extensions": {"acme/x": {"version": "1"}}}`, "extensions.acme/x"},
		{"extension without path", `{"extensions": {"acme.example/": {"version": "1"}}}`, "extensions.acme.example/"},
		{"extension path with space", `{"extensions": {"acme.example/gift wrap": {"version": "1"}}}`, "extensions.acme.example/gift wrap"},
		{"extension version missing", ext(`{"endpoint": "https://acme.example/x"}`), "extensions.acme.example/gift-wrap.version"},
		{"extension version a number", ext(`{"version": 1}`), "extensions.acme.example/gift-wrap.version"},
		{"extension version not digits", ext(`{"version": "v1"}`), "extensions.acme.example/gift-wrap.version"},
		{"extension version dotted", ext(`{"version": "1.2"}`), "extensions.acme.example/gift-wrap.version"},
		{"extension version empty", ext(`{"version": ""}`), "extensions.acme.example/gift-wrap.version"},
		{"extension entry null", raw(`"extensions": {"acme.example/gift-wrap": null}`), "extensions.acme.example/gift-wrap.version"},
		{"extension endpoint http", ext(`{"version": "1", "endpoint": "http://acme.example/x"}`), "extensions.acme.example/gift-wrap.endpoint"},
		{"extension nested url http", ext(`{"version": "1", "links": [{"href": "https://acme.example/a"}, {"href": "http://acme.example/b"}]}`), "extensions.acme.example/gift-wrap.links[1].href"},
		{"extension nested url in object", ext(`{"version": "1", "a": {"b": {"c": "ftp://acme.example/c"}}}`), "extensions.acme.example/gift-wrap.a.b.c"},
		{"extension url with fragment", ext(`{"version": "1", "endpoint": "https://acme.example/x#y"}`), "extensions.acme.example/gift-wrap.endpoint"},

		// skill index (spec 9.4)
		{"skill schema older", `{"skill_index": {"$schema": "https://schemas.agentskills.io/discovery/0.1.0/schema.json", "skills": []}}`, "skill_index.$schema"},
		{"skill schema missing", `{"skill_index": {"skills": []}}`, "skill_index.$schema"},
		{"skill name missing", skills(skill(`{"name": null}`)), "skill_index.skills[0].name"},
		{"skill name uppercase", skills(skill(`{"name": "Manage"}`)), "skill_index.skills[0].name"},
		{"skill name double hyphen", skills(skill(`{"name": "a--b"}`)), "skill_index.skills[0].name"},
		{"skill name leading hyphen", skills(skill(`{"name": "-a"}`)), "skill_index.skills[0].name"},
		{"skill name underscore", skills(skill(`{"name": "a_b"}`)), "skill_index.skills[0].name"},
		{"skill name of 65 characters", skills(skill(`{"name": "` + strings.Repeat("a", 65) + `"}`)), "skill_index.skills[0].name"},
		{"skill names listed twice", skills(skill(`{"name": "a"}`), skill(`{"name": "b"}`), skill(`{"name": "a"}`)), "skill_index.skills[2].name"},
		{"skill description missing", skills(skill(`{"description": null}`)), "skill_index.skills[0].description"},
		{"skill type unknown", skills(skill(`{"type": "zip"}`)), "skill_index.skills[0].type"},
		{"skill type missing", skills(skill(`{"type": null}`)), "skill_index.skills[0].type"},
		{"skill url missing", skills(skill(`{"url": null}`)), "skill_index.skills[0].url"},
		{"skill url http", skills(skill(`{"url": "http://cdn.acme.example/SKILL.md"}`)), "skill_index.skills[0].url"},
		{"skill url scheme-relative", skills(skill(`{"url": "//cdn.acme.example/SKILL.md"}`)), "skill_index.skills[0].url"},
		{"skill url other scheme", skills(skill(`{"url": "javascript:alert(1)"}`)), "skill_index.skills[0].url"},
		{"skill url with fragment", skills(skill(`{"url": "s/SKILL.md#top"}`)), "skill_index.skills[0].url"},
		{"skill digest prefix uppercase", skills(skill(`{"digest": "` + strings.ToUpper(digestA[:7]) + digestA[7:] + `"}`)), "skill_index.skills[0].digest"},
		{"skill digest uppercase hex", skills(skill(`{"digest": "sha256:` + strings.ToUpper(digestA[7:]) + `"}`)), "skill_index.skills[0].digest"},
		{"skill digest short", skills(skill(`{"digest": "` + digestA[:len(digestA)-1] + `"}`)), "skill_index.skills[0].digest"},
		{"skill digest long", skills(skill(`{"digest": "` + digestA + `0"}`)), "skill_index.skills[0].digest"},
		{"skill digest other algorithm", skills(skill(`{"digest": "sha512:` + digestA[7:] + `"}`)), "skill_index.skills[0].digest"},
		{"skill digest missing", skills(skill(`{"digest": null}`)), "skill_index.skills[0].digest"},

		// Limits on list sizes (200 items) and nesting, so published
		// documents stay small.
		{"201 domains", `{"domains": [` + many(201, func(i int) string { return fmt.Sprintf(`"d%d.acme.example"`, i) }) + `]}`, "domains"},
		{"201 scopes", `{"auth": {"scopes": {` + many(201, func(i int) string { return fmt.Sprintf(`"s%d": "S"`, i) }) + `}}}`, "auth.scopes"},
		{"201 scope hints", `{"auth": {"scope_hints": {` +
			many(201, func(i int) string { return fmt.Sprintf(`"s%d": {"changes": "none", "personal_data": true}`, i) }) + `}}}`, "auth.scope_hints"},
		{"201 apis", `{"apis": [` + many(201, func(i int) string { return fmt.Sprintf(`{"type": "mcp", "url": "https://acme.example/%d"}`, i) }) + `]}`, "apis"},
		{"201 excluded tasks", `{"excluded_tasks": [` + many(201, func(i int) string { return fmt.Sprintf(`{"task": "T%d"}`, i) }) + `]}`, "excluded_tasks"},
		{"201 extensions", `{"extensions": {` + many(201, func(i int) string { return fmt.Sprintf(`"acme.example/e%d": {"version": "1"}`, i) }) + `}}`, "extensions"},
		{"201 skills", skills(many(201, func(i int) string { return skill(fmt.Sprintf(`{"name": "s%d"}`, i)) })), "skill_index.skills"},
		{"extension nested too deeply", ext(`{"version": "1", "x": ` + deep + `}`), "extensions.acme.example/gift-wrap.x" + strings.Repeat(".a", 9)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slug, domain := fmt.Sprintf("row%d", i), fmt.Sprintf("row%d.example", i)
			patch := strings.NewReplacer("{slug}", slug, "{domain}", domain).Replace(tt.patch)
			body, isRaw := strings.CutPrefix(patch, rawMark)
			if !isRaw {
				body = merge(t, minimalBody(slug, domain), patch)
			}
			slug, settings, err := tenant.DecodeCompany([]byte(body))
			if err == nil {
				err = tenant.Validate(slug, &settings, publicHost, true)
			}
			requireInvalidError(t, err, tt.field)
		})
	}
}
