package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/sealing"
)

// Config is the server's validated configuration.
type Config struct {
	// PublicURL is the platform's public origin: https, a host, no path.
	PublicURL *url.URL
	// ListenAddr is the TCP address to listen on.
	ListenAddr string
	// OpsAddr is the TCP address of the operations listener: /healthz,
	// /readyz and /metrics over plain HTTP, for probes and scrapers on a
	// private network; the public listener does not serve them.
	OpsAddr string
	// DatabaseURL is a pgx connection string. Empty only in dev mode, which
	// then starts a private PostgreSQL under DataDir.
	DatabaseURL string
	// TLSCertFile and TLSKeyFile serve HTTPS with a fixed certificate.
	TLSCertFile, TLSKeyFile string
	// DevCADir serves HTTPS with a dev CA kept in this folder.
	DevCADir string
	// PlainHTTP serves plain HTTP behind a TLS-terminating proxy.
	PlainHTTP bool
	// TrustedProxies are the proxies whose forwarded headers are honoured.
	TrustedProxies []netip.Prefix
	// AdminToken is the bootstrap operator token for /admin/v1.
	AdminToken string
	// KEKs are the key-encryption keys that seal the Companies' data keys
	// (internal/sealing), as sealing.ParseKeyring reads them; or else
	// KEKFile names a file of them. Dev mode keeps its own under DataDir.
	KEKs, KEKFile string
	// AllowPrivateFetch lets outbound fetches reach loopback and private
	// addresses (spec 3 forbids it unless configured on purpose).
	AllowPrivateFetch bool
	// Dev turns on dev mode: private database, dev CA, demo Company.
	Dev bool
	// DataDir holds dev mode's database, CA and admin token.
	DataDir string
	// LogLevel is the minimum level logged.
	LogLevel slog.Level
	// ShutdownTimeout bounds how long in-flight requests may drain.
	ShutdownTimeout time.Duration
	// DrainDelay is how long the server keeps serving on shutdown after
	// /readyz turns 503, before it stops listening.
	DrainDelay time.Duration
	// OverloadDelay is the wait, for a CPU (the Go scheduler's latency,
	// 90th percentile over a quarter second) or for a database connection
	// (mean), above which the public listener sheds new requests with
	// 503; 0 never sheds (internal/overload).
	OverloadDelay time.Duration
	// MaxConnections bounds the public listener's open connections; more
	// wait in the kernel's accept queue. 0: no bound.
	MaxConnections int
	// PasswordHashes is how many Argon2id password hashes (64 MiB each)
	// run at once; 0 means GOMAXPROCS, at most 2 (accounts.Limits).
	PasswordHashes int
	// PasswordHashQueue is how many sign-ins may wait for a hash; 0 means
	// twice PasswordHashes.
	PasswordHashQueue int
	// LoginRatePerAddress and LoginRatePerCompany are sign-in attempts a
	// minute across all replicas at one Company, from one address and from all
	// (issuer.LoginRates).
	LoginRatePerAddress, LoginRatePerCompany int
	// RequireIfMatch makes If-Match required on PATCH and PUT of existing
	// resources of the admin and Company APIs (428 without it).
	RequireIfMatch bool
	// AuditRetention is how long audit log entries are kept.
	AuditRetention time.Duration
	// AdminRatePerToken and CompanyAPIRatePerKey are requests a minute to
	// the admin API per operator token and to the Company API per API key,
	// across all replicas (tenant.APIRates).
	AdminRatePerToken, CompanyAPIRatePerKey int
}

// setting is one configuration value: its env name, flag name and help.
type setting struct {
	env, flag, def, help string
	secret               bool
}

var settings = []setting{
	{env: "POPPYHOST_PUBLIC_URL", flag: "public-url", help: "the platform's public origin, e.g. https://poppyhost.example"},
	{env: "POPPYHOST_LISTEN_ADDR", flag: "listen-addr", def: ":8443", help: "address to listen on"},
	{env: "POPPYHOST_OPS_ADDR", flag: "ops-addr", def: ":9090", help: "private address of /healthz, /readyz and /metrics (plain HTTP; not on the public listener)"},
	{env: "POPPYHOST_DATABASE_URL", flag: "database-url", help: "PostgreSQL URL (pgx syntax)", secret: true},
	{env: "POPPYHOST_TLS_CERT_FILE", flag: "tls-cert-file", help: "serve HTTPS with this certificate (PEM)"},
	{env: "POPPYHOST_TLS_KEY_FILE", flag: "tls-key-file", help: "private key of --tls-cert-file (PEM)"},
	{env: "POPPYHOST_DEV_CA_DIR", flag: "dev-ca-dir", help: "serve HTTPS with a dev CA kept in this folder"},
	{env: "POPPYHOST_PLAIN_HTTP", flag: "plain-http", def: "false", help: "serve plain HTTP behind a TLS-terminating proxy"},
	{env: "POPPYHOST_TRUSTED_PROXIES", flag: "trusted-proxies", help: "comma-separated CIDRs whose X-Forwarded-* headers are honoured"},
	{env: "POPPYHOST_ADMIN_TOKEN", flag: "admin-token", help: "bootstrap operator token for /admin/v1", secret: true},
	{env: "POPPYHOST_KEKS", flag: "keks", help: "key-encryption keys sealing secrets at rest, \"id:base64key\" comma-separated, the last current", secret: true},
	{env: "POPPYHOST_KEK_FILE", flag: "kek-file", help: "file of key-encryption keys, one \"id:base64key\" a line, the last current"},
	{env: "POPPYHOST_ALLOW_PRIVATE_FETCH", flag: "allow-private-fetch", def: "false", help: "let outbound fetches reach loopback and private addresses"},
	{env: "POPPYHOST_DEV", flag: "dev", def: "false", help: "dev mode: private database, dev CA, demo Company"},
	{env: "POPPYHOST_DATA_DIR", flag: "data-dir", def: ".data", help: "dev mode's folder for the database, CA and admin token"},
	{env: "POPPYHOST_LOG_LEVEL", flag: "log-level", def: "info", help: "debug, info, warn or error"},
	{env: "POPPYHOST_SHUTDOWN_TIMEOUT", flag: "shutdown-timeout", def: "20s", help: "how long in-flight requests may drain on shutdown"},
	{env: "POPPYHOST_DRAIN_DELAY", flag: "drain-delay", def: "0s", help: "how long to keep serving on shutdown after /readyz turns 503, for load balancers that poll it"},
	{env: "POPPYHOST_OVERLOAD_DELAY", flag: "overload-delay", def: "100ms", help: "shed new public requests with 503 while goroutines wait longer than this for a CPU, or requests for a database connection (0s: never)"},
	{env: "POPPYHOST_MAX_CONNECTIONS", flag: "max-connections", def: "0", help: "open connections the public listener holds at once, idle and streaming ones included; more wait to be accepted (0: no bound)"},
	{env: "POPPYHOST_PASSWORD_HASHES", flag: "password-hashes", def: "0", help: "Argon2id password hashes at once, 64 MiB each (0: GOMAXPROCS, at most 2)"},
	{env: "POPPYHOST_PASSWORD_HASH_QUEUE", flag: "password-hash-queue", def: "0", help: "sign-ins that may wait for a password hash (0: twice the hashes)"},
	{env: "POPPYHOST_LOGIN_RATE_PER_ADDRESS", flag: "login-rate-per-address", def: "30", help: "sign-in attempts a minute at one Company from one address (an IPv6 /64)"},
	{env: "POPPYHOST_LOGIN_RATE_PER_COMPANY", flag: "login-rate-per-company", def: "600", help: "sign-in attempts a minute at one Company from all addresses"},
	{env: "POPPYHOST_REQUIRE_IF_MATCH", flag: "require-if-match", def: "false", help: "refuse PATCH and PUT of existing admin and Company API resources without If-Match (428)"},
	{env: "POPPYHOST_AUDIT_RETENTION", flag: "audit-retention", def: "2160h", help: "how long audit log entries are kept (at least 1h)"},
	{env: "POPPYHOST_ADMIN_RATE_PER_TOKEN", flag: "admin-rate-per-token", def: "1200", help: "admin API requests a minute per operator token"},
	{env: "POPPYHOST_COMPANY_API_RATE_PER_KEY", flag: "company-api-rate-per-key", def: "1200", help: "Company API requests a minute per API key"},
}

// Dev mode defaults, used for settings left empty.
const (
	DevPublicURL  = "https://poppyhost.localhost:8443"
	DevListenAddr = "127.0.0.1:8443"
	DevOpsAddr    = "127.0.0.1:9090"
)

// Load reads the configuration from args (without the program name) and
// getenv. It returns every problem it finds at once.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	fs := flag.NewFlagSet("poppyhost", flag.ContinueOnError)
	fs.SetOutput(usage)
	vals := make(map[string]*string, len(settings))
	for _, s := range settings {
		def := getenv(s.env)
		if def == "" {
			def = s.def
		}
		v := new(string)
		if s.flag == "dev" || s.flag == "plain-http" || s.flag == "allow-private-fetch" {
			// Boolean flags accept a bare --flag.
			*v = def
			fs.Var((*boolString)(v), s.flag, s.help+" (env "+s.env+")")
			vals[s.env] = v
			continue
		}
		fs.StringVar(v, s.flag, def, s.help+" (env "+s.env+")")
		vals[s.env] = v
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	get := func(env string) string { return strings.TrimSpace(*vals[env]) }

	var c Config
	var errs []error
	bad := func(env, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", env, fmt.Sprintf(format, a...)))
	}
	parseBool := func(env string) bool {
		b, err := strconv.ParseBool(get(env))
		if err != nil {
			bad(env, "must be true or false")
		}
		return b
	}
	c.Dev = parseBool("POPPYHOST_DEV")
	c.PlainHTTP = parseBool("POPPYHOST_PLAIN_HTTP")
	c.AllowPrivateFetch = parseBool("POPPYHOST_ALLOW_PRIVATE_FETCH")
	c.RequireIfMatch = parseBool("POPPYHOST_REQUIRE_IF_MATCH")
	c.DataDir = get("POPPYHOST_DATA_DIR")
	c.DatabaseURL = get("POPPYHOST_DATABASE_URL")
	c.TLSCertFile = get("POPPYHOST_TLS_CERT_FILE")
	c.TLSKeyFile = get("POPPYHOST_TLS_KEY_FILE")
	c.DevCADir = get("POPPYHOST_DEV_CA_DIR")
	c.AdminToken = get("POPPYHOST_ADMIN_TOKEN")
	c.KEKs = get("POPPYHOST_KEKS")
	c.KEKFile = get("POPPYHOST_KEK_FILE")
	c.ListenAddr = get("POPPYHOST_LISTEN_ADDR")
	c.OpsAddr = get("POPPYHOST_OPS_ADDR")
	public := get("POPPYHOST_PUBLIC_URL")

	if c.Dev {
		// Dev mode fills what is left empty; explicit settings still win.
		c.AllowPrivateFetch = true
		if public == "" {
			public = DevPublicURL
		}
		if *vals["POPPYHOST_LISTEN_ADDR"] == ":8443" && getenv("POPPYHOST_LISTEN_ADDR") == "" {
			c.ListenAddr = DevListenAddr
		}
		if *vals["POPPYHOST_OPS_ADDR"] == ":9090" && getenv("POPPYHOST_OPS_ADDR") == "" {
			c.OpsAddr = DevOpsAddr
		}
		if c.DevCADir == "" && c.TLSCertFile == "" && !c.PlainHTTP {
			c.DevCADir = c.DataDir
		}
	}

	if public == "" {
		bad("POPPYHOST_PUBLIC_URL", "is required, e.g. https://poppyhost.example")
	} else if u, err := ParsePublicURL(public); err != nil {
		bad("POPPYHOST_PUBLIC_URL", "%v", err)
	} else {
		c.PublicURL = u
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		bad("POPPYHOST_LISTEN_ADDR", "must be host:port, e.g. :8443")
	}
	if _, port, err := net.SplitHostPort(c.OpsAddr); err != nil {
		bad("POPPYHOST_OPS_ADDR", "must be host:port, e.g. :9090")
	} else if c.OpsAddr == c.ListenAddr && port != "0" {
		bad("POPPYHOST_OPS_ADDR", "must differ from POPPYHOST_LISTEN_ADDR: metrics and probes are not served publicly")
	}
	if c.DatabaseURL == "" && !c.Dev {
		bad("POPPYHOST_DATABASE_URL", "is required (or use dev mode, which starts a private PostgreSQL)")
	}
	if c.Dev && c.DataDir == "" {
		bad("POPPYHOST_DATA_DIR", "must not be empty in dev mode")
	}

	modes := 0
	if c.TLSCertFile != "" || c.TLSKeyFile != "" {
		modes++
		if c.TLSCertFile == "" || c.TLSKeyFile == "" {
			bad("POPPYHOST_TLS_CERT_FILE", "and POPPYHOST_TLS_KEY_FILE must be set together")
		}
	}
	if c.DevCADir != "" {
		modes++
	}
	if c.PlainHTTP {
		modes++
	}
	switch {
	case modes == 0:
		errs = append(errs, errors.New("choose how to serve: POPPYHOST_TLS_CERT_FILE and POPPYHOST_TLS_KEY_FILE, POPPYHOST_DEV_CA_DIR, or POPPYHOST_PLAIN_HTTP=true behind a TLS-terminating proxy"))
	case modes > 1:
		errs = append(errs, errors.New("choose one way to serve: a certificate, a dev CA, or plain HTTP"))
	}

	if raw := get("POPPYHOST_TRUSTED_PROXIES"); raw != "" {
		for _, part := range strings.Split(raw, ",") {
			part = strings.TrimSpace(part)
			p, err := netip.ParsePrefix(part)
			if err != nil {
				a, aerr := netip.ParseAddr(part)
				if aerr != nil {
					bad("POPPYHOST_TRUSTED_PROXIES", "%q is not a CIDR or address", part)
					continue
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			c.TrustedProxies = append(c.TrustedProxies, p.Masked())
		}
	}
	switch {
	case c.KEKs != "" && c.KEKFile != "":
		bad("POPPYHOST_KEKS", "and POPPYHOST_KEK_FILE must not be set together")
	case c.KEKs != "":
		if _, err := sealing.ParseKeyring(c.KEKs); err != nil {
			bad("POPPYHOST_KEKS", "%v", err)
		}
	case c.KEKFile == "" && !c.Dev:
		bad("POPPYHOST_KEK_FILE", "or POPPYHOST_KEKS is required: secrets are stored sealed by a key-encryption key (docs/operations.md, \"Secrets\")")
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		bad("POPPYHOST_ADMIN_TOKEN", "must be at least 16 characters")
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("POPPYHOST_LOG_LEVEL"))); err != nil {
		bad("POPPYHOST_LOG_LEVEL", "must be debug, info, warn or error")
	}
	d, err := time.ParseDuration(get("POPPYHOST_SHUTDOWN_TIMEOUT"))
	if err != nil || d <= 0 {
		bad("POPPYHOST_SHUTDOWN_TIMEOUT", "must be a positive duration, e.g. 20s")
	}
	c.ShutdownTimeout = d
	d, err = time.ParseDuration(get("POPPYHOST_DRAIN_DELAY"))
	if err != nil || d < 0 || d > 10*time.Minute {
		bad("POPPYHOST_DRAIN_DELAY", "must be a duration from 0s to 10m, e.g. 15s")
	}
	c.DrainDelay = d
	d, err = time.ParseDuration(get("POPPYHOST_OVERLOAD_DELAY"))
	if err != nil || d < 0 || d > time.Minute || d > 0 && d < time.Millisecond {
		bad("POPPYHOST_OVERLOAD_DELAY", "must be 0s (never shed) or a duration from 1ms to 1m, e.g. 100ms")
	}
	c.OverloadDelay = d
	d, err = time.ParseDuration(get("POPPYHOST_AUDIT_RETENTION"))
	if err != nil || d < time.Hour {
		bad("POPPYHOST_AUDIT_RETENTION", "must be a duration of at least 1h, e.g. 2160h (90 days)")
	}
	c.AuditRetention = d
	count := func(env string, least int) int {
		n, err := strconv.Atoi(get(env))
		if err != nil || n < least || n > 1<<20 {
			bad(env, "must be a whole number from %d", least)
		}
		return n
	}
	c.MaxConnections = count("POPPYHOST_MAX_CONNECTIONS", 0)
	c.PasswordHashes = count("POPPYHOST_PASSWORD_HASHES", 0)
	c.PasswordHashQueue = count("POPPYHOST_PASSWORD_HASH_QUEUE", 0)
	c.LoginRatePerAddress = count("POPPYHOST_LOGIN_RATE_PER_ADDRESS", 1)
	c.LoginRatePerCompany = count("POPPYHOST_LOGIN_RATE_PER_COMPANY", 1)
	c.AdminRatePerToken = count("POPPYHOST_ADMIN_RATE_PER_TOKEN", 1)
	c.CompanyAPIRatePerKey = count("POPPYHOST_COMPANY_API_RATE_PER_KEY", 1)
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("invalid configuration:\n  %w", joinLines(errs))
	}
	return c, nil
}

// boolString is a boolean flag kept as text, so it is validated with the
// environment variable it mirrors; it accepts a bare --flag.
type boolString string

func (b *boolString) String() string   { return string(*b) }
func (b *boolString) IsBoolFlag() bool { return true }
func (b *boolString) Set(s string) error {
	if _, err := strconv.ParseBool(s); err != nil {
		return errors.New("must be true or false")
	}
	*b = boolString(s)
	return nil
}

type lines []error

func (l lines) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n  ")
}

func joinLines(errs []error) error { return lines(errs) }

// Keyring returns the configured key-encryption keys, from KEKs or
// KEKFile.
func (c Config) Keyring() (*sealing.Keyring, error) {
	if c.KEKs != "" {
		return sealing.ParseKeyring(c.KEKs)
	}
	if c.KEKFile == "" {
		return nil, errors.New("no key-encryption key: set POPPYHOST_KEK_FILE or POPPYHOST_KEKS")
	}
	return sealing.ReadKeyring(c.KEKFile)
}

// ParsePublicURL checks that raw is an https origin (no path, query,
// fragment or user info) and returns it.
func ParsePublicURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	switch {
	case u.Scheme != "https":
		return nil, errors.New("must be an https URL (spec 3)")
	case u.Host == "" || u.Hostname() == "":
		return nil, errors.New("must name a host")
	case u.User != nil:
		return nil, errors.New("must not carry user info")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return nil, errors.New("must be an origin without path, query or fragment")
	}
	return &url.URL{Scheme: "https", Host: strings.ToLower(u.Host)}, nil
}

// LogValue describes the configuration for the start-up log line, with the
// database password and the admin token masked.
func (c Config) LogValue() slog.Value {
	public := ""
	if c.PublicURL != nil {
		public = c.PublicURL.String()
	}
	tls := "dev-ca"
	switch {
	case c.PlainHTTP:
		tls = "plain-http-behind-proxy"
	case c.TLSCertFile != "":
		tls = "certificate"
	}
	proxies := make([]string, len(c.TrustedProxies))
	for i, p := range c.TrustedProxies {
		proxies[i] = p.String()
	}
	return slog.GroupValue(
		slog.String("public_url", public),
		slog.String("listen_addr", c.ListenAddr),
		slog.String("ops_addr", c.OpsAddr),
		slog.String("database_url", MaskDatabaseURL(c.DatabaseURL)),
		slog.String("tls", tls),
		slog.String("dev_ca_dir", c.DevCADir),
		slog.String("trusted_proxies", strings.Join(proxies, ",")),
		slog.Bool("admin_token_set", c.AdminToken != ""),
		slog.Bool("keks_set", c.KEKs != ""),
		slog.String("kek_file", c.KEKFile),
		slog.Bool("allow_private_fetch", c.AllowPrivateFetch),
		slog.Bool("dev", c.Dev),
		slog.String("log_level", c.LogLevel.String()),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Int("password_hashes", c.PasswordHashes),
		slog.Int("password_hash_queue", c.PasswordHashQueue),
		slog.Int("login_rate_per_address", c.LoginRatePerAddress),
		slog.Int("login_rate_per_company", c.LoginRatePerCompany),
		slog.Bool("require_if_match", c.RequireIfMatch),
		slog.Duration("audit_retention", c.AuditRetention),
		slog.Int("admin_rate_per_token", c.AdminRatePerToken),
		slog.Int("company_api_rate_per_key", c.CompanyAPIRatePerKey),
	)
}

// MaskDatabaseURL hides the password of a URL-form connection string and
// of a key=value one.
func MaskDatabaseURL(s string) string {
	if s == "" {
		return ""
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	fields := strings.Fields(s)
	for i, f := range fields {
		if strings.HasPrefix(f, "password=") {
			fields[i] = "password=xxxxx"
		}
	}
	return strings.Join(fields, " ")
}
