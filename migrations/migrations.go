// Package migrations holds poppyhost's numbered SQL migrations (embedded)
// and applies them together with River's, so one command brings a database
// to the schema this build expects.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// gooseTable is where goose records which of our migrations are applied.
const gooseTable = "poppyhost_migrations"

// Migrator applies poppyhost's migrations and River's to one database.
type Migrator struct {
	pool  *pgxpool.Pool
	db    *sql.DB
	goose *goose.Provider
	river *rivermigrate.Migrator[pgx.Tx]
}

// New returns a Migrator on pool. logger may be nil. Close it when done.
func New(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	opts := []goose.ProviderOption{goose.WithTableName(gooseTable), goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, opts...)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	rcfg := &rivermigrate.Config{}
	if logger != nil {
		rcfg.Logger = logger
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), rcfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: river: %w", err)
	}
	return &Migrator{pool: pool, db: db, goose: p, river: rm}, nil
}

// Close releases the database handle the Migrator opened (not the pool).
func (m *Migrator) Close() error { return m.db.Close() }

// lockKey is the advisory lock that serialises concurrent Up calls, such as
// a Helm migration job racing a developer's server.
const lockKey = 7_203_114_905

// Up applies River's pending migrations, then ours.
func (m *Migrator) Up(ctx context.Context) error {
	// The lock lives on its own connection: waiting on it must not hold one
	// of the pool's, which the migrations themselves need.
	conn, err := pgx.ConnectConfig(ctx, m.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("migrate up: lock: %w", err)
	}
	rres, err := m.river.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate river up: %w", err)
	}
	results, err := m.goose.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	var touched []string
	for _, r := range results {
		b, err := fs.ReadFile(files, r.Source.Path)
		if err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
		touched = append(touched, Tables(string(b))...)
	}
	if len(rres.Versions) > 0 {
		// River's migrations are not ours to read: its tables are river_*.
		rows, err := m.pool.Query(ctx, `SELECT tablename FROM pg_tables
			WHERE schemaname = current_schema() AND tablename LIKE 'river\_%'`)
		if err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
		river, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
		touched = append(touched, river...)
	}
	return m.analyze(ctx, touched)
}

// analyze runs ANALYZE on each of tables that exists and has rows, so the
// planner has statistics for what a migration made or changed before the
// first request (docs/decisions.md, "Query plans that hold").
func (m *Migrator) analyze(ctx context.Context, tables []string) error {
	seen := map[string]bool{}
	for _, t := range tables {
		if seen[t] {
			continue
		}
		seen[t] = true
		var exists bool
		if err := m.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
			return fmt.Errorf("migrate up: analyze: %w", err)
		}
		name := pgx.Identifier{t}.Sanitize()
		if exists {
			// An empty table is left unanalyzed: PostgreSQL plans a table
			// never analyzed as at least ten pages, while one analyzed
			// empty is planned at its size, which makes a sequential scan
			// the cheapest plan until autovacuum analyzes it again.
			err := m.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+name+`)`).Scan(&exists)
			if err != nil {
				return fmt.Errorf("migrate up: analyze: %w", err)
			}
		}
		if !exists {
			continue
		}
		if _, err := m.pool.Exec(ctx, "ANALYZE "+name); err != nil {
			return fmt.Errorf("migrate up: analyze %s: %w", t, err)
		}
	}
	return nil
}

// touches finds the tables a statement creates, alters, indexes or
// writes.
var touches = regexp.MustCompile(`(?is)\b(?:CREATE\s+(?:UNLOGGED\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?` +
	`|ALTER\s+TABLE(?:\s+IF\s+EXISTS)?(?:\s+ONLY)?` +
	`|CREATE\s+(?:UNIQUE\s+)?INDEX(?:\s+CONCURRENTLY)?(?:\s+IF\s+NOT\s+EXISTS)?\s+\w+\s+ON` +
	`|UPDATE|INSERT\s+INTO)\s+([a-z_][a-z0-9_]*)`)

// comments are SQL's line comments, whose prose may say UPDATE.
var comments = regexp.MustCompile(`--[^\n]*`)

// Tables lists the tables the Up section of a migration creates or
// changes: made, altered, indexed or written.
func Tables(migration string) []string {
	up, _, _ := strings.Cut(migration, "-- +goose Down")
	up = comments.ReplaceAllString(up, "")
	var out []string
	for _, m := range touches.FindAllStringSubmatch(up, -1) {
		out = append(out, strings.ToLower(m[1]))
	}
	return out
}

// Down rolls back our most recent steps migrations. With all, it rolls back
// every one of ours and then River's, leaving an empty schema.
func (m *Migrator) Down(ctx context.Context, steps int, all bool) error {
	if all {
		if _, err := m.goose.DownTo(ctx, 0); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
		if _, err := m.river.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
			return fmt.Errorf("migrate river down: %w", err)
		}
		return nil
	}
	for range steps {
		if _, err := m.goose.Down(ctx); err != nil {
			if errors.Is(err, goose.ErrNoNextVersion) {
				return nil
			}
			return fmt.Errorf("migrate down: %w", err)
		}
	}
	return nil
}

// Status describes one migration and whether it is applied.
type Status struct {
	Source  string // "poppyhost" or "river"
	Version int64
	Name    string
	Applied bool
}

// Status lists River's migrations and ours, each marked applied or pending.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	var out []Status
	existing, err := m.river.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("river migration status: %w", err)
	}
	applied := map[int]bool{}
	for _, e := range existing {
		applied[e.Version] = true
	}
	for _, v := range m.river.AllVersions() {
		out = append(out, Status{Source: "river", Version: int64(v.Version), Name: v.Name, Applied: applied[v.Version]})
	}
	ours, err := m.goose.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	for _, s := range ours {
		out = append(out, Status{Source: "poppyhost", Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}

// ErrPending is returned by Check when the database is behind this build.
var ErrPending = errors.New("database schema is not current")

// Check returns ErrPending (wrapped with what is missing) unless every
// migration of River's and ours is applied.
func (m *Migrator) Check(ctx context.Context) error {
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	for _, s := range st {
		if !s.Applied {
			return fmt.Errorf("%w: %s migration %d (%s) is not applied", ErrPending, s.Source, s.Version, s.Name)
		}
	}
	return nil
}
