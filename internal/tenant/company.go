package tenant

import (
	"net/url"
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
	Web           Web            `json:"web"`
	// Extensions are extensions the Company lists in poppy.json beyond the
	// ones the platform serves itself, keyed by name (spec 3.3).
	Extensions map[string]map[string]any `json:"extensions"`
	SkillIndex *SkillIndex               `json:"skill_index,omitempty"`
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
	GrantTypes []string             `json:"grant_types"`
	Scopes     map[string]string    `json:"scopes"`
	ScopeHints map[string]ScopeHint `json:"scope_hints"`
	// OtherAuthorizationServers are listed after the Company's issuer in its
	// protected resource metadata, such as a server for its employees; with
	// any, poppy.json names the issuer in auth.issuer (spec 3.2).
	OtherAuthorizationServers []string `json:"other_authorization_servers"`
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
}

// Feedback configures the feedback endpoint (spec 9.3).
type Feedback struct {
	Enabled bool `json:"enabled"`
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

// Web configures the Company's website.
type Web struct {
	// BrowserJoin publishes web.browser_session_endpoint (spec 6).
	BrowserJoin bool `json:"browser_join"`
	// Origin is where the website is served from, for proxying.
	Origin string `json:"origin,omitempty"`
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
// applied: an issuer, conversations and feedback on (DESIGN.md). Grant
// types are left unset so that Normalize can pick them from the final
// auth settings: both sign-in types with an issuer on, none otherwise.
func DefaultSettings() Settings {
	return Settings{
		Auth:          Auth{Issuer: true},
		Conversations: Conversations{Enabled: true, Access: "session"},
		Feedback:      Feedback{Enabled: true},
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
