package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/pglocal"
	"github.com/poppyhost/poppyhost/migrations"
)

// server is the PostgreSQL server tests create their databases on, found
// once per test binary.
var server = sync.OnceValues(findServer)

const defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=3"

func findServer() (string, error) {
	if u := os.Getenv("POPPYHOST_TEST_DATABASE_URL"); u != "" {
		return u, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, defaultServerURL); err == nil {
		conn.Close(ctx)
		return defaultServerURL, nil
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(os.TempDir(), "poppyhost-test-pg")})
	if err != nil {
		return "", fmt.Errorf("no PostgreSQL for tests: set POPPYHOST_TEST_DATABASE_URL, run one on 127.0.0.1:5432, or install the server binaries: %w", err)
	}
	return c.URL("postgres"), nil
}

// ServerURL returns the URL of the test PostgreSQL server's postgres
// database, failing the test when there is none.
func ServerURL(t testing.TB) string {
	t.Helper()
	u, err := server()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// withDatabase returns serverURL pointed at database name.
func withDatabase(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

// template is the name of the migrated template database for this build's
// migrations; it is made once and shared by every test process.
var template = sync.OnceValues(makeTemplate)

// schemaHash names the template after the migrations it holds, so a change
// to them makes a new template instead of reusing a stale one.
func schemaHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), path)
		fmt.Fprintf(h, "%s\x00%s\x00", path, b)
		return err
	})
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/riverqueue/river" {
				fmt.Fprintf(h, "river %s", dep.Version)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

func makeTemplate() (string, error) {
	srv, err := server()
	if err != nil {
		return "", err
	}
	hash, err := schemaHash()
	if err != nil {
		return "", err
	}
	name := templatePrefix + hash
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	// What killed runs left behind goes first; failing to is no reason
	// not to test.
	_, _ = dropLeftovers(ctx, conn, name, time.Now().Add(-leftoverAge), testPrefix, templatePrefix)
	// Test binaries run in parallel: one makes the template, the others wait.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, name); err != nil {
		return "", err
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+building+` WITH (FORCE)`); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+building); err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, withDatabase(srv, building))
	if err != nil {
		return "", err
	}
	m, err := migrations.New(pool, nil)
	if err == nil {
		err = m.Up(ctx)
		m.Close()
	}
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrating the template database: %w", err)
	}
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+building+` RENAME TO `+name); err != nil {
		return "", err
	}
	return name, nil
}

// NewDatabase creates a fresh, migrated database for the test, dropped when
// the test ends, and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	tpl, err := template()
	if err != nil {
		t.Fatalf("test database template: %v", err)
	}
	return createDatabase(t, ` TEMPLATE `+tpl)
}

// NewPool returns a pool on a fresh database for the test, closed when the
// test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewEmptyDatabase creates a database without any migrations for the test,
// dropped when the test ends, and returns its URL.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return createDatabase(t, "")
}

// createDatabase creates a database with a random name and the given
// CREATE DATABASE options, dropped when the test ends, and returns its URL.
func createDatabase(t testing.TB, options string) string {
	t.Helper()
	srv := ServerURL(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := testPrefix + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name+options); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, srv, name) })
	return withDatabase(srv, name)
}

func dropDatabase(t testing.TB, srv, name string) {
	conn, err := pgx.Connect(context.Background(), srv)
	if err != nil {
		t.Errorf("drop test database: %v", err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		t.Errorf("drop test database: %v", err)
	}
}
