package discovery_test

import (
	"encoding/json"
	"errors"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func goldenPath(name string) string {
	return filepath.Join("testdata", name+".golden.json")
}

func marshalSurface(t testing.TB, s surface) []byte {
	t.Helper()
	b, err := json.MarshalIndent(s, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// writeGolden replaces a golden file in one rename, so the tests running
// in parallel that read it never see it half written.
func writeGolden(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".golden-*")
	require.NoError(t, err)
	_, err = tmp.Write(b)
	require.NoError(t, errors.Join(err, tmp.Close()))
	require.NoError(t, os.Chmod(tmp.Name(), 0o644))
	require.NoError(t, os.Rename(tmp.Name(), path))
}

// readGolden returns the golden surface of a case.
func readGolden(t testing.TB, name string) surface {
	t.Helper()
	raw, err := os.ReadFile(goldenPath(name))
	require.NoError(t, err, "run go test ./internal/discovery -run TestGolden -update to create it")
	var s surface
	require.NoError(t, json.Unmarshal(raw, &s))
	return s
}

// TestGolden compares every document the builders make for each case with
// testdata/{case}.golden.json. Review a changed golden file against spec 3,
// 3.1, 3.2, 9.1 and 9.4 before committing it: the files are the assertion.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := marshalSurface(t, buildSurface(t, tc.company(t), goldenURLs))
			path := goldenPath(tc.name)
			if *update {
				writeGolden(t, path, got)
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./internal/discovery -run TestGolden -update to create it")
			require.Equal(t, string(want), string(got))
		})
	}
}

// TestGoldenFilesPassPersonalAgentChecks reads each golden file as a
// Personal Agent would and makes the checks of spec 3 and 3.2 on it, so a
// golden file rewritten with -update cannot quietly hold a document that
// breaks the spec.
func TestGoldenFilesPassPersonalAgentChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.company(t)
			checkSurface(t, c.Settings.AllDomains(), readGolden(t, tc.name))
		})
	}
}

// TestGoldenCases pins what sets each case apart, in words a reviewer can
// check against the brief without reading the whole golden file.
func TestGoldenCases(t *testing.T) {
	t.Parallel()
	load := func(t *testing.T, name string) (surface, map[string]map[string]any) {
		s := readGolden(t, name)
		return s, decodeDocs(t, s)
	}

	t.Run("minimal", func(t *testing.T) {
		t.Parallel()
		s, docs := load(t, "minimal")
		require.Equal(t, publicURL+"/t/minimal", s.Identifier)
		pj := docs["https://minimal.example"+poppyPath]
		require.Equal(t, map[string]any{
			"protocol_version": "0.3",
			"organization":     map[string]any{"name": "Minimal Shop", "domain": "minimal.example"},
			"agent": map[string]any{"protocols": []any{map[string]any{
				"type": "poppy", "endpoint": publicURL + "/t/minimal/poppy/conversations",
			}}},
			"feedback": map[string]any{"endpoint": publicURL + "/t/minimal/poppy/feedback"},
		}, pj, "one issuer and no scopes: auth is absent")
		require.Nil(t, docs[publicURL+"/t/minimal/poppy/excluded-tasks.json"])
		as := docs[publicURL+"/.well-known/oauth-authorization-server/t/minimal"]
		require.Equal(t, []any{"refresh_token", "authorization_code", tenant.GrantDeviceCode}, as["grant_types_supported"])
		require.NotContains(t, as, "scopes_supported", "no scopes: RFC 8414 §3.2 omits empty lists")
	})

	t.Run("full", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "full")
		pj := docs["https://example.com"+poppyPath]
		for _, k := range []string{"auth", "agent", "web", "feedback", "excluded_tasks", "apis", "extensions", "skill_index"} {
			require.Contains(t, pj, k)
		}
		auth := pj["auth"].(map[string]any)
		require.NotContains(t, auth, "issuer", "one authorization server: auth.issuer is optional and left out")
		require.Len(t, auth["scopes"], 3)
		require.Len(t, auth["scope_hints"], 3)
		require.Equal(t, "https://example.com/poppy/browser-session", pj["web"].(map[string]any)["browser_session_endpoint"])
		require.Equal(t, map[string]any{"url": publicURL + "/t/example/poppy/excluded-tasks.json"}, pj["excluded_tasks"])
		require.Equal(t, map[string]any{"example.com/gift-wrap": map[string]any{
			"version": "1", "endpoint": "https://api.example.com/poppy/gift-wrap",
		}}, pj["extensions"])
		require.Equal(t, tenant.SkillIndexSchema, pj["skill_index"].(map[string]any)["$schema"])
		tasks := arr(docs[publicURL+"/t/example/poppy/excluded-tasks.json"]["tasks"])
		require.Len(t, tasks, 3)
		require.Equal(t, map[string]any{"task": "Close an account"}, tasks[1], "a task without alternative has no alternative member")
		as := docs[publicURL+"/.well-known/oauth-authorization-server/t/example"]
		require.Equal(t, []any{"addresses", "orders:read", "orders:write"}, as["scopes_supported"])
	})

	t.Run("no-issuer", func(t *testing.T) {
		t.Parallel()
		s, docs := load(t, "no-issuer")
		require.Equal(t, "https://bakery.example", s.Identifier)
		pj := docs["https://bakery.example"+poppyPath]
		require.NotContains(t, pj, "auth")
		require.Contains(t, pj, "agent", "conversations need no issuer")
		require.Contains(t, pj, "web", "browser join needs no issuer")
		require.Nil(t, docs["https://bakery.example"+prmPath], "no issuer: the protected resource metadata answers 404")
		require.Nil(t, docs[publicURL+"/.well-known/oauth-authorization-server/t/bakery"])
		require.NotNil(t, docs[publicURL+"/t/bakery/poppy/excluded-tasks.json"])
	})

	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "disabled")
		pj := docs["https://portal.example"+poppyPath]
		require.Equal(t, map[string]any{"disabled": true}, pj["auth"])
		require.NotContains(t, pj, "feedback")
		as := docs[publicURL+"/.well-known/oauth-authorization-server/t/portal"]
		require.Equal(t, []any{"refresh_token"}, as["grant_types_supported"])
		require.NotContains(t, as, "authorization_endpoint")
		require.NotContains(t, as, "device_authorization_endpoint")
		require.NotContains(t, as, "code_challenge_methods_supported")
		// RFC 8414 §2: "response_types_supported REQUIRED"; §3.2:
		// "Claims with zero elements MUST be omitted". Without code, the
		// one registered response type that returns nothing.
		require.Equal(t, []any{"none"}, as["response_types_supported"], "REQUIRED even without an authorization endpoint")
		require.NotContains(t, as, "scopes_supported", "no scopes: RFC 8414 §3.2 omits empty lists")
		// Tokens issued before sign-in was turned off still verify and
		// introspect.
		require.Equal(t, publicURL+"/t/portal/oauth/jwks.json", as["jwks_uri"])
		require.Equal(t, publicURL+"/t/portal/oauth/introspect", as["introspection_endpoint"])
		require.NotNil(t, docs["https://portal.example"+prmPath], "the issuer stays: its identifier is still the issuer")
	})

	t.Run("multi-domain", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "multi-domain")
		domains := []string{"shop.example", "shop.example.co.uk", "de.shop.example"}
		for _, d := range domains {
			pj := docs["https://"+d+poppyPath]
			require.Equal(t, d, pj["organization"].(map[string]any)["domain"])
			require.Equal(t, "https://"+d+"/poppy/browser-session", pj["web"].(map[string]any)["browser_session_endpoint"])
			require.Equal(t, "https://"+d, docs["https://"+d+prmPath]["resource"])
		}
		as := docs[publicURL+"/.well-known/oauth-authorization-server/t/worldwide"]
		require.Equal(t, []any{"https://shop.example", "https://shop.example.co.uk", "https://de.shop.example"}, as["protected_resources"])
	})

	t.Run("other-authorization-servers", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "other-authorization-servers")
		issuer := publicURL + "/t/bank"
		require.Equal(t, []any{issuer, "https://staff-login.bank.example", "https://idp.partner.example/bank"},
			docs["https://bank.example"+prmPath]["authorization_servers"])
		require.Equal(t, issuer, docs["https://bank.example"+poppyPath]["auth"].(map[string]any)["issuer"])
	})

	t.Run("signed-in", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "signed-in")
		require.Equal(t, map[string]any{"protocols": []any{map[string]any{
			"type": "poppy", "endpoint": publicURL + "/t/club/poppy/conversations", "access": "signed_in",
		}}}, docs["https://club.example"+poppyPath]["agent"])
	})

	t.Run("authorization-code-only", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "authorization-code-only")
		require.NotContains(t, docs["https://direct.example"+poppyPath], "agent", "conversations off")
		as := docs[publicURL+"/.well-known/oauth-authorization-server/t/direct"]
		require.Equal(t, []any{"refresh_token", "authorization_code"}, as["grant_types_supported"])
		require.Equal(t, publicURL+"/t/direct/oauth/authorize", as["authorization_endpoint"])
		require.NotContains(t, as, "device_authorization_endpoint")
		require.Equal(t, []any{"code"}, as["response_types_supported"])
		require.Equal(t, []any{"S256"}, as["code_challenge_methods_supported"])
	})

	t.Run("device-code-only", func(t *testing.T) {
		t.Parallel()
		_, docs := load(t, "device-code-only")
		as := docs[publicURL+"/.well-known/oauth-authorization-server/t/tv"]
		require.Equal(t, []any{"refresh_token", tenant.GrantDeviceCode}, as["grant_types_supported"])
		require.Equal(t, publicURL+"/t/tv/oauth/device_authorization", as["device_authorization_endpoint"])
		require.NotContains(t, as, "authorization_endpoint")
		require.NotContains(t, as, "code_challenge_methods_supported")
		require.Equal(t, []any{"none"}, as["response_types_supported"], "RFC 8414 §2: REQUIRED")
	})
}

// TestBuildersLeaveTheCompanyUnchanged builds every document twice and
// checks the Company's settings are untouched: the builders share slices
// and maps with the stored settings.
func TestBuildersLeaveTheCompanyUnchanged(t *testing.T) {
	t.Parallel()
	for _, tc := range cases {
		c := tc.company(t)
		before, err := json.Marshal(c.Settings)
		require.NoError(t, err)
		first := marshalSurface(t, buildSurface(t, c, goldenURLs))
		second := marshalSurface(t, buildSurface(t, c, goldenURLs))
		after, err := json.Marshal(c.Settings)
		require.NoError(t, err)
		require.Equal(t, string(before), string(after), tc.name)
		require.Equal(t, string(first), string(second), tc.name)
	}
}

// TestPoppyJSONNamesTheRequestedDomain checks spec 3 check 1 on the
// builder: the document names the domain it is built for, whichever of the
// Company's domains that is.
func TestPoppyJSONNamesTheRequestedDomain(t *testing.T) {
	t.Parallel()
	c := cases[4].company(t) // multi-domain
	for _, d := range c.Settings.AllDomains() {
		doc := discovery.BuildPoppyJSON(c, d, goldenURLs)
		require.Equal(t, d, doc.Organization.Domain)
		require.Equal(t, "Worldwide Shop", doc.Organization.Name)
		require.Equal(t, discovery.ProtocolVersion, doc.ProtocolVersion)
	}
}

// decodeDocs decodes each document of s; a 404 decodes to nil.
func decodeDocs(t testing.TB, s surface) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for u, raw := range s.Documents {
		var m map[string]any
		if raw != nil && string(raw) != "null" {
			require.NoError(t, json.Unmarshal(raw, &m), u)
		}
		out[u] = m
	}
	return out
}

// asMetadataURL is where RFC 8414 §3.1 puts the metadata of issuer: the
// well-known path goes between the host and the issuer's path.
func asMetadataURL(t testing.TB, issuer string) string {
	t.Helper()
	u, err := url.Parse(issuer)
	require.NoError(t, err)
	u.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	return u.String()
}

func strs(t testing.TB, v any) []string {
	t.Helper()
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	require.True(t, ok, "%v is not an array", v)
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		require.True(t, ok, "%v is not a string", e)
		out = append(out, s)
	}
	return out
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// checkSurface makes the checks a Personal Agent makes before it uses a
// Company's poppy.json (spec 3, 3.2), for each of its domains, plus the
// HTTPS rule for every URL in every document.
func checkSurface(t testing.TB, domains []string, s surface) {
	t.Helper()
	docs := decodeDocs(t, s)
	for u, doc := range docs {
		requireHTTPSURL(t, u, u)
		requireAllHTTPS(t, u, doc)
		if strings.Contains(u, "/.well-known/oauth-") {
			requireNoEmptyList(t, u, doc)
		}
	}
	for _, d := range domains {
		pj := docs["https://"+d+poppyPath]
		require.NotNil(t, pj, "poppy.json of %s", d)
		require.Equal(t, "0.3", pj["protocol_version"])
		org := obj(pj["organization"])
		require.Equal(t, d, org["domain"], "check 1: organization.domain is the host that served it")
		require.NotEmpty(t, org["name"])
		auth := obj(pj["auth"])

		prm, served := docs["https://"+d+prmPath]
		require.True(t, served, "the surface lists the protected resource metadata of %s", d)
		if prm == nil {
			// 404: no issuer, which is valid only without auth.issuer and
			// without sign-in (spec 3.2).
			require.Nil(t, auth, "no issuer: poppy.json has no auth")
			require.Equal(t, "https://"+d, s.Identifier)
			for _, p := range arr(obj(pj["agent"])["protocols"]) {
				require.NotEqual(t, "signed_in", obj(p)["access"])
			}
			for u, doc := range docs {
				if strings.Contains(u, "/.well-known/oauth-authorization-server") {
					require.Nil(t, doc, "no issuer: no authorization server metadata")
				}
			}
		} else {
			require.Equal(t, "https://"+d, prm["resource"], "resource is exactly https://{domain}")
			servers := strs(t, prm["authorization_servers"])
			require.NotEmpty(t, servers)
			require.Equal(t, []string{"header"}, strs(t, prm["bearer_methods_supported"]))
			issuer := servers[0]
			if len(servers) > 1 {
				require.Contains(t, auth, "issuer", "several authorization servers: auth.issuer is required")
			}
			if iss, ok := auth["issuer"]; ok {
				require.Contains(t, servers, iss)
				issuer = iss.(string)
			}
			require.Equal(t, issuer, s.Identifier, "the identifier is the issuer")

			as := docs[asMetadataURL(t, issuer)]
			require.NotNil(t, as, "the issuer publishes RFC 8414 metadata at its §3.1 URL")
			require.Equal(t, issuer, as["issuer"], "check: issuer matches character for character")
			resources := strs(t, as["protected_resources"])
			require.Contains(t, resources, "https://"+d, "check 2: protected_resources lists https://{domain}")
			for _, r := range resources {
				u, err := url.Parse(r)
				require.NoError(t, err)
				require.Empty(t, u.Port(), r)
				require.Empty(t, u.Path, r)
				require.False(t, strings.HasSuffix(r, "/"), r)
			}
			require.Equal(t, issuer+"/oauth/token", as["token_endpoint"])
			require.Equal(t, issuer+"/oauth/revoke", as["revocation_endpoint"])
			require.Equal(t, issuer+"/oauth/jwks.json", as["jwks_uri"], "the keys that sign access tokens")
			require.Equal(t, issuer+"/oauth/introspect", as["introspection_endpoint"])
			grants := strs(t, as["grant_types_supported"])
			require.Equal(t, "refresh_token", grants[0], "grant_types_supported MUST include refresh_token")
			if auth["disabled"] == true {
				require.Equal(t, []string{"refresh_token"}, grants, "auth.disabled: no sign-in grant")
			}
			require.Equal(t, slices.Contains(grants, tenant.GrantAuthorizationCode), as["authorization_endpoint"] != nil,
				"authorization_endpoint iff authorization_code")
			require.Equal(t, slices.Contains(grants, tenant.GrantDeviceCode), as["device_authorization_endpoint"] != nil,
				"device_authorization_endpoint iff the device_code grant")
			scopes := strs(t, as["scopes_supported"])
			require.True(t, sort.StringsAreSorted(scopes))
			for name := range obj(auth["scopes"]) {
				require.Contains(t, scopes, name, "scopes_supported lists every described scope")
			}
			require.Equal(t, []string{"private_key_jwt"}, strs(t, as["token_endpoint_auth_methods_supported"]))
			require.Equal(t, []string{"ES256", "PS384"}, strs(t, as["token_endpoint_auth_signing_alg_values_supported"]))
			require.Equal(t, true, as["authorization_response_iss_parameter_supported"])
			for _, p := range arr(obj(pj["agent"])["protocols"]) {
				if obj(p)["access"] == "signed_in" {
					require.NotEqual(t, true, auth["disabled"], "signed_in needs sign-in on")
				}
			}
		}

		// Excluded tasks: advertised iff served, and references of type
		// openapi or mcp name a listed API (spec 9.2).
		var tasksURL string
		for u := range docs {
			if strings.HasSuffix(u, "/poppy/excluded-tasks.json") {
				tasksURL = u
			}
		}
		require.NotEmpty(t, tasksURL)
		if et := obj(pj["excluded_tasks"]); et != nil {
			require.Equal(t, tasksURL, et["url"])
			tasks := docs[tasksURL]
			require.NotNil(t, tasks)
			require.NotEmpty(t, tasks["tasks"])
			apis := map[string]string{}
			for _, a := range arr(pj["apis"]) {
				apis[obj(a)["url"].(string)] = obj(a)["type"].(string)
			}
			for _, task := range arr(tasks["tasks"]) {
				require.NotEmpty(t, obj(task)["task"])
				alt := obj(obj(task)["alternative"])
				if alt == nil {
					continue
				}
				require.True(t, alt["instructions"] != nil || alt["references"] != nil)
				refs, _ := alt["references"].([]any)
				for _, r := range refs {
					if typ := obj(r)["type"]; typ == "openapi" || typ == "mcp" {
						require.Equal(t, typ, apis[obj(r)["url"].(string)])
					}
				}
			}
		} else {
			require.Nil(t, docs[tasksURL])
		}
	}
}

// requireAllHTTPS walks v and checks every string that holds "://" is an
// https URL (spec 3, HTTPS).
func requireAllHTTPS(t testing.TB, where string, v any) {
	t.Helper()
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case string:
			if strings.Contains(x, "://") {
				requireHTTPSURL(t, where+" "+path, x)
			}
		case []any:
			for i, e := range x {
				walk(path+"["+strconv.Itoa(i)+"]", e)
			}
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		}
	}
	walk("", v)
}

// requireNoEmptyList checks OAuth metadata for empty arrays: RFC 8414 §3.2
// and RFC 9728 §3.2 say claims with zero elements MUST be omitted.
func requireNoEmptyList(t testing.TB, where string, doc map[string]any) {
	t.Helper()
	for k, v := range doc {
		if list, ok := v.([]any); ok {
			require.NotEmpty(t, list, "%s: %s is an empty list; leave it out", where, k)
		}
	}
}

func requireHTTPSURL(t testing.TB, where, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err, where)
	require.Equal(t, "https", u.Scheme, "%s: %s is not https", where, raw)
	require.NotEmpty(t, u.Host, "%s: %s", where, raw)
	require.Nil(t, u.User, "%s: %s", where, raw)
	require.Empty(t, u.Fragment, "%s: %s", where, raw)
}

func arr(v any) []any {
	a, _ := v.([]any)
	return a
}
