package discovery_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestServedDocumentsMatchGolden creates every golden case through the
// admin API and fetches every URL of its golden file from the running
// platform, without any token: each answers with the golden document (the
// public origin aside), as JSON cacheable for a minute, or with a JSON 404
// where the golden file has null. Every URL anywhere in a served document
// is https.
func TestServedDocumentsMatchGolden(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for _, tc := range cases {
		env.CreateCompany(t, tc.adminBody(t))
	}
	origin := env.PublicURL("")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			golden := readGolden(t, tc.name)
			require.NotEmpty(t, golden.Documents)
			for u, want := range golden.Documents {
				resp := get(t, env, serverURL(t, env, u))
				if string(want) == "null" || want == nil {
					requireNotFound(t, resp, u)
					continue
				}
				doc := requireDocument(t, resp, u)
				requireAllHTTPS(t, u, doc)
				got := strings.ReplaceAll(string(resp.Body), origin, publicURL)
				// The browser join is on the port the test fetched at.
				got = strings.ReplaceAll(got, ":"+env.Port+"/poppy/browser-session", "/poppy/browser-session")
				require.JSONEq(t, string(want), got, u)
			}
		})
	}
}

// TestPoppyJSONNamesTheHost checks spec 3 check 1 over HTTP: the document
// names the host it was requested on, without the port, in lowercase and
// without a trailing dot, whatever form the Host header takes; and the
// protected resource metadata's resource is exactly https://{that host}.
func TestPoppyJSONNamesTheHost(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[4].adminBody(t)) // multi-domain
	for _, d := range []string{"shop.example", "shop.example.co.uk", "de.shop.example"} {
		for _, host := range []string{
			d,                  // no port
			d + ":" + env.Port, // the port, as browsers send it off 443
			strings.ToUpper(d) + ":" + env.Port,
			d + ".:" + env.Port, // fully qualified
		} {
			resp := fetch(t, env, http.MethodGet, env.URL(d, poppyPath), host)
			pj := requireDocument(t, resp, host)
			require.Equal(t, d, obj(pj["organization"])["domain"], host)
			// The browser joins where poppy.json was fetched: on its port
			// when that is not 443.
			join := "https://" + d + "/poppy/browser-session"
			if host != d {
				join = "https://" + d + ":" + env.Port + "/poppy/browser-session"
			}
			require.Equal(t, join, obj(pj["web"])["browser_session_endpoint"], host)

			prm := requireDocument(t, fetch(t, env, http.MethodGet, env.URL(d, prmPath), host), host)
			require.Equal(t, "https://"+d, prm["resource"], host)
		}
	}
}

// TestDiscoveryAsAPersonalAgent starts from a domain and follows only what
// the documents say, as a Personal Agent does: the issuer from the
// protected resource metadata, its metadata at the RFC 8414 §3.1 URL, the
// metadata of every resource it lists, and the excluded tasks document at
// excluded_tasks.url.
func TestDiscoveryAsAPersonalAgent(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[1].adminBody(t)) // full
	view := env.CreateCompany(t, cases[4].adminBody(t))

	for _, d := range []string{"example.com", "shop.example", "shop.example.co.uk"} {
		pj := requireDocument(t, get(t, env, env.URL(d, poppyPath)), d)
		prm := requireDocument(t, get(t, env, env.URL(d, prmPath)), d)
		servers := strs(t, prm["authorization_servers"])
		require.Len(t, servers, 1)
		issuer := servers[0]
		as := requireDocument(t, get(t, env, asMetadataURL(t, issuer)), issuer)
		require.Equal(t, issuer, as["issuer"])
		resources := strs(t, as["protected_resources"])
		require.Contains(t, resources, "https://"+d)
		for _, r := range resources {
			// The test server listens on one port for every host.
			u, err := url.Parse(r)
			require.NoError(t, err)
			other := requireDocument(t, get(t, env, env.URL(u.Host, prmPath)), r)
			require.Equal(t, r, other["resource"])
			require.Equal(t, []string{issuer}, strs(t, other["authorization_servers"]), "one issuer for all the Company's domains")
		}
		if et := obj(pj["excluded_tasks"]); et != nil {
			tasks := requireDocument(t, get(t, env, et["url"].(string)), "excluded tasks")
			require.Len(t, tasks["tasks"], 3)
		}
	}
	require.Equal(t, view["issuer"], env.URLs.Base(cases[4].company(t)), "the admin API and the documents agree on the issuer")
}

func TestASMetadataNotFound(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[2].adminBody(t)) // no-issuer, slug bakery
	for _, slug := range []string{"bakery", "unknown", "UPPER", "-bad-", "a%2Fb"} {
		requireNotFound(t, get(t, env, env.PublicURL("/.well-known/oauth-authorization-server/t/"+slug)), slug)
	}
	requireNotFound(t, get(t, env, env.PublicURL("/.well-known/oauth-authorization-server/t/")), "no slug")
	requireNotFound(t, get(t, env, env.URL("bakery.example", prmPath)), "no issuer")
	// The discovery documents live on Company domains, not on the platform.
	requireNotFound(t, get(t, env, env.PublicURL(poppyPath)), "platform host")
	requireNotFound(t, get(t, env, env.URL("unknown.example", poppyPath)), "unknown domain")
}

func TestExcludedTasks(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[1].adminBody(t)) // full, slug example
	env.CreateCompany(t, cases[0].adminBody(t)) // minimal: none

	// Fetched with a GET and no token or Session header (spec 9.1).
	tasks := requireDocument(t, get(t, env, env.PublicURL("/t/example/poppy/excluded-tasks.json")), "tasks")
	require.Len(t, tasks["tasks"], 3)
	require.Equal(t, "Send a wire transfer", obj(arr(tasks["tasks"])[0])["task"])

	requireNotFound(t, get(t, env, env.PublicURL("/t/minimal/poppy/excluded-tasks.json")), "none configured")
	requireNotFound(t, get(t, env, env.PublicURL("/t/nobody/poppy/excluded-tasks.json")), "unknown slug")
	requireNotFound(t, get(t, env, env.URL("example.com", "/t/example/poppy/excluded-tasks.json")), "on the Company domain")
}

func TestHead(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[1].adminBody(t))
	env.CreateCompany(t, cases[2].adminBody(t)) // no issuer
	for _, u := range []string{
		env.URL("example.com", poppyPath),
		env.URL("example.com", prmPath),
		env.PublicURL("/.well-known/oauth-authorization-server/t/example"),
		env.PublicURL("/t/example/poppy/excluded-tasks.json"),
	} {
		resp := fetch(t, env, http.MethodHead, u, "")
		require.Equal(t, http.StatusOK, resp.Status, u)
		require.Empty(t, resp.Body, u)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), u)
		require.Equal(t, "public, max-age=60", resp.Header.Get("Cache-Control"), u)
	}
	for _, u := range []string{
		env.URL("bakery.example", prmPath),
		env.PublicURL("/.well-known/oauth-authorization-server/t/bakery"),
	} {
		resp := fetch(t, env, http.MethodHead, u, "")
		require.Equal(t, http.StatusNotFound, resp.Status, u)
		require.Empty(t, resp.Body, u)
	}
}

// TestMethodNotAllowed: the documents are read-only, and say which methods
// they take.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[1].adminBody(t))
	allows := map[string]string{}
	for _, u := range []string{
		env.URL("example.com", poppyPath),
		env.URL("example.com", prmPath),
		env.PublicURL("/.well-known/oauth-authorization-server/t/example"),
		env.PublicURL("/t/example/poppy/excluded-tasks.json"),
	} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			resp := env.Do(t, method, u, `{}`)
			require.Equal(t, http.StatusMethodNotAllowed, resp.Status, "%s %s", method, u)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Equal(t, "method_not_allowed", resp.JSON(t)["error"])
			allows[method+" "+u] = strings.Join(resp.Header.Values("Allow"), ", ")
		}
	}

	// RFC 9110 §15.5.6: a 405 MUST carry Allow.
	for req, a := range allows {
		require.Contains(t, a, http.MethodGet, "%s: Allow names the methods the document takes", req)
		require.NotContains(t, a, http.MethodPost, req)
	}
}

// TestPatchShowsAtOnce changes a Company through the admin API: the very
// next request for each document sees the change.
func TestPatchShowsAtOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[0].adminBody(t)) // minimal
	patch := func(body string) {
		t.Helper()
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/minimal", json.RawMessage(body))
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	poppy := func(d string) map[string]any {
		t.Helper()
		return requireDocument(t, get(t, env, env.URL(d, poppyPath)), d)
	}
	asURL := env.PublicURL("/.well-known/oauth-authorization-server/t/minimal")
	tasksURL := env.PublicURL("/t/minimal/poppy/excluded-tasks.json")

	pj := poppy("minimal.example")
	require.Equal(t, "Minimal Shop", obj(pj["organization"])["name"])
	requireNotFound(t, get(t, env, tasksURL), "before")

	patch(`{
		"organization": {"name": "Renamed Shop"},
		"domains": ["minimal.example.org"],
		"auth": {"scopes": {"cart": "See and change your cart"}},
		"conversations": {"enabled": false},
		"excluded_tasks": [{"task": "Buy a gift card"}]
	}`)
	for _, d := range []string{"minimal.example", "minimal.example.org"} {
		pj = poppy(d)
		require.Equal(t, "Renamed Shop", obj(pj["organization"])["name"])
		require.Equal(t, d, obj(pj["organization"])["domain"])
		require.Equal(t, map[string]any{"cart": "See and change your cart"}, obj(pj["auth"])["scopes"])
		require.NotContains(t, pj, "agent")
		require.Equal(t, tasksURL, obj(pj["excluded_tasks"])["url"])
	}
	as := requireDocument(t, get(t, env, asURL), "as")
	require.Equal(t, []string{"https://minimal.example", "https://minimal.example.org"}, strs(t, as["protected_resources"]))
	require.Equal(t, []string{"cart"}, strs(t, as["scopes_supported"]))
	tasks := requireDocument(t, get(t, env, tasksURL), "tasks")
	require.Equal(t, []any{map[string]any{"task": "Buy a gift card"}}, tasks["tasks"])

	// Dropping the issuer (and with it the extra domain and the scopes);
	// the default grant types need no reset.
	patch(`{"domains": [], "auth": {"issuer": false, "scopes": null}, "excluded_tasks": []}`)
	pj = poppy("minimal.example")
	require.NotContains(t, pj, "auth")
	require.NotContains(t, pj, "excluded_tasks")
	requireNotFound(t, get(t, env, env.URL("minimal.example", prmPath)), "prm without issuer")
	requireNotFound(t, get(t, env, asURL), "as without issuer")
	requireNotFound(t, get(t, env, tasksURL), "tasks removed")
	requireNotFound(t, get(t, env, env.URL("minimal.example.org", poppyPath)), "removed domain")

	// Back on: the issuer's documents return, offering both sign-in types.
	patch(`{"auth": {"issuer": true}}`)
	require.Equal(t, map[string]any{"resource": "https://minimal.example",
		"authorization_servers": []any{env.PublicURL("/t/minimal")}, "bearer_methods_supported": []any{"header"}},
		requireDocument(t, get(t, env, env.URL("minimal.example", prmPath)), "prm with issuer again"))
	as = requireDocument(t, get(t, env, asURL), "as with issuer again")
	require.Equal(t, []string{"refresh_token", tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}, strs(t, as["grant_types_supported"]))

	// Sign-in off and on again: the metadata follows at once.
	patch(`{"auth": {"disabled": true}}`)
	as = requireDocument(t, get(t, env, asURL), "as with sign-in off")
	require.Equal(t, []string{"refresh_token"}, strs(t, as["grant_types_supported"]))
	require.Equal(t, map[string]any{"disabled": true}, poppy("minimal.example")["auth"])
	patch(`{"auth": {"disabled": false}}`)
	as = requireDocument(t, get(t, env, asURL), "as with sign-in on")
	require.Equal(t, []string{"refresh_token", tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}, strs(t, as["grant_types_supported"]))
	require.NotContains(t, poppy("minimal.example"), "auth")
}

// TestCompaniesAreIsolated: a Company's domain and slug serve its own
// documents only. Nothing of Company A (name, slug, domain, scopes, APIs,
// tasks) appears in anything B's domain or slug serves, and the Host header,
// not the TLS server name, picks the Company.
func TestCompaniesAreIsolated(t *testing.T) {
	t.Parallel()
	env := setup(t)
	company := func(name string) {
		env.CreateCompany(t, map[string]any{
			"slug":           name,
			"organization":   map[string]any{"name": name + " corp", "domain": name + ".example"},
			"domains":        []string{"www." + name + ".example"},
			"auth":           map[string]any{"scopes": map[string]string{name + ":read": "See your " + name + " data"}},
			"web":            map[string]any{"browser_join": true},
			"apis":           []map[string]any{{"type": "openapi", "url": "https://api." + name + ".example/openapi.json"}},
			"excluded_tasks": []map[string]any{{"task": "Close a " + name + " account"}},
		})
	}
	company("alpha")
	company("beta")

	served := func(name string) []*peers.Response {
		var out []*peers.Response
		for _, d := range []string{name + ".example", "www." + name + ".example"} {
			out = append(out,
				get(t, env, env.URL(d, poppyPath)),
				get(t, env, env.URL(d, prmPath)))
		}
		return append(out,
			get(t, env, env.PublicURL("/.well-known/oauth-authorization-server/t/"+name)),
			get(t, env, env.PublicURL("/t/"+name+"/poppy/excluded-tasks.json")))
	}
	for _, pair := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}} {
		own, other := pair[0], pair[1]
		for _, resp := range served(own) {
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			require.Contains(t, string(resp.Body), own)
			require.NotContains(t, string(resp.Body), other, "%s's documents mention %s", own, other)
		}
	}

	// TLS names alpha, Host names beta: beta's document, all of it.
	resp := fetch(t, env, http.MethodGet, env.URL("alpha.example", poppyPath), "beta.example:"+env.Port)
	pj := requireDocument(t, resp, "fronted")
	require.Equal(t, "beta.example", obj(pj["organization"])["domain"])
	require.NotContains(t, string(resp.Body), "alpha")
}

// TestHandlerServesTheBuilders checks the handler serves exactly what the
// builders make for the stored Company, byte for byte.
func TestHandlerServesTheBuilders(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, cases[1].adminBody(t))
	c, err := env.Tenants.Get(t.Context(), "example")
	require.NoError(t, err)

	want := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return string(b) + "\n"
	}
	pj := discovery.BuildPoppyJSON(c, "example.com", env.URLs)
	// Fetched off 443, the browser joins on the same port.
	pj.Web.BrowserSessionEndpoint = "https://example.com:" + env.Port + "/poppy/browser-session"
	require.Equal(t, want(pj), string(get(t, env, env.URL("example.com", poppyPath)).Body))
	prm, ok := discovery.BuildProtectedResource(c, "example.com", env.URLs)
	require.True(t, ok)
	require.Equal(t, want(prm), string(get(t, env, env.URL("example.com", prmPath)).Body))
	as, ok := discovery.BuildASMetadata(c, env.URLs)
	require.True(t, ok)
	require.Equal(t, want(as), string(get(t, env, env.URLs.ASMetadata(c)).Body))
	require.Equal(t, want(discovery.ExcludedTasksDoc{Tasks: c.Settings.ExcludedTasks}),
		string(get(t, env, excludedTasksURL(env.URLs, c)).Body))
}
