package tenant

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
	// DPoPNonce requires DPoP proofs to carry a server nonce, at the token
	// endpoint and at every resource (RFC 9449 §8, §9); it needs DPoP.
	DPoPNonce bool `json:"dpop_nonce,omitempty"`
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
