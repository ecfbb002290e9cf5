package crosstenant_test

import (
	"context"
	"testing"
	"time"

	"github.com/ory/fosite"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/issuer"
)

// grant is a request of the issuer's for client, acting for accountID.
func grant(requestID, client string, accountID int64, now time.Time) *fosite.Request {
	r := fosite.NewRequest()
	r.ID = requestID
	r.RequestedAt = now
	r.Client = &issuer.Client{ID: client}
	r.RequestedScope = fosite.Arguments{"orders"}
	r.GrantedScope = fosite.Arguments{"orders"}
	sess := &issuer.Session{AccountID: accountID, Username: "alice"}
	for _, k := range []fosite.TokenType{fosite.AuthorizeCode, fosite.AccessToken, fosite.RefreshToken} {
		sess.SetExpiresAt(k, now.Add(time.Hour))
	}
	r.Session = sess
	return r
}

func TestIssuer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := issuer.NewStore(w.pool)
	alice, err := accounts.NewStore(w.pool).Create(w.ctx, w.a.ID, "alice", "alpha's password")
	require.NoError(t, err)
	const client, requestID, device = "https://agent.test/client", "req_a", "device_a"
	now := time.Now()
	a, b := w.asA(), w.asB()
	req := grant(requestID, client, alice.ID, now)
	require.NoError(t, store.CreateAuthorizeCodeSession(a, "sig_code", req))
	require.NoError(t, store.CreatePKCERequestSession(a, "sig_pkce", req))
	require.NoError(t, store.CreateAccessTokenSession(a, "sig_access", req))
	require.NoError(t, store.CreateRefreshTokenSession(a, "sig_refresh", "", req))
	w.deviceGrant(t, w.a.ID, device, client, alice.ID)

	// keptA checks, as A, that every grant of A's is stored and active.
	keptA := func(t *testing.T) {
		t.Helper()
		got, err := store.GetAuthorizeCodeSession(a, "sig_code", nil)
		require.NoError(t, err, "the code is still active")
		require.Equal(t, requestID, got.GetID())
		require.Equal(t, client, got.GetClient().GetID())
		_, err = store.GetPKCERequestSession(a, "sig_pkce", nil)
		require.NoError(t, err)
		_, err = store.GetAccessTokenSession(a, "sig_access", nil)
		require.NoError(t, err)
		_, err = store.GetRefreshTokenSession(a, "sig_refresh", nil)
		require.NoError(t, err, "the refresh token is still active")
		active, err := store.AccessTokenActive(w.ctx, w.a.ID, "sig_access", now)
		require.NoError(t, err)
		require.True(t, active)
		conns, err := store.Connections(w.ctx, w.a.ID, alice.ID, now)
		require.NoError(t, err)
		require.Len(t, conns, 1)
		require.Equal(t, "approved", w.deviceGrantStatus(t, w.a.ID, device))
	}

	// Reads as B find nothing.
	for _, c := range []struct {
		method string
		get    func(ctx context.Context) (fosite.Requester, error)
	}{
		{"GetAuthorizeCodeSession", func(ctx context.Context) (fosite.Requester, error) {
			return store.GetAuthorizeCodeSession(ctx, "sig_code", nil)
		}},
		{"GetPKCERequestSession", func(ctx context.Context) (fosite.Requester, error) {
			return store.GetPKCERequestSession(ctx, "sig_pkce", nil)
		}},
		{"GetAccessTokenSession", func(ctx context.Context) (fosite.Requester, error) {
			return store.GetAccessTokenSession(ctx, "sig_access", nil)
		}},
		{"GetRefreshTokenSession", func(ctx context.Context) (fosite.Requester, error) {
			return store.GetRefreshTokenSession(ctx, "sig_refresh", nil)
		}},
	} {
		t.Run("issuer.Store/"+c.method, func(t *testing.T) {
			got, err := c.get(b)
			require.ErrorIs(t, err, fosite.ErrNotFound)
			require.Nil(t, got)
			keptA(t)
		})
	}

	// Changes as B leave A's grants active.
	for _, c := range []struct {
		method string
		call   func(ctx context.Context) error
		// refused: the call must fail, not merely change nothing.
		refused bool
	}{
		{"InvalidateAuthorizeCodeSession", func(ctx context.Context) error {
			return store.InvalidateAuthorizeCodeSession(ctx, "sig_code")
		}, true},
		{"RotateRefreshToken", func(ctx context.Context) error {
			return store.RotateRefreshToken(ctx, requestID, "sig_refresh")
		}, true},
		{"DeletePKCERequestSession", func(ctx context.Context) error {
			return store.DeletePKCERequestSession(ctx, "sig_pkce")
		}, false},
		{"DeleteAccessTokenSession", func(ctx context.Context) error {
			return store.DeleteAccessTokenSession(ctx, "sig_access")
		}, false},
		{"DeleteRefreshTokenSession", func(ctx context.Context) error {
			return store.DeleteRefreshTokenSession(ctx, "sig_refresh")
		}, false},
		{"RevokeRefreshToken", func(ctx context.Context) error { return store.RevokeRefreshToken(ctx, requestID) }, false},
		{"RevokeAccessToken", func(ctx context.Context) error { return store.RevokeAccessToken(ctx, requestID) }, false},
		{"Disconnect", func(context.Context) error { return store.Disconnect(w.ctx, w.b.ID, alice.ID, client) }, false},
	} {
		t.Run("issuer.Store/"+c.method, func(t *testing.T) {
			err := c.call(b)
			if c.refused {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			keptA(t)
		})
	}

	t.Run("issuer.Store/AccessTokenActive", func(t *testing.T) {
		active, err := store.AccessTokenActive(w.ctx, w.b.ID, "sig_access", now)
		require.NoError(t, err)
		require.False(t, active)
		keptA(t)
	})
	t.Run("issuer.Store/Connections", func(t *testing.T) {
		conns, err := store.Connections(w.ctx, w.b.ID, alice.ID, now)
		require.NoError(t, err)
		require.Empty(t, conns)
		keptA(t)
	})
	t.Run("issuer.Store/CompanyConnections", func(t *testing.T) {
		conns, err := store.CompanyConnections(w.ctx, w.b.ID, now, 0, "", 100)
		require.NoError(t, err)
		require.Empty(t, conns)
		mine, err := store.CompanyConnections(w.ctx, w.a.ID, now, 0, "", 100)
		require.NoError(t, err)
		require.Len(t, mine, 1, "A sees its own")
		keptA(t)
	})
	t.Run("issuer.Store/SignIns", func(t *testing.T) {
		signIns, err := store.SignIns(w.ctx, w.b.ID, now, time.Time{}, 100)
		require.NoError(t, err)
		require.Empty(t, signIns)
		keptA(t)
	})
	// B storing the same signatures stores its own grants; A's stay A's.
	t.Run("issuer.Store/Create", func(t *testing.T) {
		reqB := grant("req_b", "https://agent.test/other", 0, now)
		require.NoError(t, store.CreateAuthorizeCodeSession(b, "sig_code", reqB))
		require.NoError(t, store.CreatePKCERequestSession(b, "sig_pkce", reqB))
		require.NoError(t, store.CreateAccessTokenSession(b, "sig_access", reqB))
		require.NoError(t, store.CreateRefreshTokenSession(b, "sig_refresh", "", reqB))
		got, err := store.GetAccessTokenSession(b, "sig_access", nil)
		require.NoError(t, err)
		require.Equal(t, "req_b", got.GetID())
		keptA(t)
	})
}
