package sealing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// bundle is a test database with Companies, and KEKs to seal with.
type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	// k1 and k2 are two KEKs, as the operator writes them.
	k1, k2 string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{ctx: context.Background(), pool: testdb.NewPool(t), k1: sealing.NewKEK("k1"), k2: sealing.NewKEK("k2")}
}

// sealer returns a Sealer under the KEKs written in keks, as a replica
// configured with them has.
func (b *bundle) sealer(t *testing.T, keks string) *sealing.Sealer {
	t.Helper()
	ring, err := sealing.ParseKeyring(keks)
	require.NoError(t, err)
	return sealing.New(b.pool, ring, nil)
}

// company inserts a Company and returns its ID.
func (b *bundle) company(t *testing.T, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id`, slug).Scan(&id))
	return id
}

// kekOf is the id of the KEK the Company's data key is sealed under.
func (b *bundle) kekOf(t *testing.T, companyID int64) string {
	t.Helper()
	var id string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT kek_id FROM company_data_keys WHERE company_id = $1`, companyID).Scan(&id))
	return id
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestSealOpen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, c := b.company(t, "alpha"), b.company(t, "beta")
	s := b.sealer(t, b.k1)
	secret := []byte("a secret of thirty-two bytes....")

	sealed, err := s.Seal(b.ctx, a, sealing.CompanySecret, "1", secret)
	require.NoError(t, err)
	require.False(t, bytes.Contains(sealed, secret))
	again, err := s.Seal(b.ctx, a, sealing.CompanySecret, "1", secret)
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce each time")

	// Opened here and by another replica, which reads the data key.
	got, err := s.Open(b.ctx, a, sealing.CompanySecret, "1", sealed)
	require.NoError(t, err)
	require.Equal(t, secret, got)
	got, err = b.sealer(t, b.k1).Open(b.ctx, a, sealing.CompanySecret, "1", sealed)
	require.NoError(t, err)
	require.Equal(t, secret, got)

	// Bound to the Company, the column and the row: moved, it does not
	// open.
	for name, open := range map[string]func() ([]byte, error){
		"another Company": func() ([]byte, error) { return s.Open(b.ctx, c, sealing.CompanySecret, "1", sealed) },
		"another column":  func() ([]byte, error) { return s.Open(b.ctx, a, sealing.WebhookSecret, "1", sealed) },
		"another row":     func() ([]byte, error) { return s.Open(b.ctx, a, sealing.CompanySecret, "2", sealed) },
	} {
		_, err := open()
		require.ErrorIs(t, err, sealing.ErrOpen, name)
	}

	// Tampered, it does not open.
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		_, err := s.Open(b.ctx, a, sealing.CompanySecret, "1", bad)
		require.ErrorIs(t, err, sealing.ErrOpen, "byte %d", i)
	}
	for _, bad := range [][]byte{nil, {}, sealed[:1], sealed[:len(sealed)-1], append(bytes.Clone(sealed), 0)} {
		_, err := s.Open(b.ctx, a, sealing.CompanySecret, "1", bad)
		require.ErrorIs(t, err, sealing.ErrOpen)
	}

	// A data key moved to another Company does not open either.
	_, err = s.Seal(b.ctx, c, sealing.CompanySecret, "1", secret)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE company_data_keys SET sealed_key = (SELECT sealed_key FROM company_data_keys WHERE company_id = $1)
		WHERE company_id = $2`, a, c)
	require.NoError(t, err)
	_, err = b.sealer(t, b.k1).Open(b.ctx, c, sealing.CompanySecret, "1", sealed)
	require.ErrorIs(t, err, sealing.ErrOpen)
}

// TestFirstUseRace: replicas making a Company's first data key at once
// settle on one, which opens what each sealed.
func TestFirstUseRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.company(t, "alpha")
	sealed := make([][]byte, 8)
	errs := make([]error, len(sealed))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sealed {
		s := b.sealer(t, b.k1)
		wg.Go(func() {
			<-start
			sealed[i], errs[i] = s.Seal(b.ctx, a, sealing.WebhookSecret, "", []byte{byte(i)})
		})
	}
	close(start)
	wg.Wait()
	s := b.sealer(t, b.k1)
	for i := range sealed {
		require.NoError(t, errs[i])
		got, err := s.Open(b.ctx, a, sealing.WebhookSecret, "", sealed[i])
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, got)
	}
}

func TestWrongOrMissingKEK(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.company(t, "alpha")
	sealed, err := b.sealer(t, b.k1).Seal(b.ctx, a, sealing.CompanySecret, "1", []byte("x"))
	require.NoError(t, err)
	require.NoError(t, b.sealer(t, b.k1).Check(b.ctx))

	// Another key under the same id.
	wrong := b.sealer(t, "k1:"+sealing.NewKEK("k1")[3:])
	err = wrong.Check(b.ctx)
	require.ErrorIs(t, err, sealing.ErrOpen)
	require.ErrorContains(t, err, `KEK "k1"`)
	_, err = wrong.Open(b.ctx, a, sealing.CompanySecret, "1", sealed)
	require.ErrorIs(t, err, sealing.ErrOpen)

	// The KEK missing from the configuration.
	missing := b.sealer(t, b.k2)
	err = missing.Check(b.ctx)
	require.ErrorContains(t, err, `KEK "k1", which is not configured`)
	_, err = missing.Open(b.ctx, a, sealing.CompanySecret, "1", sealed)
	require.ErrorContains(t, err, "not configured")
}

func TestKEKRotationAndReseal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.sealer(t, b.k1)
	ids := []int64{b.company(t, "alpha"), b.company(t, "beta"), b.company(t, "gamma")}
	sealed := make([][]byte, len(ids))
	for i, id := range ids {
		var err error
		sealed[i], err = old.Seal(b.ctx, id, sealing.SigningKey, "kid", []byte{byte(i)})
		require.NoError(t, err)
	}

	// A new KEK: new data keys are sealed under it, the old ones still
	// open.
	both := b.sealer(t, b.k1+"\n"+b.k2)
	require.NoError(t, both.Check(b.ctx))
	delta := b.company(t, "delta")
	_, err := both.Seal(b.ctx, delta, sealing.SigningKey, "kid", []byte("d"))
	require.NoError(t, err)
	require.Equal(t, "k2", b.kekOf(t, delta))
	for i, id := range ids {
		require.Equal(t, "k1", b.kekOf(t, id))
		got, err := both.Open(b.ctx, id, sealing.SigningKey, "kid", sealed[i])
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, got)
	}

	// Reseal leaves nothing under k1, and k2 alone opens everything.
	var logs bytes.Buffer
	n, err := b.sealer(t, b.k1+","+b.k2).Reseal(b.ctx, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	require.Contains(t, logs.String(), "resealed data keys")
	var left int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM company_data_keys WHERE kek_id <> 'k2'`).Scan(&left))
	require.Zero(t, left)
	only := b.sealer(t, b.k2)
	require.NoError(t, only.Check(b.ctx))
	for i, id := range ids {
		got, err := only.Open(b.ctx, id, sealing.SigningKey, "kid", sealed[i])
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, got)
	}
	require.Error(t, b.sealer(t, b.k1).Check(b.ctx), "k1 opens nothing now")

	// Again: nothing to do.
	n, err = b.sealer(t, b.k2).Reseal(b.ctx, discard)
	require.NoError(t, err)
	require.Zero(t, n)
}
