package pglocal

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// clusterDir returns a fresh cluster directory whose parent the postgres
// system user can traverse: t.TempDir is mode 0700 and owned by us, which
// locks that user out when the tests run as root.
func clusterDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "pglocal-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	return filepath.Join(base, "pg")
}

func requireBinaries(t *testing.T) {
	t.Helper()
	if _, err := FindBinaries(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
}

func selectOne(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&n))
	require.Equal(t, 1, n)
}

func TestStartReuseStop(t *testing.T) {
	requireBinaries(t)
	dir := clusterDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Two concurrent starts of a fresh dir: the lock makes one initialise
	// and start the server and the other reuse it.
	clusters := make([]*Cluster, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() { clusters[i], errs[i] = Start(ctx, Options{Dir: dir}) })
	}
	wg.Wait()
	for i, c := range clusters {
		require.NoError(t, errs[i])
		// Safety net should an assertion fail before the explicit Stop.
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
	}
	owner, reuser := clusters[0], clusters[1]
	if !owner.started {
		owner, reuser = reuser, owner
	}
	require.True(t, owner.started)
	require.False(t, reuser.started)
	require.Equal(t, owner.URL("postgres"), reuser.URL("postgres"))
	require.FileExists(t, filepath.Join(dir, "data", "PG_VERSION"))
	require.FileExists(t, filepath.Join(dir, "server.log"))

	selectOne(ctx, t, owner.URL("postgres"))

	// A later Start (as another test binary would do) reuses it as well.
	again, err := Start(ctx, Options{Dir: dir})
	require.NoError(t, err)
	require.False(t, again.started)
	require.Equal(t, owner.URL("postgres"), again.URL("postgres"))

	// Stopping a reused cluster leaves the server alone.
	require.NoError(t, reuser.Stop(ctx))
	selectOne(ctx, t, owner.URL("postgres"))

	require.NoError(t, owner.Stop(ctx))
	require.False(t, accepts(ctx, owner.port, time.Second))
	require.NoFileExists(t, filepath.Join(dir, "poppyhost-port"))
	require.NoError(t, owner.Stop(ctx), "second Stop is a no-op")

	// Starting the now-stopped cluster again skips initdb and works.
	restarted, err := Start(ctx, Options{Dir: dir})
	require.NoError(t, err)
	require.True(t, restarted.started)
	selectOne(ctx, t, restarted.URL("postgres"))
	require.NoError(t, restarted.Stop(ctx))
}

func TestStartRejectsUnreachableDirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the cluster to the postgres user")
	}
	requireBinaries(t)
	base, err := os.MkdirTemp("", "pglocal-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o700))

	_, err = Start(context.Background(), Options{Dir: filepath.Join(base, "pg")})
	require.ErrorContains(t, err, "cannot enter "+base)
}

func TestStartRequiresDir(t *testing.T) {
	_, err := Start(context.Background(), Options{})
	require.ErrorContains(t, err, "Dir is required")
}

func TestURL(t *testing.T) {
	c := &Cluster{port: 54321}
	require.Equal(t, "postgres://postgres@127.0.0.1:54321/app?sslmode=disable", c.URL("app"))
	require.Equal(t, "postgres://postgres@127.0.0.1:54321/my%20db?sslmode=disable", c.URL("my db"))
}

func TestFindBinariesNotFound(t *testing.T) {
	t.Setenv("PATH", "")
	_, err := findBinaries(filepath.Join(t.TempDir(), "does-not-exist"))
	require.EqualError(t, err, "PostgreSQL server binaries (initdb, pg_ctl) not found; install them with: apt-get install postgresql")
}

func TestFindBinariesPicksHighestVersion(t *testing.T) {
	root := t.TempDir()
	install := func(version string, programs ...string) {
		bin := filepath.Join(root, version, "bin")
		require.NoError(t, os.MkdirAll(bin, 0o755))
		for _, p := range programs {
			require.NoError(t, os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755))
		}
	}
	all := []string{"initdb", "pg_ctl", "postgres"}
	install("9.6", all...)
	install("13", all...)
	install("15", all...)
	install("16", "initdb", "pg_ctl") // incomplete: skipped

	t.Setenv("PATH", "")
	b, err := findBinaries(root)
	require.NoError(t, err)
	want := filepath.Join(root, "15", "bin")
	require.Equal(t, Binaries{
		InitDB:   filepath.Join(want, "initdb"),
		PGCtl:    filepath.Join(want, "pg_ctl"),
		Postgres: filepath.Join(want, "postgres"),
	}, b)

	// PATH takes precedence over the versioned directories.
	t.Setenv("PATH", filepath.Join(root, "9.6", "bin"))
	b, err = findBinaries(root)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "9.6", "bin", "initdb"), b.InitDB)
}

func TestLastLines(t *testing.T) {
	require.Equal(t, "    (no output)", lastLines(nil, 3))
	require.Equal(t, "    c\n    d", lastLines([]byte("a\nb\nc\nd\n"), 2))
}
