package tenant

import (
	"net/url"
	"slices"
	"time"
)

// Company is one tenant: a business that Personal Agents act at.
type Company struct {
	ID        int64
	Slug      string
	Settings  Settings
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Settings is everything a Company configures. Its JSON form is the admin
// API's Company body (less slug and timestamps).
type Settings struct {
	Organization Organization `json:"organization"`
	// Domains are the Company's domains besides organization.domain; they
	// need an issuer, because without one each domain is its own Company
	// (spec 3.2).
	Domains       []string       `json:"domains"`
	Auth          Auth           `json:"auth"`
	Conversations Conversations  `json:"conversations"`
	Feedback      Feedback       `json:"feedback"`
	ExcludedTasks []ExcludedTask `json:"excluded_tasks"`
	APIs          []API          `json:"apis"`
	// Operations turns on the Operations extension (version 3) at the
	// Company's APIs.
	Operations Operations `json:"operations"`
	// MCP configures the hosted MCP server, listed in poppy.json once the
	// Company registers a tool.
	MCP MCP `json:"mcp"`
	Web Web `json:"web"`
	// Extensions are extensions the Company lists in poppy.json beyond the
	// ones the platform serves itself, keyed by name (spec 3.3).
	Extensions map[string]map[string]any `json:"extensions"`
	SkillIndex *SkillIndex               `json:"skill_index,omitempty"`
	// Agents says which Personal Agents the Company accepts (spec 4.1).
	Agents AgentPolicy `json:"agents"`
	// Sessions configures how long Sessions last (spec 5.5).
	Sessions SessionSettings `json:"sessions"`
	// RateLimits are the Company's request budgets (spec 5.6).
	RateLimits RateLimits `json:"rate_limits"`
}

// Agent acceptance policies.
const (
	AcceptAll      = "all"
	AcceptListed   = "listed"
	AcceptUnlisted = "unlisted"
)

// AgentPolicy decides which Personal Agents a Company accepts, by exact
// client_id: a shared origin does not make two clients one (spec 5.3).
type AgentPolicy struct {
	// Accept is all, listed (only ClientIDs) or unlisted (all but
	// ClientIDs).
	Accept    string   `json:"accept"`
	ClientIDs []string `json:"client_ids"`
	// SignInRefused refuses accepted Personal Agents sign-in, by client_id:
	// the sign-in types refused (authorization_code, the device_code
	// grant), or every one when the list is empty. They get
	// unauthorized_client and continue signed out (spec 4.1); refresh
	// tokens issued earlier keep working.
	SignInRefused map[string][]string `json:"sign_in_refused"`
}

// SignInAllowed reports whether the policy lets clientID use the sign-in
// grant type grant.
func (p AgentPolicy) SignInAllowed(clientID, grant string) bool {
	refused, ok := p.SignInRefused[clientID]
	if !ok {
		return true
	}
	return len(refused) > 0 && !slices.Contains(refused, grant)
}

// Accepts reports whether the policy accepts clientID.
func (p AgentPolicy) Accepts(clientID string) bool {
	listed := false
	for _, id := range p.ClientIDs {
		if id == clientID {
			listed = true
			break
		}
	}
	switch p.Accept {
	case AcceptListed:
		return listed
	case AcceptUnlisted:
		return !listed
	default:
		return true
	}
}

// SessionSettings configures Sessions (spec 5.5: the Company decides how
// long a Session lasts).
type SessionSettings struct {
	// IdleTimeoutSeconds ends a Session unused for this long.
	IdleTimeoutSeconds int `json:"idle_timeout_seconds"`
}

// RateLimits are requests per minute (spec 5.6). Before a Session header
// is verified, requests count against their client address; after, against
// the Personal Agent and the Session.
type RateLimits struct {
	PerAgent   int `json:"per_agent"`
	PerSession int `json:"per_session"`
	PerAddress int `json:"per_address"`
}

// Organization says who the Company is (spec 3.1).
type Organization struct {
	Name    string `json:"name"`
	Domain  string `json:"domain"`
	LogoURI string `json:"logo_uri,omitempty"`
}

// Grant types a Company's issuer can offer (spec 3.2).
const (
	GrantAuthorizationCode = "authorization_code"
	GrantDeviceCode        = "urn:ietf:params:oauth:grant-type:device_code"
	GrantRefreshToken      = "refresh_token"
)

// Auth holds the Company's sign-in settings (spec 3.2, 4.7).
type Auth struct {
	// Issuer says whether the Company has an OAuth issuer at
	// {PUBLIC_URL}/t/{slug}. Without one it offers only signed-out Sessions
	// and is identified by https://{organization.domain}.
	Issuer bool `json:"issuer"`
	// Disabled keeps the issuer but offers Personal Agents no sign-in
	// (auth.disabled in poppy.json).
	Disabled bool `json:"disabled"`
	// GrantTypes are the sign-in types offered: authorization_code (Direct
	// Sign-In) and the device_code grant (Device Sign-In).
	GrantTypes []string             `json:"grant_types,omitempty"`
	Scopes     map[string]string    `json:"scopes"`
	ScopeHints map[string]ScopeHint `json:"scope_hints"`
	// OtherAuthorizationServers are listed after the Company's issuer in its
	// protected resource metadata, such as a server for its employees; with
	// any, poppy.json names the issuer in auth.issuer (spec 3.2).
	OtherAuthorizationServers []string `json:"other_authorization_servers"`
	// TokenLifetimes override the issuer's default token lifetimes.
	TokenLifetimes TokenLifetimes `json:"token_lifetimes"`
	// DPoP is whether access tokens are bound with DPoP (spec 4.5, RFC
	// 9449): DPoPOff (""), DPoPAllowed or DPoPRequired.
	DPoP string `json:"dpop,omitempty"`
}

// DPoP settings (auth.dpop).
const (
	// DPoPOff binds no tokens; resources accept only the Bearer scheme.
	DPoPOff = "off"
	// DPoPAllowed binds the tokens of a token request that carries a DPoP
	// proof and issues Bearer tokens to one that does not; resources
	// accept both schemes.
	DPoPAllowed = "allowed"
	// DPoPRequired refuses token requests without a DPoP proof, except
	// for a service that does not accept DPoP (MCP.BearerTokens).
	DPoPRequired = "required"
)

// BindsTokens reports whether the Company binds access tokens with DPoP
// at all: its issuer publishes dpop_signing_alg_values_supported and its
// resources accept the DPoP scheme.
func (a *Auth) BindsTokens() bool {
	return a.Issuer && (a.DPoP == DPoPAllowed || a.DPoP == DPoPRequired)
}

// TokenLifetimes are in seconds; zero takes the platform's default (15
// minutes for access tokens, 30 days for refresh tokens). A refresh token
// lasts RefreshSeconds from sign-in, however often it is used (spec 4.4).
type TokenLifetimes struct {
	AccessSeconds  int `json:"access_seconds"`
	RefreshSeconds int `json:"refresh_seconds"`
}

// OfferedGrantTypes are the sign-in types Personal Agents may use: none
// without an issuer or with sign-in disabled, both when GrantTypes is
// empty, else GrantTypes.
func (a *Auth) OfferedGrantTypes() []string {
	switch {
	case !a.Issuer || a.Disabled:
		return nil
	case len(a.GrantTypes) == 0:
		return []string{GrantAuthorizationCode, GrantDeviceCode}
	default:
		return a.GrantTypes
	}
}

// ScopeHint says how consequential a scope is (spec 4.7).
type ScopeHint struct {
	Changes      string `json:"changes"`
	PersonalData *bool  `json:"personal_data"`
}

// Conversations configures the Company Agent's conversation endpoint.
type Conversations struct {
	Enabled bool `json:"enabled"`
	// Access is the agent.protocols access hint: session or signed_in.
	Access string `json:"access"`
	// AgentWebhook is the Company Agent's https URL: new Personal Agent
	// messages and other changes are POSTed there. Without one, nobody
	// prepares replies automatically and conversations wait idle for the
	// Company's staff.
	AgentWebhook string `json:"agent_webhook,omitempty"`
	// HandoffTimeoutSeconds: a handoff nobody answers in this time goes
	// back to idle with HandoffUnavailableMessage [300].
	HandoffTimeoutSeconds     int    `json:"handoff_timeout_seconds"`
	HandoffUnavailableMessage string `json:"handoff_unavailable_message,omitempty"`
	// IdleCloseSeconds closes conversations without activity for this
	// long [7 days].
	IdleCloseSeconds int `json:"idle_close_seconds"`
	// RetentionDays keeps events this long after they were added, then
	// prunes them [90].
	RetentionDays int `json:"retention_days"`
}

// Feedback configures the feedback endpoint (spec 9.3).
type Feedback struct {
	Enabled bool `json:"enabled"`
	// Alternatives answer a report of a task that can be done after all
	// (spec 9.3: 200 with an alternative).
	Alternatives []TaskAlternative `json:"alternatives"`
}

// TaskAlternative is the alternative given for reports of one task, matched
// without regard to case or surrounding space.
type TaskAlternative struct {
	Task        string      `json:"task"`
	Alternative Alternative `json:"alternative"`
}

// ExcludedTask is a task the Company chose not to offer (spec 9.1).
type ExcludedTask struct {
	Task        string       `json:"task"`
	Alternative *Alternative `json:"alternative,omitempty"`
}

// Alternative is another way to do a task (spec 9.2).
type Alternative struct {
	Instructions string      `json:"instructions,omitempty"`
	References   []Reference `json:"references,omitempty"`
}

// Reference points to where an alternative can be carried out (spec 9.2).
type Reference struct {
	Type        string `json:"type"`
	URL         string `json:"url"`
	OperationID string `json:"operation_id,omitempty"`
}

// API is an API listed in poppy.json (spec 7).
type API struct {
	Type        string `json:"type"`
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
}

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
}

// Web configures the Company's website.
type Web struct {
	// BrowserJoin publishes web.browser_session_endpoint (spec 6).
	BrowserJoin bool `json:"browser_join"`
	// Origin is where the website is served from: with it, the platform
	// proxies every path of the Company's domains that is not its own to
	// the origin (docs/website.md).
	Origin string `json:"origin,omitempty"`
	// CookieName names the Session's cookie [DefaultWebCookie]; it is the
	// Company's own (spec 6).
	CookieName string `json:"cookie_name,omitempty"`
	// CookieDomain, when set, is the Domain of the Session's cookie, a
	// domain of the Company or one of its parents, so the cookie covers its
	// hosts; without it the cookie is host-only.
	CookieDomain string `json:"cookie_domain,omitempty"`
	// LandingPath is where a joined browser is sent ["/"].
	LandingPath string `json:"landing_path,omitempty"`
	// ScopeRules say which scopes a proxied request needs, by path.
	ScopeRules []WebScopeRule `json:"scope_rules"`
}

// DefaultWebCookie is the Session cookie's name when the Company names
// none: host-only, secure, on every path. With a cookie domain, which
// __Host- cookies may not have, it is DefaultDomainWebCookie.
const (
	DefaultWebCookie       = "__Host-poppy_session"
	DefaultDomainWebCookie = "__Secure-poppy_session"
)

// WebScopeRule makes requests to the website whose path starts with Path
// (and whose method is one of Methods, or any without) need Scopes. The
// longest matching Path decides.
type WebScopeRule struct {
	Path    string   `json:"path"`
	Methods []string `json:"methods,omitempty"`
	Scopes  []string `json:"scopes"`
}

// Cookie is the Session cookie's name.
func (w *Web) Cookie() string {
	switch {
	case w.CookieName != "":
		return w.CookieName
	case w.CookieDomain != "":
		return DefaultDomainWebCookie
	default:
		return DefaultWebCookie
	}
}

// Landing is the path a joined browser is sent to.
func (w *Web) Landing() string {
	if w.LandingPath == "" {
		return "/"
	}
	return w.LandingPath
}

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

// DefaultSettings are the settings of a new Company before its body is
// applied: an issuer offering both sign-in types (grant types left empty,
// see OfferedGrantTypes), conversations and feedback on, every Personal
// Agent accepted (DESIGN.md).
func DefaultSettings() Settings {
	return Settings{
		Auth:          Auth{Issuer: true},
		Conversations: Conversations{Enabled: true, Access: "session"},
		Feedback:      Feedback{Enabled: true},
		Agents:        AgentPolicy{Accept: AcceptAll},
		Sessions:      SessionSettings{IdleTimeoutSeconds: 30 * 24 * 3600},
		RateLimits:    RateLimits{PerAgent: 6000, PerSession: 600, PerAddress: 1200},
	}
}

// AllDomains returns organization.domain followed by the extra domains.
func (s *Settings) AllDomains() []string {
	return append([]string{s.Organization.Domain}, s.Domains...)
}

// HasDomain reports whether d is one of the Company's domains.
func (s *Settings) HasDomain(d string) bool {
	for _, x := range s.AllDomains() {
		if x == d {
			return true
		}
	}
	return false
}

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
