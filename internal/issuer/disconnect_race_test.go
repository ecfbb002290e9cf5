package issuer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDisconnectWaitsForADeviceRedemption: the User disconnects a Personal
// Agent while its Device Sign-In is being redeemed (the redemption has
// marked the request used and not yet written its tokens). Disconnect
// waits for the redemption and revokes what it issued: afterwards the
// agent holds no active token for the account (spec 5.5).
func TestDisconnectWaitsForADeviceRedemption(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	var accountID, companyID int64
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT id, company_id FROM accounts WHERE username = $1`, testUser).Scan(&accountID, &companyID))
	client := s.agent.ClientID
	_, err := s.env.Pool.Exec(ctx, `INSERT INTO device_grants (company_id, device_code, user_code, client_id, scopes,
			status, account_id, granted_scopes, interval_seconds, created_at, expires_at)
		VALUES ($1, '\x01', 'RACE-CODE', $2, '{orders:read}', 'approved', $3, '{orders:read}', 5, now(), now() + interval '10 minutes')`,
		companyID, client, accountID)
	require.NoError(t, err)

	// The redemption, as the device grant's token handler runs it.
	redeem, err := s.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = redeem.Rollback(ctx) }()
	tag, err := redeem.Exec(ctx, `UPDATE device_grants SET status = 'used'
		WHERE company_id = $1 AND device_code = '\x01' AND status = 'approved'`, companyID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	done := make(chan error, 1)
	go func() { done <- s.env.Issuer.Store().Disconnect(ctx, companyID, accountID, client) }()
	// Disconnect is now blocked on a lock the redemption holds.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond)

	for _, kind := range []string{"access", "refresh"} {
		_, err := redeem.Exec(ctx, `INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, account_id,
				requested_at, scopes, granted_scopes, form, session, expires_at)
			VALUES ($1, $2, convert_to($2, 'UTF8'), 'race-grant', $3, $4, now(), '{orders:read}', '{orders:read}', '{}', '{}',
				now() + interval '1 hour')`, companyID, kind, client, accountID)
		require.NoError(t, err)
	}
	require.NoError(t, redeem.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Disconnect did not finish")
	}
	var active int
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT count(*) FROM oauth_tokens
		WHERE company_id = $1 AND account_id = $2 AND client_id = $3 AND active`, companyID, accountID, client).Scan(&active))
	require.Zero(t, active, "what the redemption issued was revoked")
}
