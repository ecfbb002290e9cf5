package issuer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCompanyConnectionsAndSignIns: the Company sees the Personal Agent a
// User connected, with the account, its scopes and the sign-in; after a
// disconnect it is no longer connected, and its sign-in says so. Another
// Company sees none of it.
func TestCompanyConnectionsAndSignIns(t *testing.T) {
	s := setup(t)
	ctx := t.Context()
	s.tokSignIn(t)
	var accountID, companyID int64
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT id, company_id FROM accounts WHERE username = $1`, testUser).
		Scan(&accountID, &companyID))
	store := s.env.Issuer.Store()

	conns, err := store.CompanyConnections(ctx, companyID, time.Now(), 0, "", 10)
	require.NoError(t, err)
	require.Len(t, conns, 1)
	require.Equal(t, accountID, conns[0].AccountID)
	require.Equal(t, testUser, conns[0].Username)
	require.Equal(t, s.agent.ClientID, conns[0].ClientID)
	require.Equal(t, []string{"orders:read", "orders:write"}, conns[0].Scopes)
	after, err := store.CompanyConnections(ctx, companyID, time.Now(), accountID, s.agent.ClientID, 10)
	require.NoError(t, err)
	require.Empty(t, after, "the next page starts after the last pair")

	signIns, err := store.SignIns(ctx, companyID, time.Now(), time.Time{}, 10)
	require.NoError(t, err)
	require.Len(t, signIns, 1)
	require.Equal(t, s.agent.ClientID, signIns[0].ClientID)
	require.Equal(t, testUser, signIns[0].Username)
	require.True(t, signIns[0].Connected)
	require.Equal(t, []string{"orders:read", "orders:write"}, signIns[0].Scopes)
	require.WithinDuration(t, conns[0].Since, signIns[0].At, time.Millisecond)
	older, err := store.SignIns(ctx, companyID, time.Now(), signIns[0].At, 10)
	require.NoError(t, err)
	require.Empty(t, older)

	for _, other := range []int64{companyID + 1000} {
		none, err := store.CompanyConnections(ctx, other, time.Now(), 0, "", 10)
		require.NoError(t, err)
		require.Empty(t, none)
		noSignIns, err := store.SignIns(ctx, other, time.Now(), time.Time{}, 10)
		require.NoError(t, err)
		require.Empty(t, noSignIns)
	}

	require.NoError(t, store.Disconnect(ctx, companyID, accountID, s.agent.ClientID))
	conns, err = store.CompanyConnections(ctx, companyID, time.Now(), 0, "", 10)
	require.NoError(t, err)
	require.Empty(t, conns)
	signIns, err = store.SignIns(ctx, companyID, time.Now(), time.Time{}, 10)
	require.NoError(t, err)
	require.Len(t, signIns, 1, "the sign-in is still listed")
	require.False(t, signIns[0].Connected)
}
