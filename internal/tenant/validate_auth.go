package tenant

import (
	"fmt"
)

// ValidScope reports whether s is an OAuth scope-token (RFC 6749 §3.3).
func ValidScope(s string) bool {
	if s == "" || len(s) > maxScopeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c == 0x22 || c == 0x5c || c > 0x7e {
			return false
		}
	}
	return true
}

func (c *checker) auth(a *Auth) {
	if !a.Issuer {
		if a.Disabled {
			c.Add("auth.disabled", "needs an issuer: a Company without one already offers no sign-in")
		}
		if len(a.GrantTypes) > 0 {
			c.Add("auth.grant_types", "need an issuer")
		}
		if len(a.Scopes) > 0 {
			c.Add("auth.scopes", "need an issuer: scopes describe sign-in")
		}
		if len(a.ScopeHints) > 0 {
			c.Add("auth.scope_hints", "need an issuer: hints describe scopes of sign-in")
		}
		if len(a.OtherAuthorizationServers) > 0 {
			c.Add("auth.other_authorization_servers", "need an issuer")
		}
		if a.TokenLifetimes != (TokenLifetimes{}) {
			c.Add("auth.token_lifetimes", "need an issuer")
		}
	}
	switch a.DPoP {
	case "", DPoPOff:
	case DPoPAllowed, DPoPRequired:
		if !a.Issuer {
			c.Add("auth.dpop", "needs an issuer: DPoP binds the access tokens it issues")
		}
	default:
		c.Add("auth.dpop", "must be %s, %s or %s", DPoPOff, DPoPAllowed, DPoPRequired)
	}
	if a.DPoPNonce && !a.BindsTokens() {
		c.Add("auth.dpop_nonce", "needs auth.dpop %s or %s: nonces are part of DPoP proofs", DPoPAllowed, DPoPRequired)
	}
	if t := a.TokenLifetimes.AccessSeconds; t != 0 && (t < 60 || t > 86400) {
		c.Add("auth.token_lifetimes.access_seconds", "must be 0 (the default) or from 60 to 86400")
	}
	if t := a.TokenLifetimes.RefreshSeconds; t != 0 && (t < 3600 || t > 365*86400) {
		c.Add("auth.token_lifetimes.refresh_seconds", "must be 0 (the default) or from 3600 to 31536000")
	}
	seen := map[string]bool{}
	for i, g := range a.GrantTypes {
		f := fmt.Sprintf("auth.grant_types[%d]", i)
		switch {
		case g != GrantAuthorizationCode && g != GrantDeviceCode:
			c.Add(f, "must be %s or %s", GrantAuthorizationCode, GrantDeviceCode)
		case seen[g]:
			c.Add(f, "is listed twice")
		}
		seen[g] = true
	}
	if len(a.Scopes) > maxItems {
		c.Add("auth.scopes", "must list at most %d scopes", maxItems)
	}
	for _, name := range sortedKeys(a.Scopes) {
		f := "auth.scopes." + name
		if !ValidScope(name) {
			c.Add(f, "is not an OAuth scope name (RFC 6749 §3.3: printable ASCII without space, quote or backslash, at most %d characters)", maxScopeLen)
			continue
		}
		c.Text(f, a.Scopes[name], true, maxDescription, true)
	}
	if len(a.ScopeHints) > maxItems {
		c.Add("auth.scope_hints", "must list at most %d scopes", maxItems)
	}
	for _, name := range sortedKeys(a.ScopeHints) {
		f := "auth.scope_hints." + name
		h := a.ScopeHints[name]
		if !ValidScope(name) {
			c.Add(f, "is not an OAuth scope name")
			continue
		}
		switch h.Changes {
		case "none", "reversible", "irreversible":
		case "":
			c.Add(f+".changes", "is required (spec 4.7)")
		default:
			c.Add(f+".changes", "must be none, reversible or irreversible")
		}
		if h.PersonalData == nil {
			c.Add(f+".personal_data", "is required (spec 4.7)")
		}
	}
	if len(a.OtherAuthorizationServers) > 10 {
		c.Add("auth.other_authorization_servers", "must list at most 10 servers")
	}
	others := map[string]bool{}
	for i, s := range a.OtherAuthorizationServers {
		f := fmt.Sprintf("auth.other_authorization_servers[%d]", i)
		if others[s] {
			c.Add(f, "is listed twice")
		}
		others[s] = true
		c.url(f, s)
	}
}
