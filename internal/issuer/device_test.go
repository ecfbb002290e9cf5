package issuer_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Helpers of the device tests carry a dev prefix.

const devGrant = "urn:ietf:params:oauth:grant-type:device_code"

// devStart asks for a device code with scope and returns the response.
func (s *stormline) devStart(t *testing.T, scope string) map[string]any {
	t.Helper()
	resp := s.tokPost(t, s.issuer, "/oauth/device_authorization", s.tokAuthed(t, url.Values{"scope": {scope}}))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	return resp.JSON(t)
}

// devPoll polls the token endpoint for deviceCode as the test agent.
func (s *stormline) devPoll(t *testing.T, deviceCode string) *peers.Response {
	t.Helper()
	return s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, url.Values{"grant_type": {devGrant}, "device_code": {deviceCode}}))
}

// devDecide opens the verification link, signs ada in and approves the
// scopes given, or declines when action is "deny".
func (s *stormline) devDecide(t *testing.T, da map[string]any, action string, scopes []string) {
	t.Helper()
	b := s.env.Browser(t)
	page := b.Get(da["verification_uri_complete"].(string))
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "continue", nil)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Contains(t, page.Body, da["user_code"].(string))
	page = b.Submit(page, action, map[string][]string{"scope": scopes})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
}

// devStatus is the stored status of the request with userCode.
func (s *stormline) devStatus(t *testing.T, userCode string) (status string, interval int) {
	t.Helper()
	code := strings.ReplaceAll(userCode, "-", "")
	require.NoError(t, s.env.Pool.QueryRow(context.Background(),
		`SELECT status, interval_seconds FROM device_grants WHERE user_code = $1`, code).Scan(&status, &interval))
	return status, interval
}

// TestDeviceAuthorizationResponse: the codes and links of RFC 8628 §3.2
// with spec 4.3's rules, and a link that approves nothing when opened.
func TestDeviceAuthorizationResponse(t *testing.T) {
	t.Parallel()
	s := setup(t)
	da := s.devStart(t, "orders:read")
	require.Regexp(t, `^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`, da["user_code"])
	require.NotEmpty(t, da["device_code"])
	require.EqualValues(t, 600, da["expires_in"])
	require.EqualValues(t, 5, da["interval"])

	issuer, err := url.Parse(s.issuer)
	require.NoError(t, err)
	for _, field := range []string{"verification_uri", "verification_uri_complete"} {
		u, err := url.Parse(da[field].(string))
		require.NoError(t, err)
		require.Equal(t, "https", u.Scheme)
		require.Equal(t, issuer.Host, u.Host, "spec 4.3: the link is on the issuer's host")
	}
	complete, _ := url.Parse(da["verification_uri_complete"].(string))
	require.Equal(t, da["user_code"], complete.Query().Get("user_code"))

	// Opening the link, even signed in, approves nothing (spec 4.3).
	b := s.env.Browser(t)
	s.tokCodeWith(t, b)
	for range 2 {
		page := b.Get(da["verification_uri_complete"].(string))
		require.Equal(t, http.StatusOK, page.Status, page.Body)
	}
	status, _ := s.devStatus(t, da["user_code"].(string))
	require.Equal(t, "pending", status)
	tokError(t, s.devPoll(t, da["device_code"].(string)), http.StatusBadRequest, "authorization_pending")
}

// tokCodeWith signs ada in to the pages in b, through Direct Sign-In.
func (s *stormline) tokCodeWith(t *testing.T, b *peers.Browser) {
	t.Helper()
	page := b.Get(s.conf.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
}

// TestDeviceAuthorizationErrors: scope is required and must be known
// (spec 4.7), and a Personal Agent refused Device Sign-In gets
// unauthorized_client (spec 4.1). Nothing is stored.
func TestDeviceAuthorizationErrors(t *testing.T) {
	t.Parallel()
	s := setup(t)
	count := func() int {
		var n int
		require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM device_grants`).Scan(&n))
		return n
	}
	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"missing scope", url.Values{}},
		{"empty scope", url.Values{"scope": {" "}}},
		{"unknown scope", url.Values{"scope": {"orders:read payments"}}},
	} {
		resp := s.tokPost(t, s.issuer, "/oauth/device_authorization", s.tokAuthed(t, tc.form))
		tokError(t, resp, http.StatusBadRequest, "invalid_scope")
	}
	resp := s.tokPost(t, s.issuer, "/oauth/device_authorization", url.Values{"scope": {"orders:read"}})
	tokError(t, resp, http.StatusUnauthorized, "invalid_client")

	s.tokPatch(t, "stormline", map[string]any{"agents": map[string]any{
		"sign_in_refused": map[string]any{s.agent.ClientID: []string{devGrant}}}})
	resp = s.tokPost(t, s.issuer, "/oauth/device_authorization", s.tokAuthed(t, url.Values{"scope": {"orders:read"}}))
	tokError(t, resp, http.StatusBadRequest, "unauthorized_client")
	require.Zero(t, count())
}

// TestDevicePolling: pending, slow_down with a longer interval, then
// tokens once approved (RFC 8628 §3.5).
func TestDevicePolling(t *testing.T) {
	t.Parallel()
	s := setup(t)
	da := s.devStart(t, "orders:read orders:write")
	device, user := da["device_code"].(string), da["user_code"].(string)
	before := s.tokRows(t)

	tokError(t, s.devPoll(t, device), http.StatusBadRequest, "authorization_pending")
	tokError(t, s.devPoll(t, device), http.StatusBadRequest, "slow_down")
	_, interval := s.devStatus(t, user)
	require.Equal(t, 10, interval, "slow_down adds 5 seconds")
	tokError(t, s.devPoll(t, device), http.StatusBadRequest, "slow_down")
	_, interval = s.devStatus(t, user)
	require.Equal(t, 15, interval)
	s.tokNothingNew(t, before)

	s.devDecide(t, da, "approve", []string{"orders:read", "orders:write"})
	resp := s.devPoll(t, device)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	require.Equal(t, "Bearer", body["token_type"])
	require.NotEmpty(t, body["refresh_token"])
	require.NotContains(t, body, "scope", "granted equals requested (spec 4.7)")
	require.EqualValues(t, 15*60, body["expires_in"])

	before = s.tokRows(t)
	tokError(t, s.devPoll(t, device), http.StatusBadRequest, "invalid_grant")
	s.tokNothingNew(t, before)
}

// TestDeviceDenied: a declined request is access_denied.
func TestDeviceDenied(t *testing.T) {
	t.Parallel()
	s := setup(t)
	da := s.devStart(t, "orders:read")
	s.devDecide(t, da, "deny", nil)
	before := s.tokRows(t)
	tokError(t, s.devPoll(t, da["device_code"].(string)), http.StatusBadRequest, "access_denied")
	s.tokNothingNew(t, before)
}

// TestDeviceExpired: an expired request is expired_token, approved or
// not.
func TestDeviceExpired(t *testing.T) {
	t.Parallel()
	s := setup(t)
	pending := s.devStart(t, "orders:read")
	approved := s.devStart(t, "orders:read")
	s.devDecide(t, approved, "approve", []string{"orders:read"})
	_, err := s.env.Pool.Exec(context.Background(), `UPDATE device_grants SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	before := s.tokRows(t)
	for _, da := range []map[string]any{pending, approved} {
		tokError(t, s.devPoll(t, da["device_code"].(string)), http.StatusBadRequest, "expired_token")
	}
	s.tokNothingNew(t, before)
}

// TestDeviceConcurrentPolls: once approved, of two concurrent polls
// exactly one gets tokens and the other invalid_grant.
func TestDeviceConcurrentPolls(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for range 5 {
		da := s.devStart(t, "orders:read")
		s.devDecide(t, da, "approve", []string{"orders:read"})
		device := da["device_code"].(string)
		forms := []url.Values{}
		for range 2 {
			forms = append(forms, s.tokAuthed(t, url.Values{"grant_type": {devGrant}, "device_code": {device}}))
		}
		resps := make([]*peers.Response, 2)
		var wg sync.WaitGroup
		for i := range forms {
			wg.Go(func() { resps[i] = s.tokPost(t, s.issuer, "/oauth/token", forms[i]) })
		}
		wg.Wait()
		ok := 0
		for _, r := range resps {
			if r.Status == http.StatusOK {
				ok++
				continue
			}
			tokError(t, r, http.StatusBadRequest, "invalid_grant")
		}
		require.Equal(t, 1, ok, "%s\n%s", resps[0].Body, resps[1].Body)
	}
	var refresh int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM oauth_tokens WHERE kind = 'refresh'`).Scan(&refresh))
	require.Equal(t, 5, refresh, "one grant per device code")
}

// TestDeviceWrongClient: a device code is good only for the client it was
// issued to, and every poll is authenticated (spec 4.3).
func TestDeviceWrongClient(t *testing.T) {
	t.Parallel()
	s := setup(t)
	other := s.env.StartAgent(t, "other.test")
	da := s.devStart(t, "orders:read")
	device := da["device_code"].(string)
	before := s.tokRows(t)

	form := tokWithAssertion(url.Values{"grant_type": {devGrant}, "device_code": {device}}, other.ClientAssertion(t, s.issuer))
	tokError(t, s.tokPost(t, s.issuer, "/oauth/token", form), http.StatusBadRequest, "invalid_grant")
	resp := s.tokPost(t, s.issuer, "/oauth/token", url.Values{"grant_type": {devGrant}, "device_code": {device}, "client_id": {s.agent.ClientID}})
	tokError(t, resp, http.StatusUnauthorized, "invalid_client")

	s.devDecide(t, da, "approve", []string{"orders:read"})
	form = tokWithAssertion(url.Values{"grant_type": {devGrant}, "device_code": {device}}, other.ClientAssertion(t, s.issuer))
	tokError(t, s.tokPost(t, s.issuer, "/oauth/token", form), http.StatusBadRequest, "invalid_grant")
	s.tokNothingNew(t, before)

	// Another client's polls neither slowed down nor used up the request.
	resp = s.devPoll(t, device)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// TestDeviceSignInRefusedAfterApproval: a Personal Agent refused Device
// Sign-In after the User approved gets unauthorized_client, not tokens.
func TestDeviceSignInRefusedAfterApproval(t *testing.T) {
	t.Parallel()
	s := setup(t)
	da := s.devStart(t, "orders:read")
	s.devDecide(t, da, "approve", []string{"orders:read"})
	s.tokPatch(t, "stormline", map[string]any{"agents": map[string]any{
		"sign_in_refused": map[string]any{s.agent.ClientID: []string{}}}})
	before := s.tokRows(t)
	tokError(t, s.devPoll(t, da["device_code"].(string)), http.StatusBadRequest, "unauthorized_client")
	s.tokNothingNew(t, before)
}

// TestDeviceUserCodeCollision: a user code already taken is never handed
// out again for a request that was not stored. A trigger makes every new
// request collide with the first.
func TestDeviceUserCodeCollision(t *testing.T) {
	t.Parallel()
	s := setup(t)
	first := s.devStart(t, "orders:read")
	_, err := s.env.Pool.Exec(context.Background(), `
		CREATE FUNCTION collide() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.user_code := (SELECT min(user_code) FROM device_grants); RETURN NEW; END $$;
		CREATE TRIGGER collide BEFORE INSERT ON device_grants FOR EACH ROW EXECUTE FUNCTION collide();`)
	require.NoError(t, err)

	resp := s.tokPost(t, s.issuer, "/oauth/device_authorization", s.tokAuthed(t, url.Values{"scope": {"orders:read"}}))
	if resp.Status == http.StatusOK {
		// Whatever it answers, the device code it hands out must exist.
		tokError(t, s.devPoll(t, resp.JSON(t)["device_code"].(string)), http.StatusBadRequest, "authorization_pending")
	} else {
		tokError(t, resp, http.StatusInternalServerError, "server_error")
	}
	// The same holds when the request holding the code has expired but is
	// not swept yet.
	_, err = s.env.Pool.Exec(context.Background(), `UPDATE device_grants SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	resp = s.tokPost(t, s.issuer, "/oauth/device_authorization", s.tokAuthed(t, url.Values{"scope": {"orders:read"}}))
	if resp.Status == http.StatusOK {
		tokError(t, s.devPoll(t, resp.JSON(t)["device_code"].(string)), http.StatusBadRequest, "authorization_pending")
	} else {
		tokError(t, resp, http.StatusInternalServerError, "server_error")
	}
	tokError(t, s.devPoll(t, first["device_code"].(string)), http.StatusBadRequest, "expired_token")
}
