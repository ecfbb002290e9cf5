package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/pglocal"
)

// TestDatabaseRestart stops the server's PostgreSQL under a running server
// and starts it again on the same port: /healthz stays 200, /readyz and the
// admin API answer 503 while it is down, and both recover without a
// restart of the server (issue 9, docs/operations.md "When PostgreSQL is
// down").
func TestDatabaseRestart(t *testing.T) {
	requireBuilt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// As root the cluster runs as the postgres user, which must be able to
	// enter the directory.
	dir, err := os.MkdirTemp("", "poppyhost-e2e-pg")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	cluster, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })

	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE DATABASE poppyhost`)
	conn.Close(ctx)
	require.NoError(t, err)
	dbURL := cluster.URL("poppyhost")
	migrateUp(t, dbURL)

	caDir := t.TempDir()
	ca, err := devca.Load(caDir)
	require.NoError(t, err)
	s := startServer(t, "server", dbURL, caDir, ca)
	s.waitReady(t, 30*time.Second)
	require.Equal(t, http.StatusOK, s.probe("/healthz"))
	resp := s.admin(t, http.MethodPost, "/admin/v1/companies", companyBody("shop"))
	require.Equal(t, http.StatusCreated, resp.status, "create company: %s", resp.body)
	pid := s.cmd.Process.Pid

	// Down. pglocal.Stop is pg_ctl stop -m fast: connections are closed
	// and new ones refused.
	require.NoError(t, cluster.Stop(ctx))
	stopped := time.Now()
	waitFor(t, 5*time.Second, "/readyz 503 with the database down", func() bool {
		return s.probe("/readyz") == http.StatusServiceUnavailable
	})
	t.Logf("/readyz answered 503 %s after the stop", time.Since(stopped).Round(time.Millisecond))
	require.Equal(t, http.StatusOK, s.probe("/healthz"), "/healthz with the database down")

	// The pool still holds connections PostgreSQL closed on the way down;
	// a query on one fails with SQLSTATE 57P01, which is a 503 like a
	// refused connection, never a 500.
	for range 5 {
		resp = s.admin(t, http.MethodGet, "/admin/v1/companies/shop", nil)
		require.Equal(t, http.StatusServiceUnavailable, resp.status, "admin API with the database down: %s", resp.body)
	}
	require.Equal(t, "unavailable", resp.errorCode(), "%s", resp.body)
	require.Equal(t, "5", resp.header.Get("Retry-After"))
	for range 3 {
		resp = s.admin(t, http.MethodGet, "/admin/v1/companies/shop", nil)
		require.Equal(t, http.StatusServiceUnavailable, resp.status, "%s", resp.body)
	}
	require.True(t, s.running(), "server exited while the database was down")

	// Up again, on the same port: pglocal.Start would pick a new free port
	// (it rewrites data/poppyhost.conf on every start), which a server
	// with a fixed database URL can never reach, so start the same data
	// directory with pg_ctl, keeping the port in poppyhost.conf.
	startSamePort(t, dir)
	restarted := time.Now()
	waitFor(t, 30*time.Second, "/readyz 200 after the database is back", func() bool {
		return s.probe("/readyz") == http.StatusOK
	})
	t.Logf("/readyz answered 200 %s after the restart", time.Since(restarted).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "admin API 200 after the database is back", func() bool {
		resp = s.admin(t, http.MethodGet, "/admin/v1/companies/shop", nil)
		return resp.status == http.StatusOK
	})
	resp = s.admin(t, http.MethodPost, "/admin/v1/companies", companyBody("after"))
	require.Equal(t, http.StatusCreated, resp.status, "create company after the restart: %s", resp.body)
	require.True(t, s.running(), "server exited")
	require.Equal(t, pid, s.cmd.Process.Pid)
	require.Equal(t, http.StatusOK, s.probe("/healthz"))
}

// waitFor polls cond every 50 ms until it holds, failing the test after
// within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startSamePort starts the pglocal cluster in dir again with pg_ctl,
// without rewriting its port, and stops it when the test ends.
func startSamePort(t *testing.T, dir string) {
	t.Helper()
	bins, err := pglocal.FindBinaries()
	require.NoError(t, err)
	data := filepath.Join(dir, "data")
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err)
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	pgCtl := func(args ...string) error {
		cmd := exec.Command(bins.PGCtl, args...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("pg_ctl %v: %v\n%s", args, err, out)
		}
		return err
	}
	require.NoError(t, pgCtl("start", "-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "-s"))
	t.Cleanup(func() { _ = pgCtl("stop", "-D", data, "-m", "fast", "-w", "-s") })
}
