package api

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contractAudit reads the audit log the areas before left, and drives the
// Company's own API keys.
func contractAudit(t *testing.T, c *contract, acmeKey string) {
	type page struct {
		Entries []struct {
			ID      string   `json:"id"`
			Company string   `json:"company"`
			Action  string   `json:"action"`
			Fields  []string `json:"fields"`
		} `json:"entries"`
		Next string `json:"next"`
	}

	t.Run("audit log", func(t *testing.T) {
		path := "/admin/v1/companies/acme/audit"
		first := decode[page](t, c.do(t, call{method: get, path: path + "?limit=2", token: admin, want: 200}))
		require.Len(t, first.Entries, 2)
		require.NotEmpty(t, first.Next)
		next := decode[page](t, c.do(t, call{method: get, path: path + "?limit=2&before=" + first.Next, token: admin, want: 200}))
		require.NotEmpty(t, next.Entries)
		assert.NotEqual(t, first.Entries[1].ID, next.Entries[0].ID, "the next page starts after the cursor")
		all := decode[page](t, c.do(t, call{method: get, path: path + "?limit=500", token: admin, want: 200}))
		actions := map[string]bool{}
		for _, e := range all.Entries {
			assert.Equal(t, "acme", e.Company)
			actions[e.Action] = true
		}
		assert.True(t, actions["POST /admin/v1/companies"], "acme's creation is recorded")
		assert.True(t, actions["PUT /company/v1/apis/{name}"], "the Company's registrations are recorded")
		assert.Equal(t, all.Entries, decode[page](t, c.do(t, call{method: get, path: "/company/v1/audit?limit=500", token: acmeKey, want: 200})).Entries)
		c.do(t, call{method: get, path: "/admin/v1/audit", token: admin, want: 200})

		c.do(t, call{method: get, path: path + "?before=x", token: admin, want: 400, docRejects: true})
		c.do(t, call{method: get, path: path + "?limit=0", token: admin, want: 400, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/audit?before=0", token: admin, want: 400, docRejects: true})
		c.do(t, call{method: get, path: "/company/v1/audit?limit=501", token: acmeKey, want: 400, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/audit", token: admin, want: 404})
		c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		c.do(t, call{method: get, path: "/admin/v1/audit", token: bogus, want: 401})
		c.do(t, call{method: get, path: "/company/v1/audit", token: admin, want: 401})
	})

	t.Run("the company's api keys", func(t *testing.T) {
		type key struct {
			ID     int64  `json:"id"`
			Prefix string `json:"prefix"`
			Key    string `json:"key"`
		}
		spare := decode[key](t, c.do(t, call{method: post, path: "/admin/v1/companies/acme/api-keys", token: admin, want: 201}))
		assert.Equal(t, spare.Key[:12], spare.Prefix)
		list := decode[struct {
			APIKeys []key `json:"api_keys"`
		}](t, c.do(t, call{method: get, path: "/company/v1/api-keys", token: acmeKey, want: 200}))
		assert.Equal(t, spare.ID, list.APIKeys[0].ID)
		assert.Empty(t, list.APIKeys[0].Key)
		c.do(t, call{method: del, path: fmt.Sprintf("/company/v1/api-keys/%d", spare.ID), token: acmeKey, want: 204})
		c.do(t, call{method: get, path: "/company/v1/company", token: spare.Key, want: 401})
		c.do(t, call{method: del, path: "/company/v1/api-keys/999999", token: acmeKey, want: 404})
		c.do(t, call{method: get, path: "/company/v1/api-keys", want: 401, docRejects: true})
		c.do(t, call{method: get, path: "/company/v1/api-keys", token: bogus, want: 401})
		c.do(t, call{method: del, path: "/company/v1/api-keys/1", token: admin, want: 401})
	})
}
