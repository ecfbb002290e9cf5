package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

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
