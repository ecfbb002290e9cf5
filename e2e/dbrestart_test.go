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

	cluster, dir, dbURL := startPrivateCluster(ctx, t)

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

// startPrivateCluster starts a PostgreSQL cluster of the test's own (which
// a test may stop and start) with a migrated database, stopped when the
// test ends. It returns the cluster, its directory and the database's URL.
func startPrivateCluster(ctx context.Context, t *testing.T) (*pglocal.Cluster, string, string) {
	t.Helper()
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
	return cluster, dir, dbURL
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
	pg := newPGControl(t, dir)
	require.NoError(t, pg.start())
	t.Cleanup(func() { _ = pg.stop("fast") })
}

// pgControl stops and starts the pglocal cluster in a directory with
// pg_ctl, keeping the port in its poppyhost.conf: pglocal.Start would pick
// a new free port, which a server with a fixed database URL can never
// reach.
type pgControl struct {
	t    *testing.T
	dir  string
	ctl  string
	cred *syscall.Credential
}

func newPGControl(t *testing.T, dir string) *pgControl {
	t.Helper()
	bins, err := pglocal.FindBinaries()
	require.NoError(t, err)
	pg := &pgControl{t: t, dir: dir, ctl: bins.PGCtl}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err)
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return pg
}

// start starts the cluster and waits until it accepts connections.
func (pg *pgControl) start() error {
	return pg.run("start", "-l", filepath.Join(pg.dir, "server.log"), "-w", "-t", "60", "-s")
}

// stop stops the cluster with shutdown mode "fast" (connections are
// closed) or "immediate" (as a crash: recovery on the next start).
func (pg *pgControl) stop(mode string) error {
	return pg.run("stop", "-m", mode, "-w", "-s")
}

func (pg *pgControl) run(action string, args ...string) error {
	args = append([]string{action, "-D", filepath.Join(pg.dir, "data")}, args...)
	cmd := exec.Command(pg.ctl, args...)
	cmd.Dir = pg.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		pg.t.Logf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return err
}
