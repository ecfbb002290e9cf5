package api

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractFeaturesOff checks the 404 of every route whose feature a
// Company does not offer.
func contractFeaturesOff(t *testing.T, c *contract) {
	t.Run("features that are off", func(t *testing.T) {
		// A route answers 404 for a Company whose settings do not offer the
		// feature it belongs to (an issuer, its sign-in type,
		// conversations.enabled, web.browser_join); the issuer,
		// conversations and browser join tests drive them otherwise. acme
		// offers everything; minimal has an issuer and conversations but no
		// browser join; corner has conversations but no issuer.
		feature := func(path string) string {
			switch {
			case path == "/t/{slug}/oauth/jwks.json":
				// Every Company has keys: they sign Poppy-Verified.
				return "keys"
			case path == "/t/{slug}/oauth/authorize":
				return "direct sign-in"
			case path == "/t/{slug}/oauth/device_authorization", path == "/t/{slug}/device":
				return "device sign-in"
			case strings.HasPrefix(path, "/t/{slug}/oauth/"), path == "/t/{slug}/account":
				return "issuer"
			case strings.HasPrefix(path, "/t/{slug}/poppy/conversations"):
				return "conversations"
			case strings.HasPrefix(path, "/poppy/browser-session"):
				return "browser join"
			}
			return ""
		}
		offers := map[string]map[string]bool{
			"acme":    {"keys": true, "issuer": true, "direct sign-in": true, "device sign-in": true, "conversations": true, "browser join": true},
			"minimal": {"keys": true, "issuer": true, "direct sign-in": true, "device sign-in": true, "conversations": true},
			"corner":  {"keys": true, "conversations": true},
			"nosuch":  {},
		}
		check := func(t *testing.T, slug string) {
			t.Helper()
			for _, op := range operations {
				method, path, _ := strings.Cut(op, " ")
				f := feature(path)
				if f == "" || offers[slug][f] {
					continue
				}
				k := call{method: method, want: 404, docRejects: c.incomplete(method, path),
					path: strings.ReplaceAll(strings.ReplaceAll(path, "{slug}", slug), "{conversation_id}", "c_1")}
				if !strings.HasPrefix(path, "/t/") {
					k.host = slug + ".example"
				}
				r := c.do(t, k)
				assert.Equal(t, "not_found", r.JSON(t)["error"], op)
			}
		}
		for slug := range offers {
			check(t, slug)
		}

		// Turning a feature on or off changes the answer at once.
		c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"web":{"browser_join":true},"conversations":{"enabled":false},"auth":{"grant_types":["authorization_code"]}}`})
		c.do(t, call{method: patch, path: "/admin/v1/companies/corner", token: admin, want: 200,
			body: `{"conversations":{"enabled":false}}`})
		offers["minimal"] = map[string]bool{"keys": true, "issuer": true, "direct sign-in": true, "browser join": true}
		offers["corner"] = map[string]bool{"keys": true}
		c.do(t, call{method: get, host: "minimal.example", path: "/poppy/browser-session", want: 200})
		check(t, "minimal")
		check(t, "corner")
		c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"web":null,"conversations":null,"auth":{"grant_types":null}}`})
		c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"auth":{"issuer":false}}`})
		offers["minimal"] = map[string]bool{"keys": true, "conversations": true}
		check(t, "minimal")
	})
}

// contractRateLimits checks the 429 of every route of a Company.
func contractRateLimits(t *testing.T, c *contract, f *fixture) {
	issuer, agent := f.issuer, f.agent

	t.Run("rate limits", func(t *testing.T) {
		// A Company allowing one request a minute from an address: after
		// the first, every route of the Company answers 429 (spec 5.6).
		c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201, body: map[string]any{
			"slug": "busy", "organization": map[string]any{"name": "Busy", "domain": "busy.example"},
			"web": map[string]any{"browser_join": true}, "excluded_tasks": []any{map[string]any{"task": "T"}},
			"rate_limits": map[string]any{"per_address": 1},
		}})
		c.do(t, call{method: get, host: "busy.example", path: "/.well-known/poppy.json", want: 200})
		for _, op := range operations {
			method, path, _ := strings.Cut(op, " ")
			k := call{method: method, want: 429, docRejects: c.incomplete(method, path),
				path: strings.NewReplacer("{slug}", "busy", "{conversation_id}", "c_1", "{name}", "orders", "{path}", "x").Replace(path)}
			switch {
			case strings.HasPrefix(path, "/t/{slug}/"):
			case slices.Contains(companyDomainPaths, path):
				k.host = "busy.example"
			default:
				continue
			}
			r := c.do(t, k)
			assert.Equal(t, "rate_limited", r.JSON(t)["error"])
			n, err := strconv.Atoi(r.Header.Get("Retry-After"))
			assert.NoError(t, err, op)
			assert.True(t, n > 0 && n <= 60, "%s: Retry-After %d", op, n)
		}
		// Once its Session header is verified, a request also counts
		// against the Personal Agent and the Session.
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"rate_limits":{"per_session":1}}`})
		report := `{"task":"Return a gift","description":"No receipt."}`
		in := func(sid string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: sid}, peers.SessionOptions{})
			}
		}
		c.do(t, call{method: post, path: "/t/acme/poppy/feedback", session: in("rate-1"), want: 202, body: report})
		r := c.do(t, call{method: post, path: "/t/acme/poppy/feedback", session: in("rate-1"), want: 429, body: report})
		assert.Equal(t, "rate_limited", r.JSON(t)["error"])
		n, err := strconv.Atoi(r.Header.Get("Retry-After"))
		assert.NoError(t, err)
		assert.True(t, n > 0 && n <= 60, "Retry-After %d", n)
		c.do(t, call{method: post, path: "/t/acme/poppy/feedback", session: in("rate-2"), want: 202, body: report})
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"rate_limits":{"per_session":300}}`})

		// Other Companies and the platform's own routes are not affected.
		c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200})
		c.do(t, call{method: get, path: "/.well-known/oauth-authorization-server/t/busy", want: 200})
		c.do(t, call{method: get, path: "/admin/v1/companies/busy", token: admin, want: 200})
	})
}

// contractUndocumented sends requests no operation describes.
func contractUndocumented(t *testing.T, c *contract) {
	t.Run("undocumented requests", func(t *testing.T) {
		r := c.undocumented(t, call{method: http.MethodPut, path: "/admin/v1/companies/acme", token: admin, body: `{}`, want: 405}, "method_not_allowed")
		// RFC 9110 section 15.5.6: a 405 carries Allow.
		require.Equal(t, "GET, HEAD, PATCH, DELETE", r.Header.Get("Allow"))
		c.undocumented(t, call{method: get, path: "/no/such/route", want: 404}, "not_found")
		// A Company domain serves no platform route; without web.origin
		// (minimal has none) nothing else either.
		c.undocumented(t, call{method: get, host: "minimal.example", path: "/admin/v1/companies", token: admin, want: 404}, "not_found")
		r, _ = c.send(t, call{method: http.MethodHead, path: "/healthz", ops: true})
		assert.Equal(t, 200, r.Status)
		assert.Empty(t, r.Body)
		// The issuer's pages answer another method with a page.
		for _, path := range []string{"/t/acme/oauth/authorize", "/t/acme/device", "/t/acme/account"} {
			r, _ = c.send(t, call{method: http.MethodPut, path: path})
			assert.Equal(t, 405, r.Status, path)
			assert.Contains(t, r.Header.Get("Allow"), "GET", path)
			assert.Contains(t, r.Header.Get("Allow"), "POST", path)
			assert.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"), path)
		}
		// The OAuth endpoints answer a method they do not serve as every
		// route does.
		c.undocumented(t, call{method: get, path: "/t/acme/oauth/token", want: 405}, "method_not_allowed")
	})
}
