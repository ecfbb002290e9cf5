package console

import (
	"context"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestStoreTenants calls every unexported method of the Store as Company
// B on what Company A made: B finds nothing and changes nothing, and A's
// data is then read back as A unchanged (the exported methods are in
// internal/crosstenant).
func TestStoreTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewPool(t)
	companies := tenant.NewStore(pool)
	company := func(slug string) *tenant.Company {
		s := tenant.DefaultSettings()
		s.Organization = tenant.Organization{Name: slug, Domain: slug + ".example"}
		c, err := companies.Create(ctx, slug, s)
		require.NoError(t, err)
		return c
	}
	a, b := company("alpha"), company("bravo")
	store := NewStore(pool, accounts.NewStore(pool))
	ada, err := store.Create(ctx, a.ID, "ada@example.com", "Ada", RoleOwner, "correct horse")
	require.NoError(t, err)
	// ada as B would name her: B's id, her staff id.
	asB := ada
	asB.CompanyID, asB.CompanySlug = b.ID, b.Slug
	now := time.Now()

	hash := tokenHash("ada's session")
	require.NoError(t, store.createSession(ctx, ada, hash, true, now))
	require.NoError(t, store.setTOTP(ctx, ada, []byte("sealed"), 7))
	cred := &webauthn.Credential{ID: []byte("ada's passkey"), PublicKey: []byte("key")}
	require.NoError(t, store.addPasskey(ctx, ada, cred, "laptop"))
	key := ceremonyKey(ceremonyRegister, "ada's session")
	require.NoError(t, store.saveCeremony(ctx, a.ID, key, ceremony{StaffID: ada.ID}, now))
	invite, err := store.CreateInvite(ctx, Invite{CompanyID: a.ID, Email: "joan@example.com", Role: RoleAgent,
		ExpiresAt: now.Add(time.Hour)}, ada.ID)
	require.NoError(t, err)

	keptA := func(t *testing.T) {
		t.Helper()
		s, err := store.session(ctx, a, hash, now, time.Hour, time.Hour)
		require.NoError(t, err)
		require.Equal(t, ada.ID, s.member.ID)
		require.True(t, s.secondFactor)
		sealed, last, err := store.totpSecret(ctx, ada)
		require.NoError(t, err)
		require.Equal(t, []byte("sealed"), sealed)
		require.Equal(t, uint64(7), last)
		u, err := store.passkeyUser(ctx, a.ID, ada.ID)
		require.NoError(t, err)
		require.Len(t, u.creds, 1)
		_, err = store.peekCeremony(ctx, a.ID, key, now)
		require.NoError(t, err)
		_, err = store.invite(ctx, a.ID, invite, now)
		require.NoError(t, err)
		list, err := store.List(ctx, a.ID)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, RoleOwner, list[0].Role)
	}

	t.Run("session", func(t *testing.T) {
		_, err := store.session(ctx, b, hash, now, time.Hour, time.Hour)
		require.ErrorIs(t, err, ErrNotFound)
		keptA(t)
	})
	t.Run("deleteSession, deleteSessions, failSecond, promote", func(t *testing.T) {
		require.NoError(t, store.deleteSession(ctx, b.ID, hash))
		require.NoError(t, store.deleteSessions(ctx, b.ID, ada.ID))
		ended, err := store.failSecond(ctx, b.ID, hash, 1)
		require.NoError(t, err)
		require.True(t, ended, "not B's to count")
		require.ErrorIs(t, store.promote(ctx, asB, hash, tokenHash("new"), now), ErrNotFound)
		keptA(t)
	})
	t.Run("passkeyUser, passkeyUserByHandle, passkeys", func(t *testing.T) {
		_, err := store.passkeyUser(ctx, b.ID, ada.ID)
		require.ErrorIs(t, err, ErrNotFound)
		u, err := store.passkeyUser(ctx, a.ID, ada.ID)
		require.NoError(t, err)
		_, err = store.passkeyUserByHandle(ctx, b.ID, u.handle)
		require.ErrorIs(t, err, ErrNotFound)
		list, err := store.passkeys(ctx, asB)
		require.NoError(t, err)
		require.Empty(t, list)
		keptA(t)
	})
	t.Run("usedPasskey, removePasskey, addPasskey", func(t *testing.T) {
		used := *cred
		used.Authenticator.SignCount = 99
		require.NoError(t, store.usedPasskey(ctx, asB, &used, now))
		u, err := store.passkeyUser(ctx, a.ID, ada.ID)
		require.NoError(t, err)
		require.Zero(t, u.creds[0].Authenticator.SignCount)
		list, err := store.passkeys(ctx, ada)
		require.NoError(t, err)
		require.ErrorIs(t, store.removePasskey(ctx, asB, list[0].ID), ErrNotFound)
		// Nor can B add a passkey for A's member.
		require.ErrorIs(t, store.addPasskey(ctx, asB, &webauthn.Credential{ID: []byte("x")}, "x"), ErrNotFound)
		keptA(t)
	})
	t.Run("ceremonies", func(t *testing.T) {
		_, err := store.peekCeremony(ctx, b.ID, key, now)
		require.ErrorIs(t, err, ErrNotFound)
		_, err = store.takeCeremony(ctx, b.ID, key, now)
		require.ErrorIs(t, err, ErrNotFound)
		keptA(t)
	})
	t.Run("factors, totpSecret, acceptTOTPStep, setTOTP", func(t *testing.T) {
		_, _, err := store.factors(ctx, asB)
		require.ErrorIs(t, err, ErrNotFound)
		_, _, err = store.totpSecret(ctx, asB)
		require.ErrorIs(t, err, ErrNotFound)
		ok, err := store.acceptTOTPStep(ctx, asB, 100)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, store.setTOTP(ctx, asB, []byte("mallory's"), 100))
		keptA(t)
	})
	t.Run("invite", func(t *testing.T) {
		_, err := store.invite(ctx, b.ID, invite, now)
		require.ErrorIs(t, err, ErrNotFound)
		keptA(t)
	})
}
