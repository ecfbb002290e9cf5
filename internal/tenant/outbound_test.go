package tenant_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestOutboundURLsRefuseUnreachableHosts: the URLs the platform calls (the
// Company Agent's webhook, the approval hook, the website's origin) may
// not name a host the platform's outbound rule (safehttp.CheckHost, the
// dialler's) would refuse, unless AllowPrivate is on, as in development
// and the test platform. They were accepted before, and every call
// refused.
func TestOutboundURLsRefuseUnreachableHosts(t *testing.T) {
	t.Parallel()
	validate := func(t *testing.T, body string, allowPrivate bool) error {
		t.Helper()
		slug, settings, err := tenant.DecodeCompany([]byte(body))
		require.NoError(t, err)
		return tenant.Validate(slug, &settings, publicHost, allowPrivate)
	}
	fields := []struct {
		name  string
		patch func(u string) string
	}{
		{"conversations.agent_webhook", func(u string) string {
			return `{"conversations": {"agent_webhook": "` + u + `/hook"}}`
		}},
		{"operations.approval_hook", func(u string) string {
			return `{"operations": {"enabled": true, "approval_hook": "` + u + `/approvals"}}`
		}},
		{"web.origin", func(u string) string { return `{"web": {"origin": "` + u + `"}}` }},
	}
	for i, host := range []string{
		"100.64.0.1", "100.127.255.254", "192.0.2.1", "198.51.100.1", "203.0.113.7", "0.1.2.3",
		"240.0.0.1", "255.255.255.255", "192.0.0.1", "192.88.99.1", "198.18.0.1",
		"[::ffff:100.64.0.1]", "[2001:db8::1]", "[64:ff9b::7f00:1]", "[fec0::1]",
		"127.0.0.1", "10.0.0.1", "[::1]", "169.254.169.254", "localhost",
	} {
		for j, f := range fields {
			t.Run(f.name+" "+host, func(t *testing.T) {
				slug := fmt.Sprintf("outbound-%d-%d", i, j)
				body := merge(t, minimalBody(slug, slug+".example"), f.patch("https://"+host+":8443"))
				err := validate(t, body, false)
				requireInvalidError(t, err, f.name)
				var e *httpx.Error
				require.ErrorAs(t, err, &e)
				require.Contains(t, e.Fields[0].Message, "not public", "%s %s", f.name, host)
				// With AllowPrivate, as in development, they are accepted.
				require.NoError(t, validate(t, body, true))
			})
		}
	}
	// A public address, and a name, which is checked when called.
	for j, f := range fields {
		for k, u := range []string{"https://93.184.216.34", "https://agent.acme.example"} {
			slug := fmt.Sprintf("outbound-public-%d-%d", j, k)
			require.NoError(t, validate(t, merge(t, minimalBody(slug, slug+".example"), f.patch(u)), false), "%s %s", f.name, u)
		}
	}
}
