package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/loadgen"
)

// TestFlags refuses a rate, a mix or a kind it cannot use before building
// or starting anything.
func TestFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-rate", "0"},
		{"-rate", "100,-5"},
		{"-rate", "fast"},
		{"-mix", "discovery=0.5,bogus=0.5"},
		{"-mix", "discovery=-1"},
		{"-mix", "discovery"},
	} {
		_, err := run(context.Background(), args, io.Discard)
		require.Error(t, err, "%v", args)
	}
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	m, err := parseMix("discovery=0.5, api_signed_in=0.5")
	require.NoError(t, err)
	require.Equal(t, map[loadgen.Kind]float64{loadgen.Discovery: 0.5, loadgen.SignedIn: 0.5}, m)
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable": "postgres://postgres@127.0.0.1:5432/lg_1?sslmode=disable",
		"postgres://u:p@db:5432": "postgres://u:p@db:5432/lg_1",
		"postgresql://u@db/x/y":  "postgresql://u@db/lg_1",
	} {
		require.Equal(t, want, withDatabase(in, "lg_1"), in)
	}
}
