// Command loadgen runs the platform's server binary on a fresh database and
// drives it with an open-loop mix of Personal Agent traffic at a set rate,
// then prints throughput and latency per kind and the server's CPU and
// memory (internal/loadgen). It exits 1 when any request failed.
//
//	go run ./cmd/loadgen -rate 200 -duration 30s
//	go run ./cmd/loadgen -rate 100,200,300 -duration 20s -json out.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) (failed bool, err error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	rates := fs.String("rate", "50", "requests per second of all kinds together; a comma-separated list runs each in turn, each on a fresh platform")
	duration := fs.Duration("duration", 10*time.Second, "how long each rate is measured")
	warmup := fs.Duration("warmup", 5*time.Second, "how long each rate runs before it is measured")
	replicas := fs.Int("replicas", 1, "server processes on the one database")
	mix := fs.String("mix", "", "kind=share,... (default: "+mixText(loadgen.DefaultMix)+")")
	users := fs.Int("users", 0, "signed-in Users (default 20)")
	chains := fs.Int("chains", 0, "separate sign-ins whose refresh tokens the refreshes rotate (default 32)")
	sessions := fs.Int("sessions", 0, "signed-out Sessions (default 50)")
	convs := fs.Int("conversations", 0, "conversations, one reader each (default 10)")
	jsonOut := fs.String("json", "", "also write the reports as JSON to this file")
	serverBin := fs.String("server-bin", "", "the built cmd/server (default: go build it)")
	migrateBin := fs.String("migrate-bin", "", "the built cmd/migrate (default: go build it)")
	serverLog := fs.String("server-log", "", "write the servers' logs to this file")
	serverEnv := fs.String("server-env", "", "more settings for the servers, NAME=value,... (e.g. POPPYHOST_OVERLOAD_DELAY=0s)")
	pg := fs.String("postgres", defaultPostgres(), "PostgreSQL server URL (postgres://...); each run creates and drops its own database")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	o := loadgen.Options{Duration: *duration, Warmup: *warmup, Users: *users, Chains: *chains, Sessions: *sessions,
		Conversations: *convs}
	o.Replicas = *replicas
	if *serverEnv != "" {
		o.ServerEnv = map[string]string{}
		for _, kv := range strings.Split(*serverEnv, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || !strings.HasPrefix(k, "POPPYHOST_") {
				return false, fmt.Errorf("-server-env: %q is not POPPYHOST_NAME=value", kv)
			}
			o.ServerEnv[k] = v
		}
	}
	if *mix != "" {
		if o.Mix, err = parseMix(*mix); err != nil {
			return false, err
		}
	}
	var list []float64
	for _, f := range strings.Split(*rates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return false, fmt.Errorf("-rate: %q is not a positive number", f)
		}
		list = append(list, r)
	}
	if *serverBin == "" || *migrateBin == "" {
		dir, err := os.MkdirTemp("", "poppyhost-loadgen-bin")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		root, err := moduleRoot()
		if err != nil {
			return false, err
		}
		built, err := loadgen.Build(ctx, root, dir)
		if err != nil {
			return false, err
		}
		*serverBin, *migrateBin = built.ServerBin, built.MigrateBin
	}
	o.ServerBin, o.MigrateBin = *serverBin, *migrateBin
	if *serverLog != "" {
		f, err := os.Create(*serverLog)
		if err != nil {
			return false, err
		}
		defer f.Close()
		o.Output = f
	}
	var reports []*loadgen.Report
	for _, r := range list {
		o.Rate = r
		rep, err := runOnce(ctx, *pg, o)
		if err != nil {
			return false, err
		}
		if err := rep.WriteText(stdout); err != nil {
			return false, err
		}
		fmt.Fprintln(stdout)
		failed = failed || rep.Failures() > 0
		reports = append(reports, rep)
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(reports, "", "  ")
		if err != nil {
			return false, err
		}
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return false, err
		}
	}
	return failed, nil
}

// runOnce runs one rate on a database of its own.
func runOnce(ctx context.Context, pg string, o loadgen.Options) (*loadgen.Report, error) {
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("loadgen_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	defer conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") //nolint:errcheck // best effort
	o.DatabaseURL = withDatabase(pg, name)
	return loadgen.Run(ctx, o)
}

// withDatabase replaces the database of a postgres:// URL.
func withDatabase(u, name string) string {
	base, query, _ := strings.Cut(u, "?")
	if i := strings.Index(base[strings.Index(base, "://")+3:], "/"); i >= 0 {
		base = base[:strings.Index(base, "://")+3+i]
	}
	out := base + "/" + name
	if query != "" {
		out += "?" + query
	}
	return out
}

func defaultPostgres() string {
	if u := os.Getenv("POPPYHOST_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// moduleRoot is the folder of the go.mod this command is run in.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run loadgen inside the poppyhost module, or give -server-bin and -migrate-bin")
	}
	return filepath.Dir(mod), nil
}

func parseMix(s string) (map[loadgen.Kind]float64, error) {
	known := map[loadgen.Kind]bool{}
	for _, k := range loadgen.Kinds {
		known[k] = true
	}
	out := map[loadgen.Kind]float64{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		share, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || share < 0 || !known[loadgen.Kind(k)] {
			return nil, fmt.Errorf("-mix: %q is not kind=share with a kind of %s", part, mixText(loadgen.DefaultMix))
		}
		out[loadgen.Kind(k)] = share
	}
	return out, nil
}

func mixText(m map[loadgen.Kind]float64) string {
	var parts []string
	for _, k := range loadgen.Kinds {
		parts = append(parts, fmt.Sprintf("%s=%g", k, m[k]))
	}
	return strings.Join(parts, ",")
}
