package api

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// contractOperations checks what an operator watches: health, readiness
// and metrics, on the operations listener and on no public host.
func contractOperations(t *testing.T, c *contract) {
	t.Run("operations", func(t *testing.T) {
		r := c.do(t, call{method: get, path: "/healthz", ops: true, want: 200})
		assert.JSONEq(t, `{"status":"ok"}`, string(r.Body))
		r = c.do(t, call{method: get, path: "/readyz", ops: true, want: 200})
		assert.JSONEq(t, `{"status":"ok"}`, string(r.Body))
		r = c.do(t, call{method: get, path: "/metrics", ops: true, want: 200})
		assert.Contains(t, string(r.Body), "poppyhost_http_requests_total")
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			c.undocumented(t, call{method: get, path: path, want: 404}, "not_found")
		}
	})
}

// contractOperatorTokens drives the admin API's operator tokens.
func contractOperatorTokens(t *testing.T, c *contract) {
	t.Run("operator tokens", func(t *testing.T) {
		path := "/admin/v1/operator-tokens"
		type token struct {
			ID    int64  `json:"id"`
			Name  string `json:"name"`
			Token string `json:"token"`
		}
		ci := decode[token](t, c.do(t, call{method: post, path: path, token: admin, want: 201, body: `{"name":"ci"}`}))
		assert.Equal(t, "ci", ci.Name)
		c.do(t, call{method: post, path: path, token: admin, want: 201})
		list := decode[struct {
			OperatorTokens []struct {
				ID     int64  `json:"id"`
				Prefix string `json:"prefix"`
			} `json:"operator_tokens"`
		}](t, c.do(t, call{method: get, path: path, token: admin, want: 200}))
		assert.Equal(t, ci.Token[:12], list.OperatorTokens[1].Prefix, "newest first; the prefix, never the secret")
		c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		c.do(t, call{method: get, path: path, token: bogus, want: 401})

		// A new token works at once and stops working when revoked.
		c.do(t, call{method: get, path: "/admin/v1/companies?limit=1", token: ci.Token, want: 200})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, ci.ID), token: ci.Token, want: 204})
		c.do(t, call{method: get, path: "/admin/v1/companies?limit=1", token: ci.Token, want: 401})
		c.do(t, call{method: del, path: fmt.Sprintf("%s/%d", path, ci.ID), token: admin, want: 204})

		c.do(t, call{method: del, path: path + "/999999", token: admin, want: 404})
		c.do(t, call{method: del, path: path + "/0", token: admin, want: 404, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", want: 401, docRejects: true})
		c.do(t, call{method: del, path: path + "/1", token: bogus, want: 401})
		c.do(t, call{method: post, path: path, token: admin, want: 400, docRejects: true, body: `{"nmae":"typo"}`})
		c.do(t, call{method: post, path: path, token: admin, want: 413, body: padded(t, map[string]string{"name": "x"}, 4<<10)})
		c.do(t, call{method: post, path: path, token: admin, want: 415, docRejects: true, body: `{}`, ctype: "text/plain"})
		c.do(t, call{method: post, path: path, want: 401, docRejects: true})
		c.do(t, call{method: post, path: path, token: bogus, want: 401})
	})
}

// contractDraining drains the platform: it must come last.
func contractDraining(t *testing.T, c *contract, f *fixture) {
	env := f.env

	t.Run("draining", func(t *testing.T) {
		env.Platform.Drain()
		r := c.do(t, call{method: get, path: "/readyz", ops: true, want: 503})
		assert.Equal(t, "draining", r.JSON(t)["status"])
	})
}
