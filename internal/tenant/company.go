package tenant

import (
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
	// Console configures the Company console.
	Console ConsoleSettings `json:"console"`
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
