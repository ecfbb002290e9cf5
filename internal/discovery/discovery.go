package discovery

import (
	"slices"
	"sort"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// ProtocolVersion is the Poppy draft this platform implements.
const ProtocolVersion = "0.3"

// PoppyJSON is the poppy.json document (spec 3.1). Absent settings leave
// their members out.
type PoppyJSON struct {
	ProtocolVersion string              `json:"protocol_version"`
	Organization    tenant.Organization `json:"organization"`
	Auth            *AuthMember         `json:"auth,omitempty"`
	Agent           *AgentMember        `json:"agent,omitempty"`
	Web             *WebMember          `json:"web,omitempty"`
	Feedback        *EndpointMember     `json:"feedback,omitempty"`
	ExcludedTasks   *URLMember          `json:"excluded_tasks,omitempty"`
	APIs            []tenant.API        `json:"apis,omitempty"`
	Extensions      map[string]any      `json:"extensions,omitempty"`
	SkillIndex      *tenant.SkillIndex  `json:"skill_index,omitempty"`
}

// AuthMember is poppy.json's auth (spec 3.2, 4.7).
type AuthMember struct {
	Issuer     string                      `json:"issuer,omitempty"`
	Disabled   bool                        `json:"disabled,omitempty"`
	Scopes     map[string]string           `json:"scopes,omitempty"`
	ScopeHints map[string]tenant.ScopeHint `json:"scope_hints,omitempty"`
}

// AgentMember is poppy.json's agent (spec 8.1).
type AgentMember struct {
	Protocols []Protocol `json:"protocols"`
}

// Protocol is one conversation protocol entry.
type Protocol struct {
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
	Access   string `json:"access,omitempty"`
}

// WebMember is poppy.json's web (spec 6).
type WebMember struct {
	BrowserSessionEndpoint string `json:"browser_session_endpoint"`
}

// EndpointMember is a member holding one endpoint URL.
type EndpointMember struct {
	Endpoint string `json:"endpoint"`
}

// URLMember is a member holding one document URL.
type URLMember struct {
	URL string `json:"url"`
}

// BuildPoppyJSON returns the poppy.json that domain serves for c. Each
// domain's document names that domain (spec 3, check 1).
func BuildPoppyJSON(c *tenant.Company, domain string, urls tenant.URLs) PoppyJSON {
	s := &c.Settings
	base := urls.Base(c)
	doc := PoppyJSON{
		ProtocolVersion: ProtocolVersion,
		Organization:    tenant.Organization{Name: s.Organization.Name, Domain: domain, LogoURI: s.Organization.LogoURI},
		APIs:            s.APIs,
		SkillIndex:      s.SkillIndex,
	}
	if s.Auth.Issuer {
		a := &AuthMember{Disabled: s.Auth.Disabled, Scopes: s.Auth.Scopes, ScopeHints: s.Auth.ScopeHints}
		if len(s.Auth.OtherAuthorizationServers) > 0 {
			// The protected resource metadata lists several servers, so
			// auth.issuer says which one Personal Agents use (spec 3.2).
			a.Issuer = urls.Issuer(c)
		}
		if a.Issuer != "" || a.Disabled || len(a.Scopes) > 0 || len(a.ScopeHints) > 0 {
			doc.Auth = a
		}
	}
	if s.Conversations.Enabled {
		p := Protocol{Type: "poppy", Endpoint: base + "/poppy/conversations"}
		if s.Conversations.Access == "signed_in" {
			p.Access = "signed_in"
		}
		doc.Agent = &AgentMember{Protocols: []Protocol{p}}
	}
	if s.Web.BrowserJoin {
		doc.Web = &WebMember{BrowserSessionEndpoint: "https://" + domain + "/poppy/browser-session"}
	}
	if s.Feedback.Enabled {
		doc.Feedback = &EndpointMember{Endpoint: base + "/poppy/feedback"}
	}
	if len(s.ExcludedTasks) > 0 {
		doc.ExcludedTasks = &URLMember{URL: base + "/poppy/excluded-tasks.json"}
	}
	if len(s.Extensions) > 0 || s.Operations.Enabled {
		doc.Extensions = map[string]any{}
		for name, ext := range s.Extensions {
			doc.Extensions[name] = ext
		}
	}
	if s.Operations.Enabled {
		// One object with its version, as spec 3.3 makes every entry
		// (not the extension excerpt's array, docs/decisions.md). The
		// endpoint only when the website asks for approval through the
		// platform (extension 2).
		entry := map[string]string{"version": "3"}
		if s.Operations.Web {
			entry["endpoint"] = base + operations.EndpointPath
		}
		doc.Extensions["operations"] = entry
	}
	return doc
}

// ProtectedResource is a domain's RFC 9728 metadata (spec 3.2).
type ProtectedResource struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
}

// BuildProtectedResource returns domain's protected resource metadata, and
// false when the Company has no issuer (the domain then answers 404).
func BuildProtectedResource(c *tenant.Company, domain string, urls tenant.URLs) (ProtectedResource, bool) {
	if !c.Settings.Auth.Issuer {
		return ProtectedResource{}, false
	}
	servers := append([]string{urls.Issuer(c)}, c.Settings.Auth.OtherAuthorizationServers...)
	return ProtectedResource{
		Resource:             "https://" + domain,
		AuthorizationServers: servers,
		// Tokens are accepted only in the Authorization header (spec 5.6).
		BearerMethodsSupported: []string{"header"},
	}, true
}

// ASMetadata is the issuer's RFC 8414 metadata with the members spec 3.2
// and 4.8 call for. Lists that would be empty are left out: RFC 8414 §3.2
// says claims with zero elements MUST be omitted. response_types_supported
// is REQUIRED (RFC 8414 §2), so it is never empty: ["code"] with Direct
// Sign-In, otherwise ["none"], the registered response type that returns
// no credential (docs/decisions.md, issue 18).
//
// jwks_uri holds the keys that sign access tokens.
// introspection_endpoint is for the Company's own backends, which call it
// with a Company API key as a bearer token (RFC 7662 §2.1);
// introspection_endpoint_auth_methods_supported is left out, so by RFC 8414
// §2 they learn that "by other means" (api/openapi.yaml).
type ASMetadata struct {
	Issuer                                     string   `json:"issuer"`
	AuthorizationEndpoint                      string   `json:"authorization_endpoint,omitempty"`
	TokenEndpoint                              string   `json:"token_endpoint"`
	JWKSURI                                    string   `json:"jwks_uri"`
	RevocationEndpoint                         string   `json:"revocation_endpoint"`
	IntrospectionEndpoint                      string   `json:"introspection_endpoint"`
	DeviceAuthorizationEndpoint                string   `json:"device_authorization_endpoint,omitempty"`
	GrantTypesSupported                        []string `json:"grant_types_supported"`
	ResponseTypesSupported                     []string `json:"response_types_supported"`
	ScopesSupported                            []string `json:"scopes_supported,omitempty"`
	ProtectedResources                         []string `json:"protected_resources"`
	TokenEndpointAuthMethodsSupported          []string `json:"token_endpoint_auth_methods_supported"`
	TokenEndpointAuthSigningAlgValuesSupported []string `json:"token_endpoint_auth_signing_alg_values_supported"`
	RevocationEndpointAuthMethodsSupported     []string `json:"revocation_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported,omitempty"`
	DPoPSigningAlgValuesSupported              []string `json:"dpop_signing_alg_values_supported,omitempty"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported"`
	ClientIDMetadataDocumentSupported          bool     `json:"client_id_metadata_document_supported"`
	// RegistrationEndpoint is Dynamic Client Registration (RFC 7591), for
	// MCP clients without a client metadata document, where the Company
	// allows it (AddMCPClients).
	RegistrationEndpoint string `json:"registration_endpoint,omitempty"`
}

// BuildASMetadata returns the issuer metadata of c, and false when c has no
// issuer.
func BuildASMetadata(c *tenant.Company, urls tenant.URLs) (ASMetadata, bool) {
	s := &c.Settings
	if !s.Auth.Issuer {
		return ASMetadata{}, false
	}
	iss := urls.Issuer(c)
	m := ASMetadata{
		Issuer:                            iss,
		TokenEndpoint:                     iss + "/oauth/token",
		JWKSURI:                           iss + "/oauth/jwks.json",
		RevocationEndpoint:                iss + "/oauth/revoke",
		IntrospectionEndpoint:             iss + "/oauth/introspect",
		GrantTypesSupported:               []string{tenant.GrantRefreshToken},
		ResponseTypesSupported:            []string{"none"},
		ScopesSupported:                   sortedScopes(s.Auth.Scopes),
		TokenEndpointAuthMethodsSupported: []string{"private_key_jwt"},
		TokenEndpointAuthSigningAlgValuesSupported: []string{"ES256", "PS384"},
		RevocationEndpointAuthMethodsSupported:     []string{"private_key_jwt"},
		AuthorizationResponseIssParameterSupported: true,
		ClientIDMetadataDocumentSupported:          true,
	}
	for _, d := range s.AllDomains() {
		m.ProtectedResources = append(m.ProtectedResources, "https://"+d)
	}
	if s.Auth.BindsTokens() {
		// RFC 9449 §5.1: agents send proofs, so that tokens are bound.
		m.DPoPSigningAlgValuesSupported = dpop.Algs
	}
	for _, g := range s.Auth.OfferedGrantTypes() {
		m.GrantTypesSupported = append(m.GrantTypesSupported, g)
		switch g {
		case tenant.GrantAuthorizationCode:
			m.AuthorizationEndpoint = iss + "/oauth/authorize"
			m.ResponseTypesSupported = []string{"code"}
			m.CodeChallengeMethodsSupported = []string{"S256"}
		case tenant.GrantDeviceCode:
			m.DeviceAuthorizationEndpoint = iss + "/oauth/device_authorization"
		}
	}
	return m, true
}

// OffersMCPClients reports whether c's issuer signs in MCP clients that are
// not Personal Agents for its hosted MCP server (spec 7, "Other MCP
// clients"), given that the server exists (it has tools): the setting
// mcp.other_clients and the authorization code sign-in they use.
func OffersMCPClients(c *tenant.Company, hasTools bool) bool {
	return hasTools && c.Settings.Auth.Issuer && c.Settings.MCP.AcceptsOtherClients() &&
		slices.Contains(c.Settings.Auth.OfferedGrantTypes(), tenant.GrantAuthorizationCode)
}

// AddMCPClients adds to c's metadata what MCP clients that are not
// Personal Agents need: public clients (token_endpoint_auth_method none)
// at the token and revocation endpoints, and the registration endpoint
// where c takes self-registered clients (mcp.dynamic_registration).
// client_id_metadata_document_supported is already there, for Personal
// Agents and them alike.
func (m *ASMetadata) AddMCPClients(c *tenant.Company) {
	m.TokenEndpointAuthMethodsSupported = append(m.TokenEndpointAuthMethodsSupported, "none")
	m.RevocationEndpointAuthMethodsSupported = append(m.RevocationEndpointAuthMethodsSupported, "none")
	if c.Settings.MCP.DynamicRegistration {
		m.RegistrationEndpoint = m.Issuer + "/oauth/register"
	}
}

// ExcludedTasksDoc is the excluded tasks document (spec 9.1).
type ExcludedTasksDoc struct {
	Tasks []tenant.ExcludedTask `json:"tasks"`
}

func sortedScopes(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
