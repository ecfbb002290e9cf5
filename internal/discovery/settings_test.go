package discovery_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/discovery"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestASMetadataGrantTypes: grant_types_supported is refresh_token followed
// by the sign-in types the Company offers (tenant.Auth.OfferedGrantTypes):
// both when auth.grant_types is absent or empty, the list when given, and
// none while sign-in is disabled, whatever list is kept.
func TestASMetadataGrantTypes(t *testing.T) {
	t.Parallel()
	const (
		code   = tenant.GrantAuthorizationCode
		device = tenant.GrantDeviceCode
	)
	tests := []struct {
		name string
		auth tenant.Auth
		want []string
	}{
		{"absent", tenant.Auth{Issuer: true}, []string{"refresh_token", code, device}},
		{"empty", tenant.Auth{Issuer: true, GrantTypes: []string{}}, []string{"refresh_token", code, device}},
		{"device only", tenant.Auth{Issuer: true, GrantTypes: []string{device}}, []string{"refresh_token", device}},
		{"both, device first", tenant.Auth{Issuer: true, GrantTypes: []string{device, code}}, []string{"refresh_token", device, code}},
		{"disabled, absent", tenant.Auth{Issuer: true, Disabled: true}, []string{"refresh_token"}},
		{"disabled, list kept", tenant.Auth{Issuer: true, Disabled: true, GrantTypes: []string{code, device}}, []string{"refresh_token"}},
	}
	for _, tt := range tests {
		c := &tenant.Company{ID: 1, Slug: "acme", Settings: tenant.Settings{
			Organization: tenant.Organization{Name: "Acme", Domain: "acme.example"}, Auth: tt.auth}}
		m, ok := discovery.BuildASMetadata(c, goldenURLs)
		require.True(t, ok, tt.name)
		require.Equal(t, tt.want, m.GrantTypesSupported, tt.name)
		has := func(g string) bool { return slices.Contains(tt.want, g) }
		require.Equal(t, has(code), m.AuthorizationEndpoint != "", tt.name)
		// RFC 8414 §2: response_types_supported is REQUIRED; never empty
		// (§3.2), and code only where it is offered.
		wantTypes := []string{"none"}
		if has(code) {
			wantTypes = []string{"code"}
		}
		require.Equal(t, wantTypes, m.ResponseTypesSupported, tt.name)
		require.Equal(t, has(code), len(m.CodeChallengeMethodsSupported) > 0, tt.name)
		require.Equal(t, has(device), m.DeviceAuthorizationEndpoint != "", tt.name)
	}

	// Without an issuer there is no metadata, whatever grant types say.
	c := &tenant.Company{ID: 1, Slug: "acme", Settings: tenant.Settings{
		Organization: tenant.Organization{Name: "Acme", Domain: "acme.example"}, Auth: tenant.Auth{GrantTypes: []string{}}}}
	_, ok := discovery.BuildASMetadata(c, goldenURLs)
	require.False(t, ok)
}

// TestPrivateSettingsStayPrivate: which Personal Agents a Company accepts,
// its Session and rate limit settings and its feedback alternatives are
// not published in any discovery document. A feedback alternative is only
// the answer to a report of its task (spec 9.3).
func TestPrivateSettingsStayPrivate(t *testing.T) {
	t.Parallel()
	c := companyCase{name: "private", body: `{
		"slug": "private",
		"organization": {"name": "Private Shop", "domain": "private.example"},
		"apis": [{"type": "openapi", "url": "https://api.private.example/openapi.json"}],
		"excluded_tasks": [{"task": "Close an account"}],
		"feedback": {"alternatives": [{"task": "Pay with a gift card", "alternative": {
			"instructions": "SECRET-INSTRUCTIONS",
			"references": [{"type": "openapi", "url": "https://api.private.example/openapi.json", "operation_id": "SECRET-OPERATION"}]}}]},
		"agents": {"accept": "unlisted", "client_ids": ["https://blocked-agent.example/agent.json"]},
		"sessions": {"idle_timeout_seconds": 4321},
		"rate_limits": {"per_agent": 9876, "per_session": 8765, "per_address": 7654}
	}`}.company(t)
	raw := string(marshalSurface(t, buildSurface(t, c, goldenURLs)))
	for _, secret := range []string{"Pay with a gift card", "SECRET-INSTRUCTIONS", "SECRET-OPERATION", "alternatives",
		"blocked-agent", "client_ids", "unlisted", "4321", "9876", "8765", "7654", "rate_limits", "idle_timeout"} {
		require.NotContains(t, raw, secret)
	}
	// The documents are still there.
	require.True(t, strings.Contains(raw, `"name": "Private Shop"`), raw)
	require.Contains(t, raw, "/t/private/poppy/feedback")
}

// TestASMetadataDPoP: dpop_signing_alg_values_supported is published
// exactly when the Company binds tokens (auth.dpop allowed or required;
// RFC 9449 §5.1), so agents send proofs only there.
func TestASMetadataDPoP(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]bool{"": false, tenant.DPoPOff: false, tenant.DPoPAllowed: true, tenant.DPoPRequired: true} {
		c := &tenant.Company{ID: 1, Slug: "acme", Settings: tenant.Settings{
			Organization: tenant.Organization{Name: "Acme", Domain: "acme.example"}, Auth: tenant.Auth{Issuer: true, DPoP: setting}}}
		m, ok := discovery.BuildASMetadata(c, goldenURLs)
		require.True(t, ok)
		require.Equal(t, want, slices.Contains(m.DPoPSigningAlgValuesSupported, "ES256"), "auth.dpop %q", setting)
	}
}
