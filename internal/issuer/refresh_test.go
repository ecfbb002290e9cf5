package issuer_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// grantRows counts the grant's rows of oauth_tokens by kind, and its
// active ones, the grant being the one of the refresh token row whose
// request_id is requestID.
func (s *stormline) grantRows(t *testing.T, requestID string) (refresh, access, active int) {
	t.Helper()
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE kind = 'refresh'), count(*) FILTER (WHERE kind = 'access'),
			count(*) FILTER (WHERE kind IN ('refresh', 'access') AND active)
		FROM oauth_tokens WHERE request_id = $1`, requestID).Scan(&refresh, &access, &active))
	return refresh, access, active
}

// grantOf is the request_id of the grant with a single active refresh
// token, the one just signed in.
func (s *stormline) grantOf(t *testing.T) string {
	t.Helper()
	var id string
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT request_id FROM oauth_tokens
		WHERE kind = 'refresh' AND active`).Scan(&id))
	return id
}

// TestRefreshRace: many clients race one refresh token, in several
// rounds. Exactly one gets tokens, every other gets invalid_grant (never a
// server error), the grant gains exactly one access and one refresh
// token, and reusing the raced token afterwards revokes the whole grant.
func TestRefreshRace(t *testing.T) {
	t.Parallel()
	s := setup(t)
	const racers = 8
	for range 4 {
		refresh := s.tokSignIn(t)["refresh_token"].(string)
		grant := s.grantOf(t)
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
		forms := make([]url.Values, racers)
		for i := range forms {
			forms[i] = s.tokAuthed(t, form)
		}
		resps := make([]*peers.Response, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range forms {
			wg.Go(func() {
				<-start
				resps[i] = s.tokPost(t, s.issuer, "/oauth/token", forms[i])
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, r := range resps {
			if r.Status == http.StatusOK {
				won++
				continue
			}
			tokError(t, r, http.StatusBadRequest, "invalid_grant")
		}
		require.Equal(t, 1, won)
		refreshRows, accessRows, _ := s.grantRows(t, grant)
		require.Equal(t, 2, refreshRows, "the sign-in's refresh token and one rotated in")
		require.Equal(t, 2, accessRows, "the sign-in's access token and one more")

		tokError(t, s.tokRefresh(t, refresh, nil), http.StatusBadRequest, "invalid_grant")
		_, _, active := s.grantRows(t, grant)
		require.Zero(t, active, "reuse revokes every token of the grant")
	}
}

// TestRefreshReplayedAssertion: a refresh whose client assertion was used
// before is invalid_client and changes nothing, with the grant's live
// refresh token (no rotation) as with a rotated one (no revocation of
// the grant), although its jti is only recorded in the round trip that
// reads the refresh token.
func TestRefreshReplayedAssertion(t *testing.T) {
	t.Parallel()
	s := setup(t)
	first := s.tokSignIn(t)["refresh_token"].(string)
	grant := s.grantOf(t)
	assertion := s.agent.ClientAssertion(t, s.issuer)
	refreshWith := func(refresh, assertion string) *peers.Response {
		return s.tokPost(t, s.issuer, "/oauth/token", tokWithAssertion(
			url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}, assertion))
	}
	resp := refreshWith(first, assertion)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	second := resp.JSON(t)["refresh_token"].(string)

	before := s.tokRows(t)
	_, _, live := s.grantRows(t, grant)
	for _, refresh := range []string{second, first} {
		resp := refreshWith(refresh, assertion)
		tokError(t, resp, http.StatusUnauthorized, "invalid_client")
		require.Contains(t, resp.JSON(t)["error_description"], "jti already used")
		s.tokNothingNew(t, before)
		_, _, active := s.grantRows(t, grant)
		require.Equal(t, live, active, "the grant's tokens stay valid")
	}
	resp = s.tokRefresh(t, second, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// TestRefreshRacesDisconnect: the User disconnects the Personal Agent
// while a refresh has rotated its token and is still writing the new
// ones (held at the new rows' check of their Company, which a transaction
// of the test locks). Disconnect waits for the refresh's grant and then
// revokes what it issued: afterwards the agent holds no active token for
// the account (spec 5.5).
func TestRefreshRacesDisconnect(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	refresh := s.tokSignIn(t)["refresh_token"].(string)
	grant := s.grantOf(t)
	var accountID, companyID int64
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT id, company_id FROM accounts WHERE username = $1`, testUser).
		Scan(&accountID, &companyID))
	form := s.tokAuthed(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}})

	hold, err := s.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `SELECT 1 FROM companies WHERE id = $1 FOR UPDATE`, companyID)
	require.NoError(t, err)

	refreshed := make(chan *peers.Response, 1)
	go func() { refreshed <- s.tokPost(t, s.issuer, "/oauth/token", form) }()
	waitForLockWaits(t, s, 1)
	disconnected := make(chan error, 1)
	go func() { disconnected <- s.env.Issuer.Store().Disconnect(ctx, companyID, accountID, s.agent.ClientID) }()
	waitForLockWaits(t, s, 2)
	require.NoError(t, hold.Rollback(ctx))

	select {
	case resp := <-refreshed:
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	case <-time.After(10 * time.Second):
		t.Fatal("the refresh did not finish")
	}
	select {
	case err := <-disconnected:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Disconnect did not finish")
	}
	refreshRows, _, active := s.grantRows(t, grant)
	require.Equal(t, 2, refreshRows, "the refresh rotated the token")
	require.Zero(t, active, "Disconnect revoked what the refresh issued")
}

// waitForLockWaits waits until n of the database's backends wait for a
// lock.
func waitForLockWaits(t *testing.T, s *stormline, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting >= n
	}, 10*time.Second, 5*time.Millisecond)
}
