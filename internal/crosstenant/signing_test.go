package crosstenant_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
}
