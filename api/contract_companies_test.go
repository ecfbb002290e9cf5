package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contractCompanies creates acme, minimal and corner through the admin
// API, publishes their documents and gives them accounts and API keys. It
// returns acme as created, which the gateway area compares with.
func contractCompanies(t *testing.T, c *contract, f *fixture) (acme map[string]any) {
	env, issuer := f.env, f.issuer

	t.Run("create companies", func(t *testing.T) {
		r := c.do(t, call{method: post, path: "/admin/v1/companies", body: fullCompany(), token: admin, want: 201})
		assert.Equal(t, "/admin/v1/companies/acme", r.Header.Get("Location"))
		acme = r.JSON(t)
		assert.Equal(t, issuer, acme["identifier"])
		assert.Equal(t, issuer, acme["issuer"])
		// Every setting comes back as it was sent.
		for k, v := range fullCompany() {
			want, _ := json.Marshal(v)
			got, _ := json.Marshal(acme[k])
			assert.JSONEq(t, string(want), string(got), k)
		}

		// Defaults: an issuer with both sign-in types (grant_types left
		// out), conversations and feedback on, every Personal Agent
		// accepted, 30-day Sessions and the default rate limits.
		r = c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"minimal","organization":{"name":"Minimal","domain":"minimal.example"}}`})
		m := r.JSON(t)
		assert.Equal(t, env.PublicURL("/t/minimal"), m["identifier"])
		assert.Equal(t, map[string]any{"issuer": true, "disabled": false,
			"scopes": map[string]any{}, "scope_hints": map[string]any{}, "other_authorization_servers": []any{},
			"token_lifetimes": map[string]any{"access_seconds": float64(0), "refresh_seconds": float64(0)}}, m["auth"])
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "handoff_timeout_seconds": float64(0),
			"idle_close_seconds": float64(0), "retention_days": float64(0)}, m["conversations"])
		assert.Equal(t, map[string]any{"enabled": true, "alternatives": []any{}}, m["feedback"])
		assert.Equal(t, map[string]any{"accept": "all", "client_ids": []any{}, "sign_in_refused": map[string]any{}, "require_signature": false}, m["agents"])
		assert.Equal(t, map[string]any{"idle_timeout_seconds": float64(2592000)}, m["sessions"])
		assert.Equal(t, map[string]any{"per_agent": float64(6000), "per_session": float64(600), "per_address": float64(1200)}, m["rate_limits"])
		assert.Equal(t, map[string]any{"signed_out": false}, m["mcp"])
		assert.Equal(t, map[string]any{"enabled": false, "web": false}, m["operations"])
		assert.NotContains(t, m, "skill_index")

		// Without an issuer the Company is identified by its domain.
		r = c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"corner","organization":{"name":"Corner Shop","domain":"corner.example"},
				"auth":{"issuer":false},"feedback":{"enabled":false}}`})
		m = r.JSON(t)
		assert.Equal(t, "https://corner.example", m["identifier"])
		assert.NotContains(t, m, "issuer")
		assert.NotContains(t, m["auth"], "grant_types", "no sign-in types without an issuer")

		// A skill index without skills is stored with an empty list.
		r = c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"skills","organization":{"name":"Skills","domain":"skills.example"},
				"skill_index":{"$schema":"https://schemas.agentskills.io/discovery/0.2.0/schema.json"}}`})
		assert.Equal(t, []any{}, r.JSON(t)["skill_index"].(map[string]any)["skills"])
		c.do(t, call{method: del, path: "/admin/v1/companies/skills", token: admin, want: 204})
	})

	t.Run("create company errors", func(t *testing.T) {
		path := "/admin/v1/companies"
		ok := `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"}}`

		r := c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},"colour":"red"}`})
		assert.Equal(t, []any{map[string]any{"field": "colour", "message": "unknown field"}}, r.JSON(t)["fields"])
		r = c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
			body: `{"slug":"Not A Slug","organization":{"name":"Fresh","domain":"fresh.example"}}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"slug":`})
		r = c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},"domains":"x.example"}`})
		assert.Equal(t, "domains", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// Rules the schema cannot state: extra domains need an issuer.
		r = c.do(t, call{method: post, path: path, token: admin, want: 400,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},
				"domains":["fresh2.example"],"auth":{"issuer":false}}`})
		assert.Equal(t, "domains", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// ... nor that a feedback task is listed once, ignoring case.
		r = c.do(t, call{method: post, path: path, token: admin, want: 400,
			body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},"feedback":{"alternatives":[
				{"task":"Pay with a gift card","alternative":{"instructions":"A"}},{"task":"pay with a GIFT card ","alternative":{"instructions":"B"}}]}}`})
		assert.Equal(t, "feedback.alternatives[1].task", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// The new settings' limits are in the schema too.
		for _, bad := range []string{
			`"sessions":{"idle_timeout_seconds":59}`,
			`"sessions":{"idle_timeout_seconds":31622401}`,
			`"rate_limits":{"per_agent":0}`,
			`"rate_limits":{"per_address":1000001}`,
			`"agents":{"accept":"some"}`,
			`"agents":{"client_ids":["http://agent.example/agent.json"]}`,
			`"feedback":{"alternatives":[{"task":"T"}]}`,
			`"auth":{"other_authorization_servers":["https://a.example","https://a.example"]}`,
			`"auth":{"token_lifetimes":{"access_seconds":59}}`,
			`"auth":{"token_lifetimes":{"access_seconds":86401}}`,
			`"auth":{"token_lifetimes":{"refresh_seconds":3599}}`,
			`"auth":{"token_lifetimes":{"refresh_seconds":31536001}}`,
			`"agents":{"sign_in_refused":{"http://agent.example/agent.json":[]}}`,
			`"agents":{"sign_in_refused":{"https://agent.example/agent.json":["password"]}}`,
			`"mcp":{"signed_out":"yes"}`,
			`"mcp":{"description":"` + strings.Repeat("d", 1001) + `"}`,
		} {
			c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true,
				body: `{"slug":"fresh","organization":{"name":"Fresh","domain":"fresh.example"},` + bad + `}`})
		}

		r = c.do(t, call{method: post, path: path, token: admin, want: 409,
			body: `{"slug":"acme","organization":{"name":"Other","domain":"other.example"}}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		r = c.do(t, call{method: post, path: path, token: admin, want: 409,
			body: `{"slug":"copycat","organization":{"name":"Copycat","domain":"acme.example.co.uk"}}`})
		assert.Contains(t, r.JSON(t)["error_description"], "acme.example.co.uk")
		assert.Equal(t, "organization.domain", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])

		c.do(t, call{method: post, path: path, token: admin, want: 413, body: padded(t, fullCompany(), 256<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, body: ok, ctype: "text/plain"})

		r = c.do(t, call{method: post, path: path, want: 401, docRejects: true, body: ok})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: path, token: bogus, want: 401, body: ok})

		// Nothing was created.
		c.do(t, call{method: get, path: path + "/fresh", token: admin, want: 404})
		c.do(t, call{method: get, path: path + "/copycat", token: admin, want: 404})
	})

	t.Run("list companies", func(t *testing.T) {
		path := "/admin/v1/companies"
		type list struct {
			Companies []map[string]any `json:"companies"`
			Next      string           `json:"next"`
		}
		slugs := func(l list) (out []string) {
			for _, c := range l.Companies {
				out = append(out, c["slug"].(string))
			}
			return out
		}
		l := decode[list](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		assert.Equal(t, []string{"acme", "corner", "minimal"}, slugs(l))
		assert.Empty(t, l.Next)
		l = decode[list](t, c.do(t, call{method: get, path: path + "?limit=2", token: admin, want: 200}))
		assert.Equal(t, []string{"acme", "corner"}, slugs(l))
		assert.Equal(t, "corner", l.Next)
		l = decode[list](t, c.do(t, call{method: get, path: path + "?limit=2&after=corner", token: admin, want: 200}))
		assert.Equal(t, []string{"minimal"}, slugs(l))
		assert.Empty(t, l.Next)

		for _, q := range []string{"0", "501", "ten"} {
			r := c.do(t, call{method: get, path: path + "?limit=" + q, token: admin, want: 400, docRejects: true})
			assert.Equal(t, "limit", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		}
		c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		c.do(t, call{method: get, path: path, token: bogus, want: 401})
	})

	t.Run("get company", func(t *testing.T) {
		r := c.do(t, call{method: get, path: "/admin/v1/companies/acme", token: admin, want: 200})
		assert.Equal(t, acme, r.JSON(t))
		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/Not_A_Slug", token: admin, want: 404, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/companies/acme", want: 401, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/companies/acme", token: bogus, want: 401})
	})

	t.Run("discovery", func(t *testing.T) {
		// poppy.json names the domain that served it.
		for _, domain := range []string{"acme.example", "acme.example.co.uk"} {
			r := c.do(t, call{method: get, host: domain, path: "/.well-known/poppy.json", want: 200})
			assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
			doc := r.JSON(t)
			assert.Equal(t, "0.3", doc["protocol_version"])
			assert.Equal(t, map[string]any{"name": "Acme Outfitters", "domain": domain,
				"logo_uri": "https://cdn.acme.example/logo.png"}, doc["organization"])
			auth := doc["auth"].(map[string]any)
			assert.Equal(t, issuer, auth["issuer"], "several authorization servers: poppy.json names the issuer")
			assert.Len(t, auth["scopes"], 2)
			assert.Equal(t, map[string]any{"protocols": []any{map[string]any{"type": "poppy",
				"endpoint": issuer + "/poppy/conversations", "access": "signed_in"}}}, doc["agent"])
			// On the port poppy.json was fetched at (the test's, not 443).
			assert.Equal(t, map[string]any{"browser_session_endpoint": c.env.URL(domain, "/poppy/browser-session")}, doc["web"])
			assert.Equal(t, map[string]any{"endpoint": issuer + "/poppy/feedback"}, doc["feedback"])
			assert.Equal(t, map[string]any{"url": issuer + "/poppy/excluded-tasks.json"}, doc["excluded_tasks"])
			assert.Equal(t, acme["apis"], doc["apis"])
			assert.Equal(t, acme["extensions"], doc["extensions"])
			assert.Equal(t, acme["skill_index"], doc["skill_index"])

			r = c.do(t, call{method: get, host: domain, path: "/.well-known/oauth-protected-resource", want: 200})
			assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
			assert.Equal(t, map[string]any{"resource": "https://" + domain,
				"authorization_servers":    []any{issuer, "https://staff-auth.acme.example"},
				"bearer_methods_supported": []any{"header"}}, r.JSON(t))
		}

		// Without an issuer: no auth member, and 404 for the protected
		// resource metadata (spec 3.2).
		r := c.do(t, call{method: get, host: "corner.example", path: "/.well-known/poppy.json", want: 200})
		doc := r.JSON(t)
		assert.NotContains(t, doc, "auth")
		assert.NotContains(t, doc, "feedback")
		assert.NotContains(t, doc, "excluded_tasks")
		assert.Equal(t, env.PublicURL("/t/corner/poppy/conversations"),
			doc["agent"].(map[string]any)["protocols"].([]any)[0].(map[string]any)["endpoint"])
		c.do(t, call{method: get, host: "corner.example", path: "/.well-known/oauth-protected-resource", want: 404})

		// A host that is no Company's domain.
		c.do(t, call{method: get, host: "unknown.example", path: "/.well-known/poppy.json", want: 404})
		c.do(t, call{method: get, host: "unknown.example", path: "/.well-known/oauth-protected-resource", want: 404})

		// The issuer's metadata.
		r = c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/acme", want: 200})
		assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
		as := r.JSON(t)
		assert.Equal(t, issuer, as["issuer"])
		assert.Equal(t, issuer+"/oauth/authorize", as["authorization_endpoint"])
		assert.Equal(t, issuer+"/oauth/token", as["token_endpoint"])
		assert.Equal(t, issuer+"/oauth/revoke", as["revocation_endpoint"])
		assert.Equal(t, issuer+"/oauth/device_authorization", as["device_authorization_endpoint"])
		assert.Equal(t, issuer+"/oauth/jwks.json", as["jwks_uri"])
		assert.Equal(t, issuer+"/oauth/introspect", as["introspection_endpoint"])
		assert.Equal(t, []any{"refresh_token", "authorization_code", "urn:ietf:params:oauth:grant-type:device_code"}, as["grant_types_supported"])
		assert.Equal(t, []any{"orders:read", "orders:write"}, as["scopes_supported"])
		assert.Equal(t, []any{"https://acme.example", "https://acme.example.co.uk"}, as["protected_resources"])
		c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/corner", want: 404})
		c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/nosuch", want: 404})

		// Excluded tasks.
		r = c.do(t, call{method: get, path: "/t/acme/poppy/excluded-tasks.json", want: 200})
		assert.Equal(t, "public, max-age=60", r.Header.Get("Cache-Control"))
		assert.Equal(t, map[string]any{"tasks": acme["excluded_tasks"]}, r.JSON(t))
		c.do(t, call{method: get, path: "/t/minimal/poppy/excluded-tasks.json", want: 404})
		c.do(t, call{method: get, path: "/t/nosuch/poppy/excluded-tasks.json", want: 404})
	})

	t.Run("update company", func(t *testing.T) {
		path := "/admin/v1/companies/minimal"
		r := c.do(t, call{method: patch, path: path, token: admin, want: 200, ctype: "application/merge-patch+json",
			body: `{"organization":{"name":"Minimal Ltd"},"auth":{"disabled":true,"scopes":{"orders:read":"See your orders"}},
				"excluded_tasks":[{"task":"Close an account"}],"conversations":{"enabled":false}}`})
		m := r.JSON(t)
		assert.Equal(t, map[string]any{"name": "Minimal Ltd", "domain": "minimal.example"}, m["organization"])
		assert.Equal(t, true, m["auth"].(map[string]any)["disabled"])
		assert.Equal(t, m["created_at"], c.do(t, call{method: get, path: path, token: admin, want: 200}).JSON(t)["created_at"])

		// Sign-in off: the metadata offers only refresh, poppy.json says so.
		as := c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/minimal", want: 200}).JSON(t)
		assert.Equal(t, []any{"refresh_token"}, as["grant_types_supported"])
		assert.Equal(t, []any{"none"}, as["response_types_supported"], "RFC 8414 section 2: REQUIRED, and never empty")
		assert.NotContains(t, as, "authorization_endpoint")
		assert.NotContains(t, as, "device_authorization_endpoint")
		doc := c.do(t, call{method: get, host: "minimal.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, map[string]any{"disabled": true, "scopes": map[string]any{"orders:read": "See your orders"}}, doc["auth"])
		assert.NotContains(t, doc, "agent")
		c.do(t, call{method: get, path: "/t/minimal/poppy/excluded-tasks.json", want: 200})

		// Plain JSON works too, and null resets a setting to its default.
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200,
			body: `{"auth":{"disabled":null,"scopes":{"orders:read":null}},"conversations":null,"slug":"minimal"}`})
		m = r.JSON(t)
		assert.Equal(t, false, m["auth"].(map[string]any)["disabled"])
		assert.Equal(t, map[string]any{}, m["auth"].(map[string]any)["scopes"])
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "handoff_timeout_seconds": float64(0),
			"idle_close_seconds": float64(0), "retention_days": float64(0)}, m["conversations"])

		// The new settings, changed and reset.
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200,
			body: `{"agents":{"accept":"listed","client_ids":["https://agent.example/agent.json"]},"sessions":{"idle_timeout_seconds":3600},
				"rate_limits":{"per_session":60},"feedback":{"alternatives":[{"task":"Close an account","alternative":{"instructions":"Call us."}}]},
				"conversations":{"agent_webhook":"https://agent.minimal.example/poppy","retention_days":7}}`})
		m = r.JSON(t)
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "agent_webhook": "https://agent.minimal.example/poppy",
			"handoff_timeout_seconds": float64(0), "idle_close_seconds": float64(0), "retention_days": float64(7)}, m["conversations"])
		assert.Equal(t, map[string]any{"accept": "listed", "client_ids": []any{"https://agent.example/agent.json"},
			"sign_in_refused": map[string]any{}, "require_signature": false}, m["agents"])
		assert.Equal(t, map[string]any{"idle_timeout_seconds": float64(3600)}, m["sessions"])
		assert.Equal(t, map[string]any{"per_agent": float64(6000), "per_session": float64(60), "per_address": float64(1200)}, m["rate_limits"])
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200,
			body: `{"agents":null,"sessions":null,"rate_limits":{"per_session":null},"feedback":{"alternatives":null},
				"conversations":{"agent_webhook":null,"retention_days":null}}`})
		m = r.JSON(t)
		assert.Equal(t, map[string]any{"enabled": true, "access": "session", "handoff_timeout_seconds": float64(0),
			"idle_close_seconds": float64(0), "retention_days": float64(0)}, m["conversations"])
		assert.Equal(t, map[string]any{"accept": "all", "client_ids": []any{}, "sign_in_refused": map[string]any{}, "require_signature": false}, m["agents"])
		assert.Equal(t, map[string]any{"per_agent": float64(6000), "per_session": float64(600), "per_address": float64(1200)}, m["rate_limits"])
		assert.Equal(t, map[string]any{"enabled": true, "alternatives": []any{}}, m["feedback"])
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"sessions":{"idle_timeout_seconds":10}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"rate_limits":{"per_agent":-1}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true,
			body: `{"conversations":{"agent_webhook":"http://agent.minimal.example/poppy"}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"conversations":{"retention_days":3651}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"auth":{"token_lifetimes":{"access_seconds":30}}}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true,
			body: `{"agents":{"sign_in_refused":{"https://agent.example/agent.json":["refresh_token"]}}}`})

		r = c.do(t, call{method: patch, path: path, token: admin, want: 400, body: `{"slug":"renamed"}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `[]`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true, body: `{"colour":"red"}`})
		c.do(t, call{method: patch, path: path, token: admin, want: 400, docRejects: true,
			body: `{"conversations":{"access":"always"}}`})
		// A domain of another Company.
		r = c.do(t, call{method: patch, path: path, token: admin, want: 409, body: `{"domains":["minimal.example.org","acme.example.co.uk"]}`})
		assert.Equal(t, "domains[1]", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: patch, path: path, token: admin, want: 413, body: padded(t, map[string]any{}, 256<<10)})
		c.do(t, call{method: patch, path: path, token: admin, want: 415, docRejects: true, body: `{}`, ctype: "text/plain"})
		c.do(t, call{method: patch, path: "/admin/v1/companies/nosuch", token: admin, want: 404, body: `{}`})
		// If-Match: the ETag of the version read, or 412.
		tag := c.do(t, call{method: get, path: path, token: admin, want: 200}).Header.Get("ETag")
		require.NotEmpty(t, tag)
		r = c.do(t, call{method: patch, path: path, token: admin, want: 200, body: `{"organization":{"name":"Minimal"}}`,
			header: map[string]string{"If-Match": tag}})
		assert.Equal(t, r.Header.Get("ETag"), c.do(t, call{method: get, path: path, token: admin, want: 200}).Header.Get("ETag"))
		c.do(t, call{method: patch, path: path, token: admin, want: 412, body: `{"organization":{"name":"Minimal Two"}}`,
			header: map[string]string{"If-Match": tag}})
		c.do(t, call{method: patch, path: path, token: admin, want: 412, body: `{}`, header: map[string]string{"If-Match": "W/" + tag}})
		c.do(t, call{method: patch, path: path, want: 401, docRejects: true, body: `{}`})
		c.do(t, call{method: patch, path: path, token: bogus, want: 401, body: `{}`})
	})

	t.Run("accounts", func(t *testing.T) {
		path := "/admin/v1/companies/acme/accounts"
		r := c.do(t, call{method: post, path: path, token: admin, want: 201, body: `{"username":"alice","password":"correct horse"}`})
		a := r.JSON(t)
		assert.Equal(t, "alice", a["username"])
		assert.NotContains(t, string(r.Body), "correct horse")
		r = c.do(t, call{method: post, path: path, token: admin, want: 409, body: `{"username":"alice","password":"another one"}`})
		assert.Equal(t, []any{map[string]any{"field": "username", "message": "is taken"}}, r.JSON(t)["fields"])
		// The same username at another Company is another account.
		c.do(t, call{method: post, path: "/admin/v1/companies/minimal/accounts", token: admin, want: 201,
			body: `{"username":"alice","password":"correct horse"}`})

		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"username":"bob","password":"short"}`})
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"username":"bob","password":"long enough","admin":true}`})
		r = c.do(t, call{method: post, path: path, token: admin, want: 400, body: `{"username":"bob smith","password":"long enough"}`})
		assert.Equal(t, "username", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: post, path: path, token: admin, want: 413,
			body: padded(t, map[string]string{"username": "bob", "password": "long enough"}, 4<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, ctype: "text/plain",
			body: `{"username":"bob","password":"long enough"}`})
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/accounts", token: admin, want: 404,
			body: `{"username":"bob","password":"long enough"}`})
		c.do(t, call{method: post, path: path, want: 401, docRejects: true, body: `{"username":"bob","password":"long enough"}`})
		c.do(t, call{method: post, path: path, token: bogus, want: 401, body: `{"username":"bob","password":"long enough"}`})
	})

	t.Run("api keys and the company API", func(t *testing.T) {
		path := "/admin/v1/companies/acme/api-keys"
		type key struct {
			ID        int64   `json:"id"`
			Name      string  `json:"name"`
			Key       string  `json:"key"`
			RevokedAt *string `json:"revoked_at"`
		}
		backend := decode[key](t, c.do(t, call{method: post, path: path, token: admin, want: 201, body: `{"name":"backend"}`}))
		assert.Equal(t, "backend", backend.Name)
		unnamed := decode[key](t, c.do(t, call{method: post, path: path, token: admin, want: 201}))
		assert.Empty(t, unnamed.Name)

		list := decode[struct {
			APIKeys []key `json:"api_keys"`
		}](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		require.Len(t, list.APIKeys, 2)
		assert.Equal(t, unnamed.ID, list.APIKeys[0].ID, "newest first")
		assert.Empty(t, list.APIKeys[0].Key, "secrets are shown once")

		// The Company API answers with the key's Company.
		r := c.do(t, call{method: get, path: "/company/v1/company", token: backend.Key, want: 200})
		assert.Equal(t, "acme", r.JSON(t)["slug"])
		r = c.do(t, call{method: get, path: "/company/v1/company", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: "/company/v1/company", token: "phk_" + strings.Repeat("A", 43), want: 401})
		c.do(t, call{method: get, path: "/company/v1/company", token: admin, want: 401})

		// Revoking: at once, twice is fine, and only through its Company.
		c.do(t, call{method: del, path: fmt.Sprintf("/admin/v1/companies/minimal/api-keys/%d", backend.ID), token: admin, want: 404})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, backend.ID), token: admin, want: 204})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, backend.ID), token: admin, want: 204})
		c.do(t, call{method: get, path: "/company/v1/company", token: backend.Key, want: 401})
		c.do(t, call{method: get, path: "/company/v1/company", token: unnamed.Key, want: 200})
		list = decode[struct {
			APIKeys []key `json:"api_keys"`
		}](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		assert.NotNil(t, list.APIKeys[1].RevokedAt)
		assert.Nil(t, list.APIKeys[0].RevokedAt)
		c.do(t, call{method: del, path: path + "/999999", token: admin, want: 404})
		c.do(t, call{method: del, path: path + "/abc", token: admin, want: 404, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", want: 401, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", token: bogus, want: 401})

		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: map[string]string{"name": strings.Repeat("n", 201)}})
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"name":7}`})
		c.do(t, call{method: post, path: path, token: admin, want: 413, body: padded(t, map[string]string{"name": "x"}, 4<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, body: `{}`, ctype: "text/plain"})
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/api-keys", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/api-keys", token: admin, want: 404})
		c.do(t, call{method: post, path: path, want: 401, docRejects: true})
		c.do(t, call{method: post, path: path, token: bogus, want: 401})
		c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		c.do(t, call{method: get, path: path, token: bogus, want: 401})
	})

	return acme
}

// contractDeleteCompany deletes corner.
func contractDeleteCompany(t *testing.T, c *contract) {
	t.Run("delete company", func(t *testing.T) {
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", want: 401, docRejects: true})
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", token: bogus, want: 401})
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", token: admin, want: 204})
		c.do(t, call{method: del, path: "/admin/v1/companies/corner", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/corner", token: admin, want: 404})
		c.do(t, call{method: get, host: "corner.example", path: "/.well-known/poppy.json", want: 404})

		// The slug is retired (spec 3.2: an issuer stands for one Company);
		// the domain is free.
		r := c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 409,
			body: `{"slug":"corner","organization":{"name":"Corner Shop","domain":"corner.example"}}`})
		assert.Equal(t, "slug", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201,
			body: `{"slug":"corner2","organization":{"name":"Corner Shop","domain":"corner.example"}}`})
	})
}

const skillDigest = "sha256:1b2a8cde934e632f7e14fa080a627ad7191e29d412d2b8a7aa07d9c9ab2f475e"

// fullCompany sets every setting a Company has.
func fullCompany() map[string]any {
	return map[string]any{
		"slug": "acme",
		"organization": map[string]any{
			"name": "Acme Outfitters", "domain": "acme.example", "logo_uri": "https://cdn.acme.example/logo.png",
		},
		"domains": []string{"acme.example.co.uk"},
		"auth": map[string]any{
			"issuer":      true,
			"disabled":    false,
			"grant_types": []string{"authorization_code", "urn:ietf:params:oauth:grant-type:device_code"},
			"scopes": map[string]string{
				"orders:read":  "See your orders",
				"orders:write": "Place, change and return orders",
			},
			"scope_hints": map[string]any{
				"orders:read":  map[string]any{"changes": "none", "personal_data": true},
				"orders:write": map[string]any{"changes": "reversible", "personal_data": true},
			},
			"other_authorization_servers": []string{"https://staff-auth.acme.example"},
			"token_lifetimes":             map[string]any{"access_seconds": 600, "refresh_seconds": 86400},
		},
		// No agent_webhook: acme's conversations wait idle for its staff
		// (the update test sets one).
		"conversations": map[string]any{"enabled": true, "access": "signed_in", "handoff_timeout_seconds": 600,
			"handoff_unavailable_message": "Nobody is free right now.", "idle_close_seconds": 86400, "retention_days": 30},
		"feedback": map[string]any{"enabled": true, "alternatives": []any{
			map[string]any{"task": "Pay with a gift card", "alternative": map[string]any{
				"instructions": "Gift cards are applied with the payment API.",
				"references": []any{
					map[string]any{"type": "openapi", "url": "https://api.acme.example/openapi.json", "operation_id": "applyGiftCard"},
				},
			}},
			map[string]any{"task": "Find my size", "alternative": map[string]any{
				"references": []any{map[string]any{"type": "mcp", "url": "https://mcp.acme.example/mcp"}},
			}},
		}},
		"agents": map[string]any{"accept": "unlisted", "client_ids": []string{"https://blocked.example/agent.json"},
			"sign_in_refused": map[string]any{"https://no-sign-in.example/agent.json": []string{}}, "require_signature": false},
		"sessions":    map[string]any{"idle_timeout_seconds": 86400},
		"rate_limits": map[string]any{"per_agent": 3000, "per_session": 300, "per_address": 900},
		"excluded_tasks": []any{
			map[string]any{
				"task": "Send a wire transfer",
				"alternative": map[string]any{
					"instructions": "Wire transfers are made in the Acme app.",
					"references": []any{
						map[string]any{"type": "web", "url": "https://acme.example/wire"},
						map[string]any{"type": "openapi", "url": "https://api.acme.example/openapi.json", "operation_id": "createTransfer"},
					},
				},
			},
			map[string]any{"task": "Close an account"},
		},
		"apis": []any{
			map[string]any{"type": "openapi", "url": "https://api.acme.example/openapi.json", "description": "Orders and returns"},
			map[string]any{"type": "mcp", "url": "https://mcp.acme.example/mcp"},
		},
		"mcp":        map[string]any{"signed_out": false, "description": "Order tools"},
		"operations": map[string]any{"enabled": false, "web": false},
		"web": map[string]any{"browser_join": true, "origin": "https://www.acme.example",
			"cookie_name": "acme_poppy", "cookie_domain": "acme.example", "landing_path": "/welcome",
			"scope_rules": []any{
				map[string]any{"path": "/orders", "scopes": []string{"orders:read"}},
				map[string]any{"path": "/orders", "methods": []string{"POST", "DELETE"}, "scopes": []string{"orders:read", "orders:write"}},
			}},
		"extensions": map[string]any{
			"acme.example/gift-wrap": map[string]any{"version": "1", "endpoint": "https://api.acme.example/poppy/gift-wrap"},
			"mediated-sign-in":       map[string]any{"version": "1"},
		},
		"skill_index": map[string]any{
			"$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
			"skills": []any{map[string]any{
				"name": "manage-orders", "description": "Manage the User's orders.", "type": "skill-md",
				"url": "skills/manage-orders/SKILL.md", "digest": skillDigest,
			}},
		},
	}
}
