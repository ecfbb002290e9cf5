package tenant

import "net/url"

// URLs derives every URL of a Company from the platform's public origin.
type URLs struct {
	Public *url.URL
}

// Base is {PUBLIC_URL}/t/{slug}: the issuer when the Company has one, and
// the root of its protocol endpoints either way.
func (u URLs) Base(c *Company) string {
	return u.Public.String() + "/t/" + c.Slug
}

// MCPResource is the resource of the Company's hosted MCP server, whose
// tokens are valid only there (spec 4.5).
func (u URLs) MCPResource(c *Company) string { return u.Base(c) + "/mcp" }

// Identifier is the Company's identifier (spec 3.2): its issuer, or
// https://{organization.domain} without one.
func (u URLs) Identifier(c *Company) string {
	if c.Settings.Auth.Issuer {
		return u.Base(c)
	}
	return "https://" + c.Settings.Organization.Domain
}

// Issuer returns the issuer URL, or "" when the Company has none.
func (u URLs) Issuer(c *Company) string {
	if !c.Settings.Auth.Issuer {
		return ""
	}
	return u.Base(c)
}

// ASMetadata is where RFC 8414 §3.1 puts the issuer's metadata.
func (u URLs) ASMetadata(c *Company) string {
	return u.Public.String() + "/.well-known/oauth-authorization-server/t/" + c.Slug
}
