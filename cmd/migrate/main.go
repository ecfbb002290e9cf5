// Command migrate brings a poppyhost database to the schema this build
// expects: River's migrations and poppyhost's own.
//
//	migrate up             apply every pending migration
//	migrate down [N]       roll back poppyhost's last N migrations (default 1)
//	migrate down --all     roll back every migration, River's too
//	migrate status         list migrations and whether each is applied
//	migrate reseal         seal every Company's data key under the newest KEK
//
// The database is POPPYHOST_DATABASE_URL, or --database-url. The
// key-encryption keys are POPPYHOST_KEKS or the file POPPYHOST_KEK_FILE
// (--kek-file), as the server takes them: up, given them, also seals the
// secrets still stored in plaintext, which the server otherwise does at
// start; reseal needs them, the newest last (docs/operations.md,
// "Secrets").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/config"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "migrate:", err)
		}
		os.Exit(2)
	}
}

const usage = `usage: migrate [--database-url URL] [--kek-file FILE] up | down [N] | down --all | status | reseal`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage); fs.PrintDefaults() }
	dbURL := fs.String("database-url", getenv("POPPYHOST_DATABASE_URL"), "PostgreSQL URL (env POPPYHOST_DATABASE_URL)")
	kekFile := fs.String("kek-file", getenv("POPPYHOST_KEK_FILE"), "file of key-encryption keys (env POPPYHOST_KEK_FILE; or POPPYHOST_KEKS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		return errors.New(usage)
	}
	if *dbURL == "" {
		return errors.New("no database: set POPPYHOST_DATABASE_URL or --database-url")
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	m, err := migrations.New(pool, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	where := config.MaskDatabaseURL(*dbURL)

	keks := config.Config{KEKs: getenv("POPPYHOST_KEKS"), KEKFile: *kekFile}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	switch {
	case cmd[0] == "up" && len(cmd) == 1:
		if err := m.Up(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s is up to date\n", where)
		if keks.KEKs == "" && keks.KEKFile == "" {
			fmt.Fprintln(stdout, "no KEK given: secrets still in plaintext, if any, are sealed when the server starts")
			return nil
		}
		sealer, err := openSecrets(ctx, pool, keks)
		if err != nil {
			return err
		}
		n, err := sealer.SealPlaintext(ctx, logger)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "sealed %d secrets stored in plaintext\n", n)
	case cmd[0] == "reseal" && len(cmd) == 1:
		if err := m.Check(ctx); err != nil {
			return err
		}
		sealer, err := openSecrets(ctx, pool, keks)
		if err != nil {
			return err
		}
		n, err := sealer.Reseal(ctx, logger)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resealed %d data keys under the newest KEK; the older KEKs may be removed\n", n)
	case cmd[0] == "down" && len(cmd) <= 2:
		steps, all := 1, false
		if len(cmd) == 2 {
			if cmd[1] == "--all" {
				all = true
			} else if steps, err = strconv.Atoi(cmd[1]); err != nil || steps < 1 {
				return fmt.Errorf("down takes a positive number of steps or --all\n%s", usage)
			}
		}
		if err := m.Down(ctx, steps, all); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rolled back %s\n", where)
	case cmd[0] == "status" && len(cmd) == 1:
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tVERSION\tNAME\tSTATE")
		for _, s := range st {
			state := "pending"
			if s.Applied {
				state = "applied"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Source, s.Version, s.Name, state)
		}
		return tw.Flush()
	default:
		return errors.New(usage)
	}
	return nil
}

// openSecrets returns a Sealer under the given KEKs once they open the
// stored data keys.
func openSecrets(ctx context.Context, pool *pgxpool.Pool, keks config.Config) (*sealing.Sealer, error) {
	ring, err := keks.Keyring()
	if err != nil {
		return nil, err
	}
	sealer := sealing.New(pool, ring, nil)
	if err := sealer.Check(ctx); err != nil {
		return nil, err
	}
	return sealer, nil
}
