package discovery_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// publicURL is the platform origin the golden files are written for.
const publicURL = "https://poppyhost.example"

var goldenURLs = tenant.URLs{Public: &url.URL{Scheme: "https", Host: "poppyhost.example"}}

// companyCase is a Company as an operator creates it: the body of
// POST /admin/v1/companies. The golden tests decode it the way the admin API
// does, and the HTTP tests send it to the admin API, so both see the same
// Company.
type companyCase struct {
	name string
	body string
}

// cases are the Companies whose documents the golden files hold. Their
// slugs and domains differ, so the HTTP tests can create all of them on one
// platform.
var cases = []companyCase{
	{
		// A new Company with nothing but its name and domain: an issuer with
		// both sign-in types, conversations and feedback on (DESIGN.md).
		name: "minimal",
		body: `{"slug": "minimal", "organization": {"name": "Minimal Shop", "domain": "minimal.example"}}`,
	},
	{
		// The example document of spec section 3, with the excluded tasks of
		// 9.1 and 9.2, the extension of 3.3 and the skill index of 9.4.
		name: "full",
		body: `{
			"slug": "example",
			"organization": {"name": "Example Company", "domain": "example.com", "logo_uri": "https://example.com/logo.png"},
			"auth": {
				"scopes": {
					"orders:read": "See your orders, returns, and bookings",
					"orders:write": "Exchange or return items, and change bookings",
					"addresses": "See and change your saved shipping addresses"
				},
				"scope_hints": {
					"orders:read": {"changes": "none", "personal_data": true},
					"orders:write": {"changes": "irreversible", "personal_data": true},
					"addresses": {"changes": "reversible", "personal_data": true}
				}
			},
			"web": {"browser_join": true},
			"excluded_tasks": [
				{
					"task": "Send a wire transfer",
					"alternative": {
						"instructions": "Wire transfers can only be sent in the Example app, after the User verifies their identity.",
						"references": [{"type": "web", "url": "https://example.com/transfers/wire"}]
					}
				},
				{"task": "Close an account"},
				{
					"task": "Pay with a gift card",
					"alternative": {
						"instructions": "Gift cards are applied with the payment API, before the order is placed.",
						"references": [
							{"type": "openapi", "url": "https://api.example.com/openapi.json", "operation_id": "applyGiftCard"},
							{"type": "web", "url": "https://example.com/checkout"}
						]
					}
				}
			],
			"apis": [
				{"type": "openapi", "url": "https://api.example.com/openapi.json", "description": "Orders, returns, and exchanges"},
				{"type": "mcp", "url": "https://mcp.example.com/mcp", "description": "Product search and sizing"}
			],
			"extensions": {
				"example.com/gift-wrap": {"version": "1", "endpoint": "https://api.example.com/poppy/gift-wrap"}
			},
			"skill_index": {
				"$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
				"skills": [
					{
						"name": "manage-bookings",
						"description": "Manage the User's bookings with this Company.",
						"type": "skill-md",
						"url": "https://cdn.example.com/skills/manage-bookings/SKILL.md",
						"digest": "sha256:1b2a8cde934e632f7e14fa080a627ad7191e29d412d2b8a7aa07d9c9ab2f475e"
					},
					{
						"name": "return-items",
						"description": "Return items from an order.",
						"type": "archive",
						"url": "skills/return-items.tar.gz",
						"digest": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
					}
				]
			}
		}`,
	},
	{
		// No issuer: signed-out Sessions only, identified by its domain
		// (spec 3.2). It still offers APIs, conversations, feedback and
		// browser join.
		name: "no-issuer",
		body: `{
			"slug": "bakery",
			"organization": {"name": "Corner Bakery", "domain": "bakery.example"},
			"auth": {"issuer": false},
			"web": {"browser_join": true},
			"excluded_tasks": [{"task": "Order a wedding cake"}],
			"apis": [{"type": "openapi", "url": "https://api.bakery.example/openapi.json"}]
		}`,
	},
	{
		// auth.disabled: the issuer stays, sign-in for Personal Agents goes
		// (spec 3.2). Grant types a Company chose and keeps while sign-in
		// is off must not leak into the metadata.
		name: "disabled",
		body: `{
			"slug": "portal",
			"organization": {"name": "Portal Co", "domain": "portal.example"},
			"auth": {"disabled": true, "grant_types": ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"]},
			"feedback": {"enabled": false}
		}`,
	},
	{
		// Several domains share one issuer and are one Company (spec 3.2).
		name: "multi-domain",
		body: `{
			"slug": "worldwide",
			"organization": {"name": "Worldwide Shop", "domain": "shop.example"},
			"domains": ["shop.example.co.uk", "de.shop.example"],
			"auth": {"scopes": {"orders:read": "See your orders"}},
			"web": {"browser_join": true}
		}`,
	},
	{
		// The protected resource metadata lists other servers after the
		// issuer, so poppy.json names the issuer in auth.issuer (spec 3.2).
		name: "other-authorization-servers",
		body: `{
			"slug": "bank",
			"organization": {"name": "Example Bank", "domain": "bank.example"},
			"auth": {
				"scopes": {"accounts:read": "See your accounts and balances"},
				"other_authorization_servers": ["https://staff-login.bank.example", "https://idp.partner.example/bank"]
			}
		}`,
	},
	{
		// Conversations that need account access before useful work starts
		// (spec 3.2, access signed_in).
		name: "signed-in",
		body: `{
			"slug": "club",
			"organization": {"name": "Members Club", "domain": "club.example"},
			"auth": {
				"scopes": {"bookings:read": "See your bookings", "bookings:write": "Make and cancel bookings"},
				"scope_hints": {"bookings:write": {"changes": "reversible", "personal_data": false}}
			},
			"conversations": {"enabled": true, "access": "signed_in"}
		}`,
	},
	{
		// Direct Sign-In only: no device authorization endpoint.
		name: "authorization-code-only",
		body: `{
			"slug": "direct",
			"organization": {"name": "Direct Sign-In Only", "domain": "direct.example"},
			"auth": {"grant_types": ["authorization_code"], "scopes": {"profile": "See your profile"}},
			"conversations": {"enabled": false}
		}`,
	},
	{
		// Device Sign-In only: no authorization endpoint, no response types
		// and no PKCE methods.
		name: "device-code-only",
		body: `{
			"slug": "tv",
			"organization": {"name": "Streaming TV", "domain": "tv.example"},
			"auth": {"grant_types": ["urn:ietf:params:oauth:grant-type:device_code"], "scopes": {"watchlist": "See and change your watchlist"}}
		}`,
	},
}

// company decodes the case the way the admin API does (defaults, then the
// body, strictly, then Normalize) and fails unless it validates, so every
// golden file shows a Company the platform can actually hold.
func (c companyCase) company(t testing.TB) *tenant.Company {
	t.Helper()
	b := struct {
		Slug string `json:"slug"`
		tenant.Settings
	}{Settings: tenant.DefaultSettings()}
	dec := json.NewDecoder(bytes.NewReader([]byte(c.body)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&b), "case %s", c.name)
	tenant.Normalize(&b.Settings)
	require.NoError(t, tenant.Validate(b.Slug, &b.Settings, "poppyhost.example", false), "case %s", c.name)
	return &tenant.Company{ID: 1, Slug: b.Slug, Settings: b.Settings}
}

// adminBody is the case's body for the admin API.
func (c companyCase) adminBody(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(c.body), &m))
	return m
}

// surface is everything a Personal Agent can fetch to discover a Company:
// each document keyed by the URL it is served at, null where that URL
// answers 404.
type surface struct {
	Identifier string                     `json:"identifier"`
	Documents  map[string]json.RawMessage `json:"documents"`
}

// Paths of the documents on each Company domain.
const (
	poppyPath = "/.well-known/poppy.json"
	prmPath   = "/.well-known/oauth-protected-resource"
)

// excludedTasksURL is where the excluded tasks document of c is served.
func excludedTasksURL(urls tenant.URLs, c *tenant.Company) string {
	return urls.Base(c) + "/poppy/excluded-tasks.json"
}

// buildSurface runs the builders for every document of c, the way the
// handlers do.
func buildSurface(t testing.TB, c *tenant.Company, urls tenant.URLs) surface {
	t.Helper()
	s := surface{Identifier: urls.Identifier(c), Documents: map[string]json.RawMessage{}}
	put := func(u string, v any, ok bool) {
		if !ok {
			s.Documents[u] = nil
			return
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		s.Documents[u] = b
	}
	for _, d := range c.Settings.AllDomains() {
		put("https://"+d+poppyPath, discovery.BuildPoppyJSON(c, d, urls), true)
		prm, ok := discovery.BuildProtectedResource(c, d, urls)
		put("https://"+d+prmPath, prm, ok)
	}
	as, ok := discovery.BuildASMetadata(c, urls)
	put(urls.ASMetadata(c), as, ok)
	tasks := c.Settings.ExcludedTasks
	put(excludedTasksURL(urls, c), discovery.ExcludedTasksDoc{Tasks: tasks}, len(tasks) > 0)
	return s
}
