package api

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// contractConsole creates acme's first console owner through the admin
// API and signs in at the console's sign-in page: every answer of both.
func contractConsole(t *testing.T, c *contract) {
	t.Run("console", func(t *testing.T) {
		const formType = "application/x-www-form-urlencoded"
		staff := "/admin/v1/companies/acme/staff"
		owner := map[string]any{"email": "Owner@Acme.example", "name": "Olive", "password": "olive's password"}
		r := c.do(t, call{method: post, path: staff, token: admin, body: owner, want: 201})
		require.Equal(t, "owner@acme.example", r.JSON(t)["email"])
		c.do(t, call{method: post, path: staff, token: admin, body: owner, want: 409})
		c.do(t, call{method: post, path: staff, token: admin, want: 400, docRejects: true,
			body: map[string]any{"email": "not an email", "role": "king", "password": "short"}})
		c.do(t, call{method: post, path: staff, body: owner, want: 401, docRejects: true})
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/staff", token: admin, body: owner, want: 404})
		c.do(t, call{method: post, path: staff, token: admin, want: 413, docRejects: true,
			body: `{"email":"` + strings.Repeat("a", 5000) + `@acme.example","password":"olive's password"}`})
		c.do(t, call{method: post, path: staff, token: admin, body: "email=x", ctype: formType, want: 415, docRejects: true})

		signin := "/console/acme/signin"
		browser := c.env.Browser(t).Client
		r = c.do(t, call{method: get, path: signin, client: browser, want: 200})
		m := consoleCSRF.FindStringSubmatch(string(r.Body))
		require.NotNil(t, m, "%s", r.Body)
		form := func(email, password string) string {
			return url.Values{"csrf": {m[1]}, "email": {email}, "password": {password}}.Encode()
		}
		c.do(t, call{method: get, path: "/console/nosuch/signin", want: 404})
		send := func(body string, want int, docRejects bool) {
			t.Helper()
			c.do(t, call{method: post, path: signin, client: browser, body: body, ctype: formType, want: want, docRejects: docRejects})
		}
		send(url.Values{"email": {"owner@acme.example"}, "password": {"olive's password"}}.Encode(), 403, true)
		send(form("", ""), 400, false)
		send(form("owner@acme.example", "not olive's password"), 401, false)
		c.do(t, call{method: post, path: "/console/nosuch/signin", body: form("a@b.example", "x"), ctype: formType, want: 404})

		// Failures lock the email: a locked attempt is refused at once,
		// without a hash, so the next one right after is refused too.
		locked := false
		for range 12 {
			resp, err := browser.PostForm(c.env.PublicURL(signin), url.Values{"csrf": {m[1]},
				"email": {"owner@acme.example"}, "password": {"guess"}})
			require.NoError(t, err)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				locked = true
				break
			}
		}
		require.True(t, locked, "the email never got locked")
		send(form("owner@acme.example", "olive's password"), 429, false)
		// A member not locked signs in.
		c.do(t, call{method: post, path: staff, token: admin, want: 201,
			body: map[string]any{"email": "otto@acme.example", "role": "admin", "password": "otto's password"}})
		send(form("otto@acme.example", "otto's password"), 303, false)
	})
}
