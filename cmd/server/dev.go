package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/config"
	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/pglocal"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The demo Company of dev mode: the shop of the spec's examples.
const (
	demoSlug     = "stormline"
	demoDomain   = "stormline.localhost"
	demoUsername = "ada"
	// demoOwner is the demo Company's console owner, whose password is
	// the demo account's.
	demoOwner   = "owner@" + demoDomain
	devDatabase = "poppyhost"
	// The demo Company Agent (internal/demoagent): its host name, and the
	// name of the API key dev mode makes for it and the shop at each start.
	demoAgentHost    = "agent." + demoDomain
	demoAgentKeyName = "demo Company Agent (dev mode)"
	// The demo Company's origin (internal/demoshop): its host name, and
	// the name its orders API is registered under.
	demoShopHost = "shop." + demoDomain
	demoAPIName  = "orders"
)

// devSetup is what dev mode prepared before the platform starts.
type devSetup struct {
	dataDir      string
	demoPassword string
	// adaID is the demo account's ID, whose orders the shop has.
	adaID int64
	// cluster is the private PostgreSQL, stopped with the server when this
	// process started it.
	cluster *pglocal.Cluster
}

// close stops what dev mode started.
func (d *devSetup) close(logger *slog.Logger) {
	if d.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.cluster.Stop(ctx); err != nil {
		logger.Warn("dev mode: stopping the private PostgreSQL", slog.Any("err", err))
	}
}

// prepareDev fills in dev mode's database and admin token: a private
// PostgreSQL under the data folder unless a database URL was given, and an
// admin token kept in the data folder so it survives restarts.
func prepareDev(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*devSetup, error) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d := &devSetup{dataDir: dir}
	if cfg.DatabaseURL == "" {
		logger.Info("dev mode: starting a private PostgreSQL", slog.String("dir", filepath.Join(dir, "postgres")))
		cluster, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(dir, "postgres"), Logger: logger, InstallWithApt: true})
		if err != nil {
			return nil, err
		}
		d.cluster = cluster
		if err := ensureDatabase(ctx, cluster.URL("postgres"), devDatabase); err != nil {
			d.close(logger)
			return nil, err
		}
		cfg.DatabaseURL = cluster.URL(devDatabase)
	}
	if cfg.AdminToken == "" {
		tok, err := readOrCreate(filepath.Join(dir, "admin-token"), "dev-admin-")
		if err != nil {
			d.close(logger)
			return nil, err
		}
		cfg.AdminToken = tok
	}
	if cfg.KEKs == "" && cfg.KEKFile == "" {
		// A KEK of dev mode's own, kept with its database: both go
		// together.
		cfg.KEKFile = filepath.Join(dir, "kek")
		if err := createKEK(cfg.KEKFile); err != nil {
			d.close(logger)
			return nil, err
		}
	}
	if d.demoPassword, err = readOrCreate(filepath.Join(dir, "demo-password"), ""); err != nil {
		d.close(logger)
		return nil, err
	}
	return d, nil
}

func ensureDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	}
	return err
}

// readOrCreate returns the secret kept in path, creating a random one first.
func readOrCreate(path, prefix string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [18]byte
	_, _ = rand.Read(raw[:])
	s := prefix + base64.RawURLEncoding.EncodeToString(raw[:])
	return s, os.WriteFile(path, []byte(s+"\n"), 0o600)
}

// createKEK writes a new KEK file at path unless one is there.
func createKEK(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "# dev mode's key-encryption key (docs/operations.md, \"Secrets\")\n%s\n", sealing.NewKEK("dev-1"))
	return errors.Join(err, f.Close())
}

// demoSettings is Stormline Outfitters as the spec's examples describe it.
func demoSettings() tenant.Settings {
	yes := true
	s := tenant.DefaultSettings()
	s.Organization = tenant.Organization{Name: "Stormline Outfitters", Domain: demoDomain}
	s.Auth.Scopes = map[string]string{
		"orders:read":  "See your orders, returns, and bookings",
		"orders:write": "Exchange or return items, and change bookings",
		"addresses":    "See and change your saved shipping addresses",
	}
	s.Auth.ScopeHints = map[string]tenant.ScopeHint{
		"orders:read":  {Changes: "none", PersonalData: &yes},
		"orders:write": {Changes: "irreversible", PersonalData: &yes},
		"addresses":    {Changes: "reversible", PersonalData: &yes},
	}
	s.ExcludedTasks = []tenant.ExcludedTask{{
		Task:        "Buy a gift card",
		Alternative: &tenant.Alternative{Instructions: "Gift cards are sold in Stormline stores only."},
	}}
	tenant.Normalize(&s)
	return s
}

// devAllowPrivate is what dev mode's outbound calls allow: development
// always sets POPPYHOST_ALLOW_PRIVATE_FETCH (internal/config), as the
// demo's webhook, shop and tools listen on loopback.
const devAllowPrivate = true

// seed creates the demo Company and its account unless they exist, sets
// the account's password to the one in the data folder, then prints how
// to reach them.
func (d *devSetup) seed(ctx context.Context, p *platform.Platform, urls tenant.URLs, out io.Writer) error {
	c, err := p.Tenants.Get(ctx, demoSlug)
	if errors.Is(err, tenant.ErrNotFound) {
		s := demoSettings()
		if err := tenant.Validate(demoSlug, &s, urls.Public.Hostname(), devAllowPrivate); err != nil {
			return err
		}
		c, err = p.Tenants.Create(ctx, demoSlug, s)
	}
	if err != nil {
		return err
	}
	acct, err := p.Accounts.Create(ctx, c.ID, demoUsername, d.demoPassword)
	if errors.Is(err, accounts.ErrTaken) {
		// The password file is the demo account's password: it may have
		// been removed (and made anew) or replaced since the account was.
		if acct, err = p.Accounts.Lookup(ctx, c.ID, demoUsername); err == nil {
			err = p.Accounts.SetPassword(ctx, c.ID, acct.ID, d.demoPassword)
		}
	}
	if err != nil {
		return fmt.Errorf("the demo account %s: %w", demoUsername, err)
	}
	d.adaID = acct.ID
	_, err = p.Staff.Create(ctx, c.ID, demoOwner, "Demo owner", console.RoleOwner, d.demoPassword)
	if errors.Is(err, console.ErrTaken) {
		err = p.Staff.SetPassword(ctx, c.ID, demoOwner, d.demoPassword)
	}
	if err != nil {
		return fmt.Errorf("the demo console owner %s: %w", demoOwner, err)
	}
	port := urls.Public.Port()
	site := "https://" + demoDomain
	if port != "" {
		site += ":" + port
	}
	ca := filepath.Join(d.dataDir, "dev-ca.pem")
	fmt.Fprintf(out, `
poppyhost is running in dev mode.

  platform      %s
  demo Company  %s  (slug %s, site %s)
  issuer        %s
  admin token   in %s
  demo account  %s, password in %s
  console       %s/console/%s/signin
                owner %s, the same password
  dev CA        %s  (trust it to reach any *.localhost host)

Fetch the demo Company's poppy.json:

  curl --cacert %s %s/.well-known/poppy.json

Sign in as the demo account, and see the Personal Agents connected to it:

  %s/account

Run the jacket story with the reference Personal Agent, step by step
(--via api, mcp or web for the other interfaces; docs/reference-agent.md):

  go run ./cmd/poppy-agent story --company %s --ca %s --ca-key %s --user %s --password-file %s

`, urls.Public, c.Settings.Organization.Name, c.Slug, site, urls.Issuer(c),
		d.rel(filepath.Join(d.dataDir, "admin-token")), demoUsername, d.rel(filepath.Join(d.dataDir, "demo-password")),
		urls.Public, c.Slug, demoOwner,
		d.rel(ca), d.rel(ca), site, urls.Issuer(c),
		site, d.rel(ca), d.rel(filepath.Join(d.dataDir, "dev-ca-key.pem")), demoUsername,
		d.rel(filepath.Join(d.dataDir, "demo-password")))
	return nil
}

// rel shortens a path under the working directory for printing.
func (d *devSetup) rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if r, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// startAgent starts the demo Company's own systems, as a Company would
// run them next to the platform: its origin, the Stormline shop
// (internal/demoshop), and its Company Agent (internal/demoagent), each on
// a loopback HTTPS listener with a dev CA certificate for its name. It
// gives them a new Company API key (revoking the one of the last start)
// and a new webhook secret, registers the shop's orders API and tools
// through the Company API, and makes the shop the Company's website
// (web.origin, browser join) with operations on every interface. The
// platform must be serving on platformAddr. It returns what stops them.
func (d *devSetup) startAgent(ctx context.Context, cfg config.Config, p *platform.Platform, urls tenant.URLs,
	platformAddr net.Addr, logger *slog.Logger, out io.Writer) (stop func(), err error) {
	if cfg.DevCADir == "" {
		logger.Info("dev mode: no dev CA, so no demo shop or Company Agent")
		return func() {}, nil
	}
	ca, err := devca.Load(cfg.DevCADir)
	if err != nil {
		return nil, err
	}
	c, err := p.Tenants.Get(ctx, demoSlug)
	if err != nil {
		return nil, err
	}
	key, err := newDemoKey(ctx, p, c)
	if err != nil {
		return nil, err
	}

	// The shop and the agent reach the platform on its listener, whatever
	// the public URL's name resolves to.
	target := loopback(platformAddr)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, target)
		},
	}}
	secret, err := newWebhookSecret(ctx, client, urls.Public.String(), key)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}

	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	shopLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	site := "https://" + demoDomain
	if port := urls.Public.Port(); port != "" {
		site += ":" + port
	}
	shop, err := demoshop.New(demoshop.Options{BaseURL: "https://" + demoShopHost + ":" + portOf(shopLn.Addr()),
		SiteURL: site, Issuer: urls.Identifier(c), IssuerURL: urls.Issuer(c), Client: client, Logger: logger})
	if err != nil {
		shopLn.Close()
		return nil, err
	}
	shop.Seed(strconv.FormatInt(d.adaID, 10))
	stops = append(stops, serveTLS(shopLn, ca, shop), shop.Close)

	agentLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stop()
		return nil, err
	}
	hook := "https://" + demoAgentHost + ":" + portOf(agentLn.Addr()) + "/poppy/webhook"
	agent, err := demoagent.New(demoagent.Options{Secret: secret, APIKey: key, BaseURL: urls.Public.String(),
		Client: client, Logger: logger, OrdersAPI: demoAPIName,
		JWKSURL: urls.Base(c) + "/oauth/jwks.json", Issuer: urls.Identifier(c), WebhookURL: hook})
	if err != nil {
		agentLn.Close()
		stop()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /poppy/webhook", agent)
	stops = append(stops, agent.Close, serveTLS(agentLn, ca, mux))

	if err := d.configureDemo(ctx, p, urls, client, key, shop, hook); err != nil {
		stop()
		return nil, err
	}
	fmt.Fprintf(out, `The demo Company's own systems run on this machine:

  shop (origin)  %s  (website, orders API at /api, tools at /tools)
  website        %s/orders  (through the platform; join a browser at %s/poppy/browser-session)
  orders API     %s/api/%s/orders  (description %s/openapi/%s.json)
  MCP server     %s/mcp  (search_products, size_help, exchange_item)
  Company Agent  %s  (its webhook)

Personal Agents start conversations at %s/poppy/conversations; the demo Company
Agent answers them (say return, jacket, order or specialist; hand off and Alex joins).
Signed in as %s with orders:read and orders:write, "jacket" gets the insulated-jacket exchange as an operation to approve.

`, shop.WebOrigin(), site, site, urls.Issuer(c), demoAPIName, urls.Issuer(c), demoAPIName, urls.Issuer(c), hook, urls.Base(c), demoUsername)
	return stop, nil
}

// newDemoKey revokes the Company API key of dev mode's last start and
// makes a new one.
func newDemoKey(ctx context.Context, p *platform.Platform, c *tenant.Company) (string, error) {
	keys, err := p.Tenants.ListAPIKeys(ctx, c.ID)
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		if k.Name == demoAgentKeyName && k.RevokedAt == nil {
			if err := p.Tenants.RevokeAPIKey(ctx, c.ID, k.ID); err != nil {
				return "", err
			}
		}
	}
	_, key, err := p.Tenants.CreateAPIKey(ctx, c.ID, demoAgentKeyName)
	return key, err
}

// configureDemo registers the shop's orders API and tools through the
// Company API, and sets the demo Company's agent webhook, website and
// operations.
func (d *devSetup) configureDemo(ctx context.Context, p *platform.Platform, urls tenant.URLs, client *http.Client,
	key string, shop *demoshop.Shop, hook string) error {
	base := urls.Public.String() + "/company/v1"
	if err := companyPut(ctx, client, key, base+"/apis/"+demoAPIName, shop.APIRegistration()); err != nil {
		return fmt.Errorf("registering the orders API: %w", err)
	}
	for _, t := range shop.Tools() {
		if err := companyPut(ctx, client, key, base+"/tools/"+t.Name, t); err != nil {
			return fmt.Errorf("registering the tool %s: %w", t.Name, err)
		}
	}
	c, err := p.Tenants.Get(ctx, demoSlug)
	if err != nil {
		return err
	}
	_, err = p.Tenants.Modify(ctx, c.ID, func(c *tenant.Company) (tenant.Settings, error) {
		s := c.Settings
		s.Conversations.AgentWebhook = hook
		s.Operations.Enabled, s.Operations.Web = true, true
		s.Web.Origin, s.Web.BrowserJoin, s.Web.LandingPath = shop.WebOrigin(), true, "/orders"
		s.MCP.SignedOut, s.MCP.Description = true, "Stormline's shop: product search, size help, exchanges"
		// Ordinary MCP clients sign in with a client metadata document, or
		// register themselves, as the MCP Inspector does (docs/gateway.md 5a).
		s.MCP.DynamicRegistration = true
		return s, tenant.Validate(demoSlug, &s, urls.Public.Hostname(), devAllowPrivate)
	})
	return err
}

// companyPut PUTs body as JSON to a Company API URL with the API key.
func companyPut(ctx context.Context, client *http.Client, key, url string, body any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	return nil
}

// serveTLS serves h on ln with dev CA certificates, and returns what
// stops it.
func serveTLS(ln net.Listener, ca *devca.CA, h http.Handler) func() {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(tls.NewListener(ln, ca.ServerTLSConfig())) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
}

// portOf is the port of a listener's address.
func portOf(addr net.Addr) string {
	_, port, _ := net.SplitHostPort(addr.String())
	return port
}

// newWebhookSecret makes the demo Company's webhook secret through the
// Company API, as docs/company-agent.md section 1 tells a Company to.
func newWebhookSecret(ctx context.Context, client *http.Client, base, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/company/v1/conversations/webhook-secret", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Secret string `json:"secret"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err != nil || resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("%s (%v)", resp.Status, err)
	}
	return body.Secret, nil
}

// loopback is addr with an unspecified IP (a listener on all interfaces)
// replaced by 127.0.0.1.
func loopback(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
