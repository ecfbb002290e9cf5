package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewEmptyDatabase(t)
	env := func(k string) string {
		if k == "POPPYHOST_DATABASE_URL" {
			return dbURL
		}
		return ""
	}
	migrate := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, args, env, &out, &errOut)
		return out.String() + errOut.String(), err
	}

	out, err := migrate("status")
	require.NoError(t, err)
	require.Contains(t, out, " pending\n")
	require.NotContains(t, out, " applied\n")

	out, err = migrate("up")
	require.NoError(t, err)
	require.Contains(t, out, "up to date")
	out, err = migrate("status")
	require.NoError(t, err)
	require.NotContains(t, out, " pending\n")
	require.Contains(t, out, "00001_companies.sql")

	_, err = migrate("down")
	require.NoError(t, err)
	out, err = migrate("status")
	require.NoError(t, err)
	require.Contains(t, out, " pending\n")

	_, err = migrate("down", "--all")
	require.NoError(t, err)
	out, err = migrate("status")
	require.NoError(t, err)
	require.NotContains(t, out, " applied\n")

	for _, bad := range [][]string{{}, {"sideways"}, {"down", "zero"}, {"down", "-1"}, {"up", "extra"}} {
		_, err := migrate(bad...)
		require.Error(t, err, "%v", bad)
		require.Contains(t, err.Error(), "usage", "%v", bad)
	}
	var out2 bytes.Buffer
	err = run(ctx, []string{"up"}, func(string) string { return "" }, &out2, &out2)
	require.ErrorContains(t, err, "POPPYHOST_DATABASE_URL")
}

// TestSecretsCommands: up with a KEK seals what is stored in plaintext;
// reseal seals every data key under the newest KEK and needs the old one
// to open them.
func TestSecretsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	k1, k2 := sealing.NewKEK("k1"), sealing.NewKEK("k2")
	migrate := func(keks string, args ...string) (string, error) {
		env := map[string]string{"POPPYHOST_DATABASE_URL": dbURL, "POPPYHOST_KEKS": keks}
		var out, errOut bytes.Buffer
		err := run(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('shop', '{}') RETURNING id`).Scan(&id))
	_, err = pool.Exec(ctx, `INSERT INTO company_secrets (company_id, version, secret, created_at)
		VALUES ($1, 1, decode(repeat('ab', 32), 'hex'), now())`, id)
	require.NoError(t, err)

	out, err := migrate("", "up")
	require.NoError(t, err)
	require.Contains(t, out, "sealed when the server starts")
	out, err = migrate(k1, "up")
	require.NoError(t, err)
	require.Contains(t, out, "sealed 1 secrets stored in plaintext")
	var kek string
	require.NoError(t, pool.QueryRow(ctx, `SELECT kek_id FROM company_data_keys WHERE company_id = $1`, id).Scan(&kek))
	require.Equal(t, "k1", kek)

	_, err = migrate("", "reseal")
	require.ErrorContains(t, err, "no key-encryption key")
	_, err = migrate(k2, "reseal")
	require.ErrorContains(t, err, `KEK "k1", which is not configured`)
	out, err = migrate(k1+","+k2, "reseal")
	require.NoError(t, err)
	require.Contains(t, out, "resealed 1 data keys")
	require.Contains(t, out, "resealed data keys")
	require.NoError(t, pool.QueryRow(ctx, `SELECT kek_id FROM company_data_keys WHERE company_id = $1`, id).Scan(&kek))
	require.Equal(t, "k2", kek)
	out, err = migrate(k2, "reseal")
	require.NoError(t, err)
	require.Contains(t, out, "resealed 0 data keys")
}
