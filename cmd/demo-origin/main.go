// Command demo-origin serves the demo Company's origin, the Stormline
// Outfitters shop of internal/demoshop, on its own: its orders API, MCP
// tools and website, for a platform that forwards to it
// (docs/demo.md). Dev mode (server --dev) runs the same shop in-process;
// this command is for operators and the e2e tests.
//
//	demo-origin -issuer https://poppyhost.example/t/stormline \
//	  -base-url https://shop.stormline.example -addr :8445 \
//	  -tls-cert cert.pem -tls-key key.pem -seed-account 42 \
//	  -control-addr 127.0.0.1:8446
//
// Every flag has an environment variable (DEMO_ORIGIN_*, shown by -help).
// The key set is fetched with the system's roots plus SSL_CERT_FILE, as
// Go does: against the dev platform, SSL_CERT_FILE=.data/dev-ca.pem.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/poppyhost/poppyhost/internal/demoshop"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "demo-origin:", err)
		os.Exit(1)
	}
}

// config is the command's settings.
type config struct {
	addr, controlAddr string
	baseURL, issuer   string
	issuerURL         string
	siteURL           string
	jwks              string
	cert, key         string
	plainHTTP         bool
	seed              string
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	var c config
	fs := flag.NewFlagSet("demo-origin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name string) string { return getenv("DEMO_ORIGIN_" + name) }
	fs.StringVar(&c.addr, "addr", cmp.Or(env("ADDR"), "127.0.0.1:8445"), "address to listen on [DEMO_ORIGIN_ADDR]")
	fs.StringVar(&c.baseURL, "base-url", env("BASE_URL"), "the shop's public https URL, as the platform calls it; "+
		"its API is {base}/api, its tools {base}/tools/{name}, its website {base} [DEMO_ORIGIN_BASE_URL]")
	fs.StringVar(&c.siteURL, "site-url", env("SITE_URL"), "the Company's website as people reach it, through the platform [base-url] [DEMO_ORIGIN_SITE_URL]")
	fs.StringVar(&c.issuer, "issuer", env("ISSUER"), "the Company's identifier, iss of Poppy-Verified [DEMO_ORIGIN_ISSUER]")
	fs.StringVar(&c.issuerURL, "issuer-url", env("ISSUER_URL"), "the Company's issuer URL, whose OAuth endpoints the API description names "+
		"[issuer: a Company with an issuer is identified by it] [DEMO_ORIGIN_ISSUER_URL]")
	fs.StringVar(&c.jwks, "jwks", env("JWKS"), "the Company's key set [{issuer-url}/oauth/jwks.json] [DEMO_ORIGIN_JWKS]")
	fs.StringVar(&c.cert, "tls-cert", env("TLS_CERT"), "TLS certificate file [DEMO_ORIGIN_TLS_CERT]")
	fs.StringVar(&c.key, "tls-key", env("TLS_KEY"), "TLS key file [DEMO_ORIGIN_TLS_KEY]")
	fs.BoolVar(&c.plainHTTP, "plain-http", env("PLAIN_HTTP") == "true", "serve plain HTTP behind a proxy that serves base-url over HTTPS [DEMO_ORIGIN_PLAIN_HTTP]")
	fs.StringVar(&c.seed, "seed-account", env("SEED_ACCOUNT"), "comma-separated account IDs to give the demo orders [DEMO_ORIGIN_SEED_ACCOUNT]")
	fs.StringVar(&c.controlAddr, "control-addr", env("CONTROL_ADDR"), "loopback address of the control handler "+
		"(POST /seed, POST /stall-next-exchange, GET /registration; POSTs are application/json) off when empty [DEMO_ORIGIN_CONTROL_ADDR]")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case c.issuer == "" || c.baseURL == "":
		return nil, errors.New("-issuer and -base-url are required")
	case !c.plainHTTP && (c.cert == "" || c.key == ""):
		return nil, errors.New("-tls-cert and -tls-key are required, or -plain-http")
	}
	if c.controlAddr != "" {
		host, _, err := net.SplitHostPort(c.controlAddr)
		if ip := net.ParseIP(host); err != nil || host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, errors.New("-control-addr must be a loopback address: the control handler has no authentication")
		}
	}
	return &c, nil
}

// run serves the shop until ctx ends. ready, when set, is told the
// addresses it listens on (the shop's, then the control handler's or nil).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer,
	ready func(shop, control net.Addr)) error {
	c, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	shop, err := demoshop.New(demoshop.Options{BaseURL: c.baseURL, SiteURL: c.siteURL, Issuer: c.issuer, IssuerURL: c.issuerURL,
		JWKSURL: c.jwks, Logger: logger})
	if err != nil {
		return err
	}
	defer shop.Close()
	for _, a := range strings.Split(c.seed, ",") {
		if a = strings.TrimSpace(a); a != "" {
			shop.Seed(a)
		}
	}

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	servers := []*http.Server{{Handler: shop, ReadHeaderTimeout: 10 * time.Second}}
	errs := make(chan error, 2)
	go func() {
		if c.plainHTTP {
			errs <- servers[0].Serve(ln)
		} else {
			errs <- servers[0].ServeTLS(ln, c.cert, c.key)
		}
	}()
	var controlAddr net.Addr
	if c.controlAddr != "" {
		cl, err := net.Listen("tcp", c.controlAddr)
		if err != nil {
			_ = servers[0].Close()
			return err
		}
		controlAddr = cl.Addr()
		srv := &http.Server{Handler: shop.Control(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { errs <- srv.Serve(cl) }()
	}
	fmt.Fprintf(stdout, "Stormline Outfitters' origin, for the Company %s:\n"+
		"  orders API  %s (description %s)\n  tools       %s\n  website     %s\n",
		c.issuer, shop.APIOrigin(), shop.OpenAPIURL(), shop.ToolURL("{name}"), shop.WebOrigin())
	if controlAddr != nil {
		fmt.Fprintf(stdout, "  control     http://%s (loopback only)\n", controlAddr)
	}
	if ready != nil {
		ready(ln.Addr(), controlAddr)
	}

	select {
	case err = <-errs:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
