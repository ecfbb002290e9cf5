package tenant

// Operations configures the Operations extension (extension 2).
type Operations struct {
	// Enabled lists operations version 3 in poppy.json: the Company's
	// origins may answer gateway calls with proposals.
	Enabled bool `json:"enabled"`
	// Web turns operations on for the website: poppy.json lists the
	// extension's endpoint, which needs web.origin and web.browser_join.
	Web bool `json:"web"`
	// ApprovalHook, when set, is the HTTPS URL an approval that passed the
	// checks is POSTed to before anything is recorded or performed; it
	// answers 204 or a decline (DESIGN.md, the origin contract).
	ApprovalHook string `json:"approval_hook,omitempty"`
}

// MCP configures the Company's hosted MCP server at {issuer}/mcp.
type MCP struct {
	// SignedOut lets Personal Agents call it with the Session header and
	// no access token (spec 7), for the tools that need no scope.
	SignedOut bool `json:"signed_out"`
	// BearerTokens says the MCP server does not accept DPoP: tokens for it
	// are never bound, even where the Company binds the others (spec 7).
	BearerTokens bool `json:"bearer_tokens,omitempty"`
	// Description is its description in poppy.json.
	Description string `json:"description,omitempty"`
	// OtherClients lets MCP clients that are not Personal Agents sign in
	// at the issuer with MCP's own authorization (spec 7, "Other MCP
	// clients"): public clients identified by a client metadata document,
	// authorization code with PKCE, tokens for this server only. Absent is
	// on; it needs an issuer that offers the authorization code sign-in.
	OtherClients *bool `json:"other_clients,omitempty"`
	// SignedOutClients lets clients without a Session call the tools that
	// need no scope, and list the tools, with no access token (spec 7,
	// "serve signed-out requests that use no Session claims"), rate-limited
	// by address.
	SignedOutClients bool `json:"signed_out_clients,omitempty"`
	// DynamicRegistration lets MCP clients without a client metadata
	// document register themselves at the issuer (RFC 7591), as public
	// clients for this server only, while OtherClients is on. Off by
	// default.
	DynamicRegistration bool `json:"dynamic_registration,omitempty"`
}

// AcceptsOtherClients reports whether the issuer signs in MCP clients that
// are not Personal Agents for this server (OtherClients, on by default).
func (m MCP) AcceptsOtherClients() bool { return m.OtherClients == nil || *m.OtherClients }

// SkillIndexSchema is the Agent Skills discovery schema identifier that
// spec 9.4 requires.
const SkillIndexSchema = "https://schemas.agentskills.io/discovery/0.2.0/schema.json"

// SkillIndex is an Agent Skills discovery index (spec 9.4).
type SkillIndex struct {
	Schema string  `json:"$schema"`
	Skills []Skill `json:"skills"`
}

// Skill is one entry of a skill index.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Type        string `json:"type"`
	URL         string `json:"url"`
	Digest      string `json:"digest"`
}
