package testdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// leftoverAge is how old a test database or template must be before a
// test run drops it as left behind by a run that was killed: far longer
// than any run, so a run going on beside this one keeps its databases.
const leftoverAge = 6 * time.Hour

// Name prefixes of what the test kit creates.
const (
	testPrefix     = "poppyhost_test_"
	templatePrefix = "poppyhost_tpl_"
)

// dropLeftovers drops the databases whose names start with one of
// prefixes, other than keep, created before cutoff (by their PG_VERSION
// file's time, which needs a superuser or pg_read_server_files: without
// it nothing is dropped). It returns how many it dropped.
func dropLeftovers(ctx context.Context, conn *pgx.Conn, keep string, cutoff time.Time, prefixes ...string) (int, error) {
	var names []string
	for _, p := range prefixes {
		rows, err := conn.Query(ctx, `SELECT datname FROM pg_database
			WHERE starts_with(datname, $1) AND datname <> $2 AND NOT datistemplate
			AND (pg_stat_file('base/' || oid || '/PG_VERSION', true)).modification < $3`, p, keep, cutoff)
		if err != nil {
			return 0, err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return 0, err
		}
		names = append(names, found...)
	}
	dropped := 0
	for _, name := range names {
		// A database someone still uses by then is not left over.
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err == nil {
			dropped++
		}
	}
	return dropped, nil
}
