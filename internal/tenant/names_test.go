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
	err := tenant.Validate("Bad Slug", &s, "poppyhost.test")
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
	both := []string{tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}
	tests := []struct {
		name string
		auth tenant.Auth
		want []string
	}{
		{"issuer", tenant.Auth{Issuer: true}, both},
		{"issuer, disabled", tenant.Auth{Issuer: true, Disabled: true}, []string{}},
		{"no issuer", tenant.Auth{}, []string{}},
		{"explicit", tenant.Auth{Issuer: true, GrantTypes: []string{tenant.GrantDeviceCode}}, []string{tenant.GrantDeviceCode}},
		{"explicit empty", tenant.Auth{Issuer: true, GrantTypes: []string{}}, []string{}},
	}
	for _, tt := range tests {
		s := tenant.Settings{Auth: tt.auth}
		tenant.Normalize(&s)
		require.Equal(t, tt.want, s.Auth.GrantTypes, tt.name)
		require.Equal(t, "session", s.Conversations.Access)
		require.NotNil(t, s.Domains)
		require.NotNil(t, s.Auth.Scopes)
		require.NotNil(t, s.Auth.ScopeHints)
		require.NotNil(t, s.Auth.OtherAuthorizationServers)
		require.NotNil(t, s.ExcludedTasks)
		require.NotNil(t, s.APIs)
		require.NotNil(t, s.Extensions)
	}

	// The defaults with nothing changed are a valid Company with an issuer.
	s := tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "Acme", Domain: "acme.example"}
	tenant.Normalize(&s)
	require.NoError(t, tenant.Validate("acme", &s, "poppyhost.test"))
	require.Equal(t, both, s.Auth.GrantTypes)
	require.True(t, s.Conversations.Enabled)
	require.True(t, s.Feedback.Enabled)
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
