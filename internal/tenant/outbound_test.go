package tenant_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestOutboundURLsRefuseUnreachableHosts: the URLs the platform calls (the
// Company Agent's webhook, the approval hook, the website's origin) may
// not name a host the platform's outbound rule (safehttp.CheckHost, the
// dialler's) would refuse, unless AllowPrivate is on, as in development
// and the test platform. They were accepted before, and every call
// refused. The test platform allows them, so this drives an admin API of
// its own without AllowPrivate.
func TestOutboundURLsRefuseUnreachableHosts(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	strict := chi.NewRouter()
	strict.Route("/admin/v1", func(r chi.Router) {
		r.Use(tenant.RequireOperator(env.Platform.Tenants))
		tenant.NewAdmin(env.Platform.Tenants, env.Platform.Accounts, env.URLs, false).Operator(r)
	})
	create := func(body string) *peers.Response {
		req := httptest.NewRequest(http.MethodPost, "/admin/v1/companies", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testkit.AdminToken)
		rec := httptest.NewRecorder()
		strict.ServeHTTP(rec, req)
		return &peers.Response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
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
			slug := fmt.Sprintf("outbound-%d-%d", i, j)
			body := merge(t, minimalBody(slug, slug+".example"), f.patch("https://"+host+":8443"))
			e := requireInvalid(t, create(body), f.name)
			require.Contains(t, e.Fields[0].Message, "not public", "%s %s", f.name, host)
		}
	}
	requireNoCompanies(t, env)

	// With AllowPrivate, as on the test platform, they are accepted.
	for j, f := range fields {
		slug := fmt.Sprintf("outbound-dev-%d", j)
		createCompany(t, env, slug, slug+".example", f.patch("https://100.64.0.1"))
	}
	// A public address, and a name, which is checked when called.
	for j, f := range fields {
		for k, u := range []string{"https://93.184.216.34", "https://agent.acme.example"} {
			slug := fmt.Sprintf("outbound-public-%d-%d", j, k)
			resp := create(merge(t, minimalBody(slug, slug+".example"), f.patch(u)))
			require.Equal(t, http.StatusCreated, resp.Status, "%s %s: %s", f.name, u, resp.Body)
		}
	}
}
