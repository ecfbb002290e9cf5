package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ory/fosite"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// connect makes an account username of the Company companyID and signs
// the Personal Agent client in to it, as the issuer stores a grant: its
// access and refresh tokens. It returns the account's id.
func (r *rig) connect(t *testing.T, companyID int64, username, client string) int64 {
	t.Helper()
	ctx := tenant.WithCompany(context.Background(), &tenant.Company{ID: companyID})
	acct, err := accounts.NewStore(r.env.Pool).Create(ctx, companyID, username, "a long enough password")
	require.NoError(t, err)
	now := time.Now()
	req := fosite.NewRequest()
	req.ID = "req_" + username
	req.RequestedAt = now
	req.Client = &issuer.Client{ID: client}
	req.RequestedScope = fosite.Arguments{"orders:read"}
	req.GrantedScope = fosite.Arguments{"orders:read"}
	sess := &issuer.Session{AccountID: acct.ID, Username: username}
	for _, k := range []fosite.TokenType{fosite.AccessToken, fosite.RefreshToken} {
		sess.SetExpiresAt(k, now.Add(time.Hour))
	}
	req.Session = sess
	store := issuer.NewStore(r.env.Pool)
	require.NoError(t, store.CreateAccessTokenSession(ctx, "sig_access_"+username, req))
	require.NoError(t, store.CreateRefreshTokenSession(ctx, "sig_refresh_"+username, "", req))
	return acct.ID
}

// connected reports whether client is connected to account accountID of
// companyID.
func (r *rig) connected(t *testing.T, companyID, accountID int64, client string) bool {
	t.Helper()
	conns, err := issuer.NewStore(r.env.Pool).Connections(context.Background(), companyID, accountID, time.Now())
	require.NoError(t, err)
	for _, c := range conns {
		if c.ClientID == client {
			return true
		}
	}
	return false
}

const agentClient = "https://agent.example/client"

// TestAgentsPage: every role sees the connected Personal Agents and the
// sign-ins; only owners and admins see and use the disconnect button,
// which ends the connection as the User's own would.
func TestAgentsPage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	alice := r.connect(t, r.ID, "alice", agentClient)
	bob := r.connect(t, r.ID, "bob", agentClient)

	for _, role := range []console.Role{console.RoleOwner, console.RoleAdmin, console.RoleAgent, console.RoleAuditor} {
		c := r.signIn(t, role)
		resp, body := r.get(t, c, "/agents")
		require.Equal(t, http.StatusOK, resp.StatusCode, role)
		require.Contains(t, body, "alice")
		require.Contains(t, body, "bob")
		require.Contains(t, body, agentClient)
		require.Contains(t, body, "orders:read")
		mayDisconnect := role == console.RoleOwner || role == console.RoleAdmin
		require.Equal(t, mayDisconnect, strings.Contains(body, "/agents/disconnect"), role)
	}
	for _, role := range []console.Role{console.RoleAgent, console.RoleAuditor} {
		c := r.signIn(t, role)
		resp := r.post(t, c, "/agents/disconnect", url.Values{"account_id": {strconv.FormatInt(alice, 10)},
			"client_id": {agentClient}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, role)
		require.True(t, r.connected(t, r.ID, alice, agentClient), role)
	}

	c := r.signIn(t, console.RoleAdmin)
	resp := r.post(t, c, "/agents/disconnect", url.Values{"account_id": {strconv.FormatInt(alice, 10)},
		"client_id": {agentClient}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.False(t, r.connected(t, r.ID, alice, agentClient))
	require.True(t, r.connected(t, r.ID, bob, agentClient), "bob's connection is his own")
	require.Equal(t, []string{"account_id", "client_id"}, r.audited(t, "/agents/disconnect"),
		"the disconnect is in the audit log, by the member")
	resp2, body := r.get(t, c, "/agents?disconnected=1")
	require.Equal(t, http.StatusOK, resp2.StatusCode)
	require.Contains(t, body, "was disconnected")
	require.Contains(t, body, "ended", "alice's sign-in has ended")

	// Not connected any more, or never: 404.
	resp = r.post(t, c, "/agents/disconnect", url.Values{"account_id": {strconv.FormatInt(alice, 10)},
		"client_id": {agentClient}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp = r.post(t, c, "/agents/disconnect", url.Values{"account_id": {"x"}, "client_id": {agentClient}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// TestAgentsOtherCompany: another Company's account and its agent are
// never listed, and disconnecting it answers 404 and leaves it connected.
func TestAgentsOtherCompany(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	_, otherID := r.company(t, "globex")
	theirs := r.connect(t, otherID, "globex-carol", agentClient)
	c := r.signIn(t, console.RoleOwner)
	_, body := r.get(t, c, "/agents")
	require.NotContains(t, body, "globex-carol")
	resp := r.post(t, c, "/agents/disconnect", url.Values{"account_id": {strconv.FormatInt(theirs, 10)},
		"client_id": {agentClient}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.True(t, r.connected(t, otherID, theirs, agentClient))
}

// TestAgentsDisconnectNeedsCSRF: a disconnect without the session's CSRF
// token, or with another session's, is refused and changes nothing.
func TestAgentsDisconnectNeedsCSRF(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	alice := r.connect(t, r.ID, "alice", agentClient)
	c := r.signIn(t, console.RoleOwner)
	other := r.signIn(t, console.RoleOwner)
	for _, token := range []string{"", r.csrf(t, other), "forged"} {
		form := url.Values{"account_id": {strconv.FormatInt(alice, 10)}, "client_id": {agentClient}}
		if token != "" {
			form.Set("csrf", token)
		}
		resp := r.postRaw(t, c, "/agents/disconnect", form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.True(t, r.connected(t, r.ID, alice, agentClient))
	}
}
