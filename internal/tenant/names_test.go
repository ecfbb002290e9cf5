package tenant_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

func TestValidHostName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		want bool
	}{
		{"example.com", true},
		{"shop.example.co.uk", true},
		{"a.b", true},
		{"xn--bcher-kva.example", true},
		{"1shop.example", true},
		{"shop.123.example", true},
		{"a-b.example", true},
		{strings.Repeat("a", 63) + ".example", true},
		{"", false},
		{"localhost", false},
		{"Example.com", false},
		{"example.com.", false},
		{".example.com", false},
		{"example..com", false},
		{"-shop.example", false},
		{"shop-.example", false},
		{"sh_op.example", false},
		{"example.com:443", false},
		{"example.com/path", false},
		{"https://example.com", false},
		{"user@example.com", false},
		{"exa mple.com", false},
		{"bücher.example", false},
		{strings.Repeat("a", 64) + ".example", false},
		{"192.0.2.1", false},
		{"127.1", false},
		{"10.0.1", false},
		{"example.0x7f", false},
		{"example.0x", false},
		{"example.123", false},
		{"::1", false},
		{"[::1]", false},
		{"2001:db8::1", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tenant.ValidHostName(tt.host), "%q", tt.host)
	}
	// The length limit is 253 characters.
	long := strings.Repeat("abcdefghi.", 25) + "abc" // 253
	require.Len(t, long, 253)
	require.True(t, tenant.ValidHostName(long))
	require.False(t, tenant.ValidHostName("a"+long))
}

func TestValidSlug(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"a", "acme", "acme-shop", "a1", "1a", "0", strings.Repeat("a", 63)} {
		require.True(t, tenant.ValidSlug(s), "%q", s)
	}
	for _, s := range []string{"", "-a", "a-", "A", "a_b", "a.b", "a/b", "a b", "é", strings.Repeat("a", 64)} {
		require.False(t, tenant.ValidSlug(s), "%q", s)
	}
}

func TestValidScope(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"orders", "orders:read", "https://scopes.example/x", "!", "~", "a[0]{}|^_`", strings.Repeat("s", 128)} {
		require.True(t, tenant.ValidScope(s), "%q", s)
	}
	for _, s := range []string{"", " ", "a b", `a"b`, `a\b`, "a\tb", "é", "a\x7f", strings.Repeat("s", 129)} {
		require.False(t, tenant.ValidScope(s), "%q", s)
	}
}

func TestValidExtensionName(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"mediated-sign-in", "example.com/gift-wrap", "example.com/a/b", "shop.example.com/A.b~c_d-e"} {
		require.True(t, tenant.ValidExtensionName(s), "%q", s)
	}
	for _, s := range []string{"", "gift-wrap", "operations", "example.com", "example.com/", "example.com//x",
		"example.com/x/", "Example.com/x", "localhost/x", "127.1/x", "example.com/gift wrap", "example.com/é",
		"example.com/" + strings.Repeat("x", 200)} {
		require.False(t, tenant.ValidExtensionName(s), "%q", s)
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	s := tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "", Domain: "Bad"}
	s.Auth.Issuer = false
	s.Domains = []string{"x.example"}
	tenant.Normalize(&s)
	err := tenant.Validate("Bad Slug", &s, "poppyhost.test", false)
	var e *httpx.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, httpx.CodeInvalidRequest, e.Code)
	var fields []string
	for _, f := range e.Fields {
		fields = append(fields, f.Field)
	}
	require.Equal(t, []string{"slug", "organization.name", "organization.domain", "domains"}, fields)
	require.Contains(t, e.Description, "(and 3 more)")
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	// Grant types are left as they are: empty means both sign-in types
	// (Auth.OfferedGrantTypes), so nothing depends on other settings.
	for _, grants := range [][]string{nil, {}, {tenant.GrantDeviceCode}} {
		for _, auth := range []tenant.Auth{{Issuer: true}, {Issuer: true, Disabled: true}, {}} {
			auth.GrantTypes = grants
			s := tenant.Settings{Auth: auth}
			tenant.Normalize(&s)
			require.Equal(t, grants, s.Auth.GrantTypes, "%+v", auth)
		}
	}

	// Absent lists and maps become empty ones, and absent choices their
	// defaults.
	var s tenant.Settings
	tenant.Normalize(&s)
	require.Equal(t, "session", s.Conversations.Access)
	require.Equal(t, []string{}, s.Domains)
	require.Equal(t, map[string]string{}, s.Auth.Scopes)
	require.Equal(t, map[string]tenant.ScopeHint{}, s.Auth.ScopeHints)
	require.Equal(t, []string{}, s.Auth.OtherAuthorizationServers)
	require.Equal(t, []tenant.ExcludedTask{}, s.ExcludedTasks)
	require.Equal(t, []tenant.API{}, s.APIs)
	require.Equal(t, map[string]map[string]any{}, s.Extensions)
	require.Equal(t, []tenant.TaskAlternative{}, s.Feedback.Alternatives)
	require.Equal(t, tenant.AcceptAll, s.Agents.Accept)
	require.Equal(t, []string{}, s.Agents.ClientIDs)
	require.Equal(t, map[string][]string{}, s.Agents.SignInRefused)
	require.Nil(t, s.SkillIndex, "no skill index stays none")
	// Numbers have no "absent": their defaults come from DefaultSettings,
	// which a body is decoded onto.
	require.Zero(t, s.Sessions.IdleTimeoutSeconds)
	require.Zero(t, s.RateLimits)
	require.Zero(t, s.Auth.TokenLifetimes, "0 is the platform's default lifetime")

	// A skill index without skills gets an empty list.
	s = tenant.Settings{SkillIndex: &tenant.SkillIndex{Schema: tenant.SkillIndexSchema}}
	tenant.Normalize(&s)
	require.Equal(t, []tenant.Skill{}, s.SkillIndex.Skills)

	// Values given are kept.
	agents := func() tenant.AgentPolicy {
		return tenant.AgentPolicy{Accept: tenant.AcceptListed, ClientIDs: []string{"https://agent.example/a.json"},
			SignInRefused: map[string][]string{"https://agent.example/a.json": {tenant.GrantDeviceCode}}}
	}
	s = tenant.Settings{
		Auth:          tenant.Auth{TokenLifetimes: tenant.TokenLifetimes{AccessSeconds: 300, RefreshSeconds: 3600}},
		Conversations: tenant.Conversations{Access: "signed_in"},
		Agents:        agents(),
		Feedback:      tenant.Feedback{Alternatives: []tenant.TaskAlternative{{Task: "T"}}},
	}
	tenant.Normalize(&s)
	require.Equal(t, "signed_in", s.Conversations.Access)
	require.Equal(t, agents(), s.Agents)
	require.Equal(t, tenant.TokenLifetimes{AccessSeconds: 300, RefreshSeconds: 3600}, s.Auth.TokenLifetimes)
	require.Len(t, s.Feedback.Alternatives, 1)

	// The defaults with nothing changed are a valid Company with an issuer
	// offering both sign-in types.
	s = tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "Acme", Domain: "acme.example"}
	tenant.Normalize(&s)
	require.NoError(t, tenant.Validate("acme", &s, "poppyhost.test", false))
	require.Nil(t, s.Auth.GrantTypes)
	require.Equal(t, []string{tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}, s.Auth.OfferedGrantTypes())
	require.True(t, s.Conversations.Enabled)
	require.True(t, s.Feedback.Enabled)
	require.Equal(t, tenant.AcceptAll, s.Agents.Accept)
	require.Equal(t, map[string][]string{}, s.Agents.SignInRefused)
	require.Zero(t, s.Auth.TokenLifetimes)
	require.Equal(t, 30*24*3600, s.Sessions.IdleTimeoutSeconds)
	require.Equal(t, tenant.RateLimits{PerAgent: 6000, PerSession: 600, PerAddress: 1200}, s.RateLimits)
}

func TestOfferedGrantTypes(t *testing.T) {
	t.Parallel()
	both := []string{tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}
	tests := []struct {
		name string
		auth tenant.Auth
		want []string
	}{
		{"issuer, absent", tenant.Auth{Issuer: true}, both},
		{"issuer, empty", tenant.Auth{Issuer: true, GrantTypes: []string{}}, both},
		{"issuer, one", tenant.Auth{Issuer: true, GrantTypes: []string{tenant.GrantDeviceCode}}, []string{tenant.GrantDeviceCode}},
		{"issuer, both in another order", tenant.Auth{Issuer: true, GrantTypes: []string{tenant.GrantDeviceCode, tenant.GrantAuthorizationCode}},
			[]string{tenant.GrantDeviceCode, tenant.GrantAuthorizationCode}},
		{"disabled, absent", tenant.Auth{Issuer: true, Disabled: true}, nil},
		{"disabled, kept list", tenant.Auth{Issuer: true, Disabled: true, GrantTypes: []string{tenant.GrantAuthorizationCode}}, nil},
		{"no issuer", tenant.Auth{}, nil},
		{"no issuer, empty", tenant.Auth{GrantTypes: []string{}}, nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.auth.OfferedGrantTypes(), tt.name)
	}
}

func TestAgentPolicyAccepts(t *testing.T) {
	t.Parallel()
	const (
		listed   = "https://agent.example/agent.json"
		unlisted = "https://other.example/agent.json"
	)
	ids := []string{listed, "https://agent.example/b.json"}
	tests := []struct {
		policy tenant.AgentPolicy
		want   map[string]bool
	}{
		{tenant.AgentPolicy{Accept: tenant.AcceptAll}, map[string]bool{listed: true, unlisted: true}},
		{tenant.AgentPolicy{Accept: tenant.AcceptAll, ClientIDs: ids}, map[string]bool{listed: true, unlisted: true}},
		{tenant.AgentPolicy{Accept: tenant.AcceptListed, ClientIDs: ids}, map[string]bool{listed: true, unlisted: false}},
		{tenant.AgentPolicy{Accept: tenant.AcceptListed}, map[string]bool{listed: false, unlisted: false}},
		{tenant.AgentPolicy{Accept: tenant.AcceptUnlisted, ClientIDs: ids}, map[string]bool{listed: false, unlisted: true}},
		{tenant.AgentPolicy{Accept: tenant.AcceptUnlisted}, map[string]bool{listed: true, unlisted: true}},
		// Exact client_ids only: a shared origin, another path, case or a
		// trailing slash does not make two clients one (spec 5.3).
		{tenant.AgentPolicy{Accept: tenant.AcceptListed, ClientIDs: ids}, map[string]bool{
			"https://agent.example/": false, "https://agent.example/agent.json/": false,
			"https://AGENT.example/agent.json": false, "https://agent.example/agent.json?x": false, "": false}},
	}
	for _, tt := range tests {
		for id, want := range tt.want {
			require.Equal(t, want, tt.policy.Accepts(id), "%+v accepts %q", tt.policy, id)
		}
	}
}

// TestAgentPolicySignInAllowed: sign_in_refused lists, by exact
// client_id, the sign-in types refused, and an empty list refuses both
// (spec 4.1). The accept policy is a separate check (Accepts).
func TestAgentPolicySignInAllowed(t *testing.T) {
	t.Parallel()
	const (
		everything = "https://agent.example/refused.json"
		deviceOnly = "https://agent.example/no-device.json"
		other      = "https://agent.example/other.json"
	)
	p := tenant.AgentPolicy{Accept: tenant.AcceptAll, SignInRefused: map[string][]string{
		everything: {},
		deviceOnly: {tenant.GrantDeviceCode},
	}}
	tests := []struct {
		name     string
		policy   tenant.AgentPolicy
		clientID string
		grant    string
		want     bool
	}{
		{"not listed, authorization_code", p, other, tenant.GrantAuthorizationCode, true},
		{"not listed, device_code", p, other, tenant.GrantDeviceCode, true},
		{"listed with an empty list, authorization_code", p, everything, tenant.GrantAuthorizationCode, false},
		{"listed with an empty list, device_code", p, everything, tenant.GrantDeviceCode, false},
		{"listed with one grant, that grant", p, deviceOnly, tenant.GrantDeviceCode, false},
		{"listed with one grant, the other grant", p, deviceOnly, tenant.GrantAuthorizationCode, true},
		{"listed with both grants", tenant.AgentPolicy{SignInRefused: map[string][]string{
			other: {tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}}}, other, tenant.GrantAuthorizationCode, false},
		{"no list at all", tenant.AgentPolicy{}, other, tenant.GrantAuthorizationCode, true},
		// Exact client_ids only, as for Accepts (spec 5.3).
		{"trailing slash is another client", p, everything + "/", tenant.GrantAuthorizationCode, true},
		{"case is another client", p, "https://AGENT.example/refused.json", tenant.GrantDeviceCode, true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.policy.SignInAllowed(tt.clientID, tt.grant), tt.name)
	}
}

func TestNormalTask(t *testing.T) {
	t.Parallel()
	require.Equal(t, "pay with a gift card", tenant.NormalTask("  Pay with a GIFT card\t\n"))
	require.Equal(t, tenant.NormalTask("Pay with a gift card"), tenant.NormalTask("pay with a gift card "))
	require.NotEqual(t, tenant.NormalTask("Pay with a gift card"), tenant.NormalTask("Pay with a  gift card"), "inner space counts")
}

func TestURLs(t *testing.T) {
	t.Parallel()
	u := tenant.URLs{Public: &url.URL{Scheme: "https", Host: "poppyhost.example"}}
	with := &tenant.Company{Slug: "acme", Settings: tenant.Settings{
		Organization: tenant.Organization{Domain: "acme.example"}, Auth: tenant.Auth{Issuer: true}}}
	without := &tenant.Company{Slug: "acme", Settings: tenant.Settings{
		Organization: tenant.Organization{Domain: "acme.example"}}}

	require.Equal(t, "https://poppyhost.example/t/acme", u.Identifier(with))
	require.Equal(t, "https://poppyhost.example/t/acme", u.Issuer(with))
	require.Equal(t, "https://poppyhost.example/.well-known/oauth-authorization-server/t/acme", u.ASMetadata(with))
	// Without an issuer the identifier is https://{organization.domain}
	// (spec 3.2).
	require.Equal(t, "https://acme.example", u.Identifier(without))
	require.Empty(t, u.Issuer(without))
	require.Equal(t, "https://poppyhost.example/t/acme", u.Base(without))
	require.Equal(t, []string{"acme.example"}, with.Settings.AllDomains())
	require.True(t, with.Settings.HasDomain("acme.example"))
	require.False(t, with.Settings.HasDomain("other.example"))
}
