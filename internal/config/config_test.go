package config

import (
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func base() map[string]string {
	return map[string]string{
		"POPPYHOST_PUBLIC_URL":    "https://poppyhost.example",
		"POPPYHOST_DATABASE_URL":  "postgres://app:s3cret@db.internal:5432/poppyhost",
		"POPPYHOST_TLS_CERT_FILE": "/etc/tls/cert.pem",
		"POPPYHOST_TLS_KEY_FILE":  "/etc/tls/key.pem",
		"POPPYHOST_KEK_FILE":      "/etc/poppyhost/keks",
	}
}

// testKEKs are two KEKs as POPPYHOST_KEKS takes them.
const testKEKs = "old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=,new:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="

func TestLoadValid(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, envOf(base()), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "https://poppyhost.example", c.PublicURL.String())
	require.Equal(t, ":8443", c.ListenAddr)
	require.Equal(t, ":9090", c.OpsAddr)
	require.Equal(t, slog.LevelInfo, c.LogLevel)
	require.Equal(t, 20*time.Second, c.ShutdownTimeout)
	require.Zero(t, c.DrainDelay)
	require.Equal(t, 100*time.Millisecond, c.OverloadDelay)
	require.Zero(t, c.MaxConnections, "no bound unless asked")
	require.False(t, c.AllowPrivateFetch)
	require.False(t, c.Dev)
	// 0: the hashing limits' defaults (accounts.Limits).
	require.Zero(t, c.PasswordHashes)
	require.Zero(t, c.PasswordHashQueue)
	require.Equal(t, 30, c.LoginRatePerAddress)
	require.Equal(t, 600, c.LoginRatePerCompany)
	require.False(t, c.RequireIfMatch, "existing tools send no If-Match")
	require.Equal(t, 90*24*time.Hour, c.AuditRetention)
	require.Equal(t, 1200, c.AdminRatePerToken)
	require.Equal(t, 1200, c.CompanyAPIRatePerKey)
}

func TestAdministrationSettings(t *testing.T) {
	t.Parallel()
	env := base()
	env["POPPYHOST_REQUIRE_IF_MATCH"] = "true"
	c, err := Load([]string{"--audit-retention", "720h"}, envOf(env), io.Discard)
	require.NoError(t, err)
	require.True(t, c.RequireIfMatch)
	require.Equal(t, 720*time.Hour, c.AuditRetention)
}

func TestLoginLimits(t *testing.T) {
	t.Parallel()
	env := base()
	env["POPPYHOST_PASSWORD_HASHES"] = "3"
	env["POPPYHOST_LOGIN_RATE_PER_COMPANY"] = "120"
	env["POPPYHOST_ADMIN_RATE_PER_TOKEN"] = "50"
	c, err := Load([]string{"--password-hash-queue", "5", "--login-rate-per-address", "10", "--company-api-rate-per-key", "70"}, envOf(env), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 3, c.PasswordHashes)
	require.Equal(t, 5, c.PasswordHashQueue)
	require.Equal(t, 10, c.LoginRatePerAddress)
	require.Equal(t, 120, c.LoginRatePerCompany)
	require.Equal(t, 50, c.AdminRatePerToken)
	require.Equal(t, 70, c.CompanyAPIRatePerKey)
}

func TestFlagsWinOverEnv(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{"--listen-addr", "127.0.0.1:9000", "--log-level", "debug", "--allow-private-fetch"}, envOf(base()), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9000", c.ListenAddr)
	require.Equal(t, slog.LevelDebug, c.LogLevel)
	require.True(t, c.AllowPrivateFetch)
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		set  map[string]string
		args []string
		want string
	}{
		{"no public URL", map[string]string{"POPPYHOST_PUBLIC_URL": ""}, nil, "POPPYHOST_PUBLIC_URL: is required"},
		{"http public URL", map[string]string{"POPPYHOST_PUBLIC_URL": "http://poppyhost.example"}, nil, "https"},
		{"public URL with path", map[string]string{"POPPYHOST_PUBLIC_URL": "https://poppyhost.example/x"}, nil, "origin"},
		{"no database", map[string]string{"POPPYHOST_DATABASE_URL": ""}, nil, "POPPYHOST_DATABASE_URL"},
		{"bad listen addr", map[string]string{"POPPYHOST_LISTEN_ADDR": "8443"}, nil, "POPPYHOST_LISTEN_ADDR"},
		{"bad ops addr", map[string]string{"POPPYHOST_OPS_ADDR": "9090"}, nil, "POPPYHOST_OPS_ADDR"},
		{"ops on the public listener", map[string]string{"POPPYHOST_OPS_ADDR": ":8443"}, nil, "must differ"},
		{"cert without key", map[string]string{"POPPYHOST_TLS_KEY_FILE": ""}, nil, "set together"},
		{"no way to serve", map[string]string{"POPPYHOST_TLS_KEY_FILE": "", "POPPYHOST_TLS_CERT_FILE": ""}, nil, "choose how to serve"},
		{"two ways to serve", map[string]string{"POPPYHOST_PLAIN_HTTP": "true"}, nil, "choose one way"},
		{"bad bool", map[string]string{"POPPYHOST_ALLOW_PRIVATE_FETCH": "maybe"}, nil, "POPPYHOST_ALLOW_PRIVATE_FETCH"},
		{"bad proxies", map[string]string{"POPPYHOST_TRUSTED_PROXIES": "10.0.0.0/8,nonsense"}, nil, "nonsense"},
		{"short admin token", map[string]string{"POPPYHOST_ADMIN_TOKEN": "short"}, nil, "at least 16"},
		{"bad log level", map[string]string{"POPPYHOST_LOG_LEVEL": "loud"}, nil, "POPPYHOST_LOG_LEVEL"},
		{"bad timeout", map[string]string{"POPPYHOST_SHUTDOWN_TIMEOUT": "-1s"}, nil, "POPPYHOST_SHUTDOWN_TIMEOUT"},
		{"negative drain delay", map[string]string{"POPPYHOST_DRAIN_DELAY": "-1s"}, nil, "POPPYHOST_DRAIN_DELAY"},
		{"drain delay over 10m", map[string]string{"POPPYHOST_DRAIN_DELAY": "11m"}, nil, "POPPYHOST_DRAIN_DELAY"},
		{"drain delay not a duration", map[string]string{"POPPYHOST_DRAIN_DELAY": "15"}, nil, "POPPYHOST_DRAIN_DELAY"},
		{"negative overload delay", map[string]string{"POPPYHOST_OVERLOAD_DELAY": "-1ms"}, nil, "POPPYHOST_OVERLOAD_DELAY"},
		{"overload delay under 1ms", map[string]string{"POPPYHOST_OVERLOAD_DELAY": "500us"}, nil, "POPPYHOST_OVERLOAD_DELAY"},
		{"overload delay over 1m", map[string]string{"POPPYHOST_OVERLOAD_DELAY": "2m"}, nil, "POPPYHOST_OVERLOAD_DELAY"},
		{"overload delay not a duration", map[string]string{"POPPYHOST_OVERLOAD_DELAY": "100"}, nil, "POPPYHOST_OVERLOAD_DELAY"},
		{"negative connections", map[string]string{"POPPYHOST_MAX_CONNECTIONS": "-1"}, nil, "POPPYHOST_MAX_CONNECTIONS"},
		{"connections not a number", map[string]string{"POPPYHOST_MAX_CONNECTIONS": "many"}, nil, "POPPYHOST_MAX_CONNECTIONS"},
		{"negative hashes", map[string]string{"POPPYHOST_PASSWORD_HASHES": "-1"}, nil, "POPPYHOST_PASSWORD_HASHES"},
		{"bad hash queue", map[string]string{"POPPYHOST_PASSWORD_HASH_QUEUE": "many"}, nil, "POPPYHOST_PASSWORD_HASH_QUEUE"},
		{"bad require-if-match", map[string]string{"POPPYHOST_REQUIRE_IF_MATCH": "sometimes"}, nil, "POPPYHOST_REQUIRE_IF_MATCH"},
		{"audit retention under an hour", map[string]string{"POPPYHOST_AUDIT_RETENTION": "59m"}, nil, "POPPYHOST_AUDIT_RETENTION"},
		{"audit retention not a duration", map[string]string{"POPPYHOST_AUDIT_RETENTION": "90d"}, nil, "POPPYHOST_AUDIT_RETENTION"},
		{"zero admin rate", map[string]string{"POPPYHOST_ADMIN_RATE_PER_TOKEN": "0"}, nil, "POPPYHOST_ADMIN_RATE_PER_TOKEN"},
		{"bad Company API rate", map[string]string{"POPPYHOST_COMPANY_API_RATE_PER_KEY": "lots"}, nil, "POPPYHOST_COMPANY_API_RATE_PER_KEY"},
		{"zero login rate", map[string]string{"POPPYHOST_LOGIN_RATE_PER_ADDRESS": "0"}, nil, "POPPYHOST_LOGIN_RATE_PER_ADDRESS"},
		{"no KEK", map[string]string{"POPPYHOST_KEK_FILE": ""}, nil, "POPPYHOST_KEKS is required"},
		{"two KEK sources", map[string]string{"POPPYHOST_KEKS": testKEKs}, nil, "not be set together"},
		{"KEK not base64", map[string]string{"POPPYHOST_KEK_FILE": "", "POPPYHOST_KEKS": "k1:not base64!"}, nil, "32 bytes in base64"},
		{"KEK too short", map[string]string{"POPPYHOST_KEK_FILE": "", "POPPYHOST_KEKS": "k1:AAEC"}, nil, "32 bytes in base64"},
		{"KEK without id", map[string]string{"POPPYHOST_KEK_FILE": "", "POPPYHOST_KEKS": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}, nil, "id:base64key"},
		{"stray argument", nil, []string{"serve"}, "unexpected arguments"},
		{"unknown flag", nil, []string{"--nope"}, "not defined"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := base()
			for k, v := range tc.set {
				env[k] = v
			}
			_, err := Load(tc.args, envOf(env), io.Discard)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestAllProblemsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := Load(nil, envOf(map[string]string{"POPPYHOST_LOG_LEVEL": "loud"}), io.Discard)
	require.Error(t, err)
	for _, want := range []string{"POPPYHOST_PUBLIC_URL", "POPPYHOST_DATABASE_URL", "POPPYHOST_LOG_LEVEL", "choose how to serve"} {
		require.Contains(t, err.Error(), want)
	}
}

func TestDevDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{"--dev"}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, DevPublicURL, c.PublicURL.String())
	require.Equal(t, DevListenAddr, c.ListenAddr)
	require.Equal(t, DevOpsAddr, c.OpsAddr)
	require.Equal(t, ".data", c.DevCADir)
	require.True(t, c.AllowPrivateFetch)
	require.Empty(t, c.DatabaseURL, "dev mode starts its own database")
	require.Empty(t, c.KEKFile, "dev mode keeps its own KEK")

	// Explicit settings still win in dev mode.
	c, err = Load([]string{"--dev", "--listen-addr", ":9999"}, envOf(map[string]string{"POPPYHOST_PUBLIC_URL": "https://dev.example",
		"POPPYHOST_OPS_ADDR": "127.0.0.1:9191"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, ":9999", c.ListenAddr)
	require.Equal(t, "127.0.0.1:9191", c.OpsAddr)
	require.Equal(t, "https://dev.example", c.PublicURL.String())
}

func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	env := base()
	env["POPPYHOST_TRUSTED_PROXIES"] = "10.1.2.0/24, 192.0.2.7"
	c, err := Load(nil, envOf(env), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24"), netip.MustParsePrefix("192.0.2.7/32")}, c.TrustedProxies)
}

func TestLogValueMasksSecrets(t *testing.T) {
	t.Parallel()
	env := base()
	env["POPPYHOST_ADMIN_TOKEN"] = "admin-token-that-is-secret"
	env["POPPYHOST_KEK_FILE"] = ""
	env["POPPYHOST_KEKS"] = testKEKs
	c, err := Load(nil, envOf(env), io.Discard)
	require.NoError(t, err)
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, nil)).Info("start", slog.Any("config", c))
	out := b.String()
	require.NotContains(t, out, "s3cret")
	require.NotContains(t, out, "admin-token-that-is-secret")
	require.NotContains(t, out, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
	require.Contains(t, out, `"keks_set":true`)
	require.Contains(t, out, "db.internal")
	require.Contains(t, out, `"admin_token_set":true`)
}

func TestMaskDatabaseURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u:xxxxx@h/db", MaskDatabaseURL("postgres://u:pw@h/db"))
	require.Equal(t, "postgres://h/db?password=xxxxx", MaskDatabaseURL("postgres://h/db?password=pw"))
	require.Equal(t, "host=h password=xxxxx dbname=db", MaskDatabaseURL("host=h password=pw dbname=db"))
	require.Equal(t, "postgres://u@h/db", MaskDatabaseURL("postgres://u@h/db"))
}

func TestKeyring(t *testing.T) {
	t.Parallel()
	env := base()
	env["POPPYHOST_KEK_FILE"] = ""
	env["POPPYHOST_KEKS"] = testKEKs
	c, err := Load(nil, envOf(env), io.Discard)
	require.NoError(t, err)
	ring, err := c.Keyring()
	require.NoError(t, err)
	require.Equal(t, "new", ring.Current(), "the last KEK is current")

	// A file's problems show at start, with its path.
	env = base()
	env["POPPYHOST_KEK_FILE"] = t.TempDir() + "/missing"
	c, err = Load(nil, envOf(env), io.Discard)
	require.NoError(t, err)
	_, err = c.Keyring()
	require.ErrorContains(t, err, "missing")
}
