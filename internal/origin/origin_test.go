package origin_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// TestFacts: what Poppy-Verified states of a request (spec 5.3, 7): the
// Session's facts, and signed in the grant's account and scopes; an MCP
// client without a Session is named by its grant's client.
func TestFacts(t *testing.T) {
	sess := &sessions.Session{ClientID: "https://agent.example/client", SID: "sid1", UserID: "usr_ada",
		AgentID: "agt_1", Extensions: map[string]string{"operations": "3"}}
	grant := &bearer.Grant{ClientID: "https://other.example/client", AccountID: 42, Scopes: []string{"orders:read"}}
	for _, tc := range []struct {
		name  string
		sess  *sessions.Session
		grant *bearer.Grant
		want  verified.Facts
	}{
		{"signed in", sess, grant, verified.Facts{ClientID: sess.ClientID, SID: "sid1", UserID: "usr_ada", AgentID: "agt_1",
			Account: "42", Scopes: []string{"orders:read"}, Extensions: sess.Extensions}},
		{"signed out", sess, nil, verified.Facts{ClientID: sess.ClientID, SID: "sid1", UserID: "usr_ada", AgentID: "agt_1",
			Scopes: []string{}, Extensions: sess.Extensions}},
		{"no Session", nil, grant, verified.Facts{ClientID: grant.ClientID, Account: "42", Scopes: []string{"orders:read"}}},
		// A Web Bot Auth signature recognised the operator (spec 5.3).
		{"recognised operator", &sessions.Session{ClientID: sess.ClientID, SID: "sid1", Operator: "agent.example"}, nil,
			verified.Facts{ClientID: sess.ClientID, SID: "sid1", Scopes: []string{}, AgentOperator: "agent.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, *origin.Facts(tc.sess, tc.grant))
		})
	}
	// The facts own their scopes: the grant's stay as they were.
	f := origin.Facts(nil, grant)
	f.Scopes[0] = "changed"
	require.Equal(t, "orders:read", grant.Scopes[0])
}

// TestTarget: a request's path follows the origin's, as escaped, with the
// request's query.
func TestTarget(t *testing.T) {
	for _, tc := range []struct{ origin, path, query, want string }{
		{"https://api.example/v1", "/orders/1", "", "https://api.example/v1/orders/1"},
		{"https://api.example/v1/", "/orders/1", "a=b", "https://api.example/v1/orders/1?a=b"},
		{"https://api.example", "/files/a%2Fb", "", "https://api.example/files/a%2Fb"},
	} {
		base, err := url.Parse(tc.origin)
		require.NoError(t, err)
		require.Equal(t, tc.want, origin.Target(base, tc.path, tc.query).String(), tc.origin+tc.path)
	}
}
