package sealing_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sealing"
)

func TestParseKeyring(t *testing.T) {
	t.Parallel()
	one, two := sealing.NewKEK("one"), sealing.NewKEK("two")
	r, err := sealing.ParseKeyring(one + "," + two)
	require.NoError(t, err)
	require.Equal(t, "two", r.Current(), "the last is current")
	require.Equal(t, []string{"one", "two"}, r.IDs())

	// A file: one a line, comments and blank lines skipped.
	path := filepath.Join(t.TempDir(), "keks")
	require.NoError(t, os.WriteFile(path, []byte("# old, and new\n"+two+"\n\n# new\n"+one+"\n"), 0o600))
	r, err = sealing.ReadKeyring(path)
	require.NoError(t, err)
	require.Equal(t, "one", r.Current())

	_, err = sealing.ReadKeyring(filepath.Join(t.TempDir(), "none"))
	require.Error(t, err)

	key := one[len("one:"):]
	for name, text := range map[string]string{
		"empty":        "",
		"comment only": "# nothing\n",
		"no id":        key,
		"empty id":     ":" + key,
		"bad id":       "a b:" + key,
		"not base64":   "k:%%%",
		"short key":    "k:AAECAwQ=",
		"long key":     "k:" + key + "AAAA",
		"twice":        one + "\n" + "one:" + sealing.NewKEK("x")[2:],
	} {
		_, err := sealing.ParseKeyring(text)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), key, "%s: errors never quote a key", name)
	}
}
