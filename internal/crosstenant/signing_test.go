package crosstenant_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

func TestSigning(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	keys := signing.NewKeys(w.pool, testdb.Sealer(w.pool), signing.Options{})
	signerA, err := keys.Signer(w.ctx, w.a.ID)
	require.NoError(t, err)
	secretA, err := keys.Secret(w.ctx, w.a.ID)
	require.NoError(t, err)
	token, err := keys.Sign(w.ctx, w.a.ID, "test+jwt", []byte(`{"sub": "a"}`))
	require.NoError(t, err)

	// keptA checks, as A on a replica with nothing cached, that A's key
	// and secret are as made and A's token verifies.
	keptA := func(t *testing.T) {
		t.Helper()
		fresh := signing.NewKeys(w.pool, testdb.Sealer(w.pool), signing.Options{})
		signer, err := fresh.Signer(w.ctx, w.a.ID)
		require.NoError(t, err)
		require.Equal(t, signerA.KeyID(), signer.KeyID())
		secret, err := fresh.Secret(w.ctx, w.a.ID)
		require.NoError(t, err)
		require.Equal(t, secretA, secret)
		payload, err := fresh.Verify(w.ctx, w.a.ID, "test+jwt", token)
		require.NoError(t, err)
		require.JSONEq(t, `{"sub": "a"}`, string(payload))
	}

	t.Run("signing.Keys/Verify", func(t *testing.T) {
		_, err := keys.Verify(w.ctx, w.b.ID, "test+jwt", token)
		require.Error(t, err, "A's token does not verify as B's")
		keptA(t)
	})
	t.Run("signing.Keys/Signer", func(t *testing.T) {
		signerB, err := keys.Signer(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.NotEqual(t, signerA.KeyID(), signerB.KeyID())
		keptA(t)
	})
	t.Run("signing.Keys/PublicSet", func(t *testing.T) {
		set, err := keys.PublicSet(w.ctx, w.b.ID)
		require.NoError(t, err)
		_, found := set.LookupKeyID(signerA.KeyID())
		require.False(t, found, "A's key is not among B's")
		keptA(t)
	})
	t.Run("signing.Keys/Secret", func(t *testing.T) {
		secretB, err := keys.Secret(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.False(t, bytes.Equal(secretA, secretB))
		keptA(t)
	})
	t.Run("signing.Keys/Rotate", func(t *testing.T) {
		before, err := keys.Signer(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.NoError(t, keys.Rotate(w.ctx, w.b.ID))
		after, err := signing.NewKeys(w.pool, testdb.Sealer(w.pool), signing.Options{}).Signer(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.NotEqual(t, before.KeyID(), after.KeyID(), "B's key rotated")
		keptA(t)
	})
	t.Run("signing.Keys/RotateSecret", func(t *testing.T) {
		before, err := keys.Secret(w.ctx, w.b.ID)
		require.NoError(t, err)
		_, err = keys.RotateSecret(w.ctx, w.b.ID, time.Now().Add(time.Hour))
		require.NoError(t, err)
		after, err := keys.Secret(w.ctx, w.b.ID)
		require.NoError(t, err)
		require.NotEqual(t, before, after, "B's secret rotated")
		rotatedA, err := signing.NewKeys(w.pool, testdb.Sealer(w.pool), signing.Options{}).RotatedSecrets(w.ctx, w.a.ID)
		require.NoError(t, err)
		require.Empty(t, rotatedA, "A's secret was not")
		keptA(t)
	})
	t.Run("signing.Keys/Sign", func(t *testing.T) {
		tokenB, err := keys.Sign(w.ctx, w.b.ID, "test+jwt", []byte(`{"sub": "b"}`))
		require.NoError(t, err)
		_, err = keys.Verify(w.ctx, w.a.ID, "test+jwt", tokenB)
		require.Error(t, err, "B's token does not verify as A's")
		keptA(t)
	})
	// Last: it leaves B unusable.
	t.Run("sealed rows copied to B", func(t *testing.T) {
		// A's sealed key and secret, copied into B's rows by someone with
		// the database, do not open as B's.
		_, err := keys.Signer(w.ctx, w.b.ID)
		require.NoError(t, err)
		_, err = w.pool.Exec(w.ctx, `UPDATE signing_keys b SET private_jwk_sealed = a.private_jwk_sealed
			FROM signing_keys a WHERE a.company_id = $1 AND a.retired_at IS NULL AND b.company_id = $2 AND b.retired_at IS NULL`,
			w.a.ID, w.b.ID)
		require.NoError(t, err)
		_, err = w.pool.Exec(w.ctx, `UPDATE company_secrets b SET secret_sealed = a.secret_sealed
			FROM company_secrets a WHERE a.company_id = $1 AND a.retired_at IS NULL AND b.company_id = $2 AND b.retired_at IS NULL`,
			w.a.ID, w.b.ID)
		require.NoError(t, err)
		fresh := signing.NewKeys(w.pool, testdb.Sealer(w.pool), signing.Options{})
		_, err = fresh.Signer(w.ctx, w.b.ID)
		require.ErrorIs(t, err, sealing.ErrOpen)
		_, err = fresh.Secret(w.ctx, w.b.ID)
		require.ErrorIs(t, err, sealing.ErrOpen)
		keptA(t)
	})
}
