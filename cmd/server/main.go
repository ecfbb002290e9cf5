// Command server runs poppyhost: the Company side of the Personal Agent
// Protocol for many Companies, over HTTPS, on one PostgreSQL database.
//
//	server [flags]          serve, configured by POPPYHOST_* variables or flags
//	server --dev            dev mode: private database, dev CA, demo Company
//	server --help           list every setting
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	// Conversation context names IANA time zones (spec 8.4); the
	// image may have no zone files.
	_ "time/tzdata"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/netutil"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/config"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/overload"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/tracing"
	"github.com/poppyhost/poppyhost/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, runEnv{args: os.Args[1:], getenv: os.Getenv, stdout: os.Stdout, stderr: os.Stderr})
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "poppyhost:", err)
		os.Exit(1)
	}
}

// runEnv is everything run takes from its surroundings, so tests can start
// the real server in-process.
type runEnv struct {
	args           []string
	getenv         func(string) string
	stdout, stderr io.Writer
	// onListen, when set, is told the addresses the server listens on:
	// the public listener's and the operations listener's.
	onListen func(public, ops net.Addr)
}

// run starts the server and serves until ctx ends, then drains.
func run(ctx context.Context, env runEnv) error {
	cfg, err := config.Load(env.args, env.getenv, env.stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(env.stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))

	var dev *devSetup
	if cfg.Dev {
		dev, err = prepareDev(ctx, &cfg, logger)
		if err != nil {
			return fmt.Errorf("dev mode: %w", err)
		}
		defer dev.close(logger)
	}
	logger.Info("starting poppyhost", slog.Any("config", cfg))
	keyring, err := cfg.Keyring()
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}

	_, shutdownTracing, err := tracing.Setup(ctx, env.getenv)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		// Flush the last spans, bounded so a lost collector cannot hold
		// the exit.
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(flushCtx); err != nil {
			logger.Warn("tracing: flushing spans", slog.Any("error", err))
		}
	}()

	poolConfig, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	poolConfig.ConnConfig.Tracer = tracing.DB{}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool, cfg.Dev, logger); err != nil {
		return err
	}
	sealer, err := openSecrets(ctx, pool, keyring, logger)
	if err != nil {
		return err
	}

	fetch, err := fetchOptions(cfg)
	if err != nil {
		return err
	}
	urls := tenant.URLs{Public: cfg.PublicURL}
	p, err := platform.New(ctx, platform.Options{
		Pool: pool, Logger: logger, URLs: urls,
		Proxies:        httpx.Proxies{Trusted: cfg.TrustedProxies},
		AdminToken:     cfg.AdminToken,
		Sealer:         sealer,
		Fetch:          fetch,
		PasswordHashes: accounts.Limits{Hashes: cfg.PasswordHashes, Queue: cfg.PasswordHashQueue},
		LoginRates:     issuer.LoginRates{PerAddress: cfg.LoginRatePerAddress, PerCompany: cfg.LoginRatePerCompany},
		RequireIfMatch: cfg.RequireIfMatch,
		AuditRetention: cfg.AuditRetention,
		Overload:       overload.Options{Delay: cfg.OverloadDelay},
		APIRates:       tenant.APIRates{PerOperatorToken: cfg.AdminRatePerToken, PerAPIKey: cfg.CompanyAPIRatePerKey},
	})
	if err != nil {
		return err
	}
	if dev != nil {
		if err := dev.seed(ctx, p, urls, env.stdout); err != nil {
			return fmt.Errorf("dev mode: seeding the demo Company: %w", err)
		}
	}

	// River stops through Stop on shutdown, not by the signal context.
	if err := p.Jobs.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := p.Jobs.Stop(sctx); err != nil {
			logger.Warn("stopping jobs", slog.Any("err", err))
		}
	}()

	stopListener := p.Listener.Start(context.WithoutCancel(ctx))
	defer stopListener()
	// The heartbeat by which replicas share every rate limit; stopping it
	// on shutdown lets the others count one fewer at their next beat.
	stopBeat := p.Replicas.Start(context.WithoutCancel(ctx))
	defer stopBeat()
	// The waits for a CPU and for a database connection, sampled for
	// shedding while overloaded.
	stopShedding := p.Overload.Start(context.WithoutCancel(ctx))
	defer stopShedding()

	tlsConfig, err := serverTLS(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// At most MaxConnections open at once, when set: past a replica's
	// capacity, clients that open a connection whenever theirs are busy
	// would otherwise have it hold their buffers and goroutines without
	// bound (docs/operations.md, "Overload"); more wait to be accepted.
	if cfg.MaxConnections > 0 {
		ln = netutil.LimitListener(ln, cfg.MaxConnections)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	srv := httpServer(p.Handler(), 64<<10, logger)
	srv.ConnState = p.ConnState
	srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	// The operations listener: health, readiness and metrics, plain HTTP
	// on a private address, never on the public one.
	opsLn, err := net.Listen("tcp", cfg.OpsAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen (operations): %w", err)
	}
	opsSrv := httpServer(p.OpsHandler(), 16<<10, logger)
	// The operations listener closes last, so /readyz answers 503 for as
	// long as the public listener still serves.
	defer opsSrv.Close()
	logger.Info("listening", slog.String("addr", ln.Addr().String()), slog.String("ops_addr", opsLn.Addr().String()),
		slog.String("public_url", cfg.PublicURL.String()))
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	go func() {
		if err := opsSrv.Serve(opsLn); !errors.Is(err, http.ErrServerClosed) {
			served <- fmt.Errorf("operations listener: %w", err)
		}
	}()
	if dev != nil {
		// The demo Company Agent uses the Company API, so it starts once
		// the server serves.
		stopAgent, err := dev.startAgent(ctx, cfg, p, urls, ln.Addr(), logger, env.stdout)
		if err != nil {
			srv.Close()
			return fmt.Errorf("dev mode: the demo Company Agent: %w", err)
		}
		defer stopAgent()
	}
	if env.onListen != nil {
		env.onListen(ln.Addr(), opsLn.Addr())
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	// Stop taking new requests and let in-flight ones finish. Drain also
	// ends conversation streams and long-polls, which would otherwise hold
	// Shutdown for up to their cap: clients reconnect elsewhere with
	// Last-Event-ID or their cursor (spec 8.5, 8.6).
	logger.Info("shutting down", slog.Duration("timeout", cfg.ShutdownTimeout), slog.Duration("drain_delay", cfg.DrainDelay))
	p.Drain()
	if cfg.DrainDelay > 0 {
		// /readyz on the operations listener answers 503 from now on; a
		// load balancer that polls it stops sending before the public
		// listener closes.
		time.Sleep(cfg.DrainDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("shutdown: requests still running after %s: %w", cfg.ShutdownTimeout, err)
	}
	logger.Info("stopped")
	return nil
}

// openSecrets refuses KEKs that do not open the stored data keys, and
// seals the secrets still stored in plaintext (docs/operations.md,
// "Secrets").
func openSecrets(ctx context.Context, pool *pgxpool.Pool, keyring *sealing.Keyring, logger *slog.Logger) (*sealing.Sealer, error) {
	sealer := sealing.New(pool, keyring, nil)
	if err := sealer.Check(ctx); err != nil {
		return nil, fmt.Errorf("secrets: the configured KEKs (%s) do not open the stored data keys: %w",
			strings.Join(keyring.IDs(), ", "), err)
	}
	if _, err := sealer.SealPlaintext(ctx, logger); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return sealer, nil
}

// checkSchema refuses to serve a database this build's migrations have not
// reached. Dev mode migrates it instead.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, dev bool, logger *slog.Logger) error {
	m, err := migrations.New(pool, logger)
	if err != nil {
		return err
	}
	defer m.Close()
	if dev {
		return m.Up(ctx)
	}
	if err := m.Check(ctx); err != nil {
		if errors.Is(err, migrations.ErrPending) {
			return fmt.Errorf("%w\nrun the migrations first: `migrate up` (or `go run ./cmd/migrate up`) with the same POPPYHOST_DATABASE_URL", err)
		}
		return fmt.Errorf("database: %w", err)
	}
	return nil
}

// fetchOptions configures outbound fetches. With a dev CA, its certificates
// are trusted besides the system's, so Personal Agents served with dev
// certificates on this machine can be reached.
func fetchOptions(cfg config.Config) (safehttp.Options, error) {
	opts := safehttp.Options{AllowPrivate: cfg.AllowPrivateFetch}
	if cfg.Dev {
		opts.Resolver = safehttp.LocalhostResolver{}
	}
	if cfg.DevCADir == "" {
		return opts, nil
	}
	ca, err := devca.Load(cfg.DevCADir)
	if err != nil {
		return opts, fmt.Errorf("dev CA: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	roots.AppendCertsFromPEM(ca.CertPEM())
	opts.RootCAs = roots
	return opts, nil
}

// serverTLS returns the TLS configuration, or nil for plain HTTP behind a
// TLS-terminating proxy.
func serverTLS(cfg config.Config) (*tls.Config, error) {
	switch {
	case cfg.PlainHTTP:
		return nil, nil
	case cfg.DevCADir != "":
		ca, err := devca.Load(cfg.DevCADir)
		if err != nil {
			return nil, fmt.Errorf("dev CA: %w", err)
		}
		return ca.ServerTLSConfig(), nil
	default:
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"}}, nil
	}
}

// httpServer returns a server of h with the timeouts and header bound
// both listeners share.
func httpServer(h http.Handler, maxHeaderBytes int, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(serverErrorLog{logger}, "", 0),
	}
}

// serverErrorLog sends net/http's own messages (mostly TLS handshake
// failures from scanners) to the structured log at debug level.
type serverErrorLog struct{ logger *slog.Logger }

func (l serverErrorLog) Write(p []byte) (int, error) {
	l.logger.Debug("http server", slog.String("msg", string(p)))
	return len(p), nil
}
