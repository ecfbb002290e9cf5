package accounts_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

func TestHashPassword(t *testing.T) {
	t.Parallel()
	const password = "correct horse battery staple"
	h1 := accounts.HashPassword(password)
	h2 := accounts.HashPassword(password)

	// $argon2id$v=19$m=65536,t=3,p=2$salt$key (RFC 9106 parameters).
	parts := strings.Split(h1, "$")
	require.Len(t, parts, 6, h1)
	require.Equal(t, []string{"", "argon2id", "v=19", "m=65536,t=3,p=2"}, parts[:4])
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	require.NoError(t, err)
	require.Len(t, salt, 16)
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	require.NoError(t, err)
	require.Len(t, key, 32)

	require.NotContains(t, h1, password)
	require.NotEqual(t, h1, h2, "each hash has its own salt")

	require.True(t, accounts.VerifyPassword(h1, password))
	require.True(t, accounts.VerifyPassword(h2, password))
	for _, wrong := range []string{"", "correct horse battery stapl", "Correct horse battery staple"} {
		require.False(t, accounts.VerifyPassword(h1, wrong), "%q", wrong)
	}

	// Unicode passwords are hashed as their UTF-8 bytes.
	u := accounts.HashPassword("pässwörd-密码")
	require.True(t, accounts.VerifyPassword(u, "pässwörd-密码"))
	require.False(t, accounts.VerifyPassword(u, "passwörd-密码"))
}

func TestVerifyPasswordRejectsMalformedHashes(t *testing.T) {
	t.Parallel()
	const password = "correct horse"
	good := accounts.HashPassword(password)
	parts := strings.Split(good, "$")
	with := func(i int, v string) string {
		p := append([]string(nil), parts...)
		p[i] = v
		return strings.Join(p, "$")
	}
	tests := map[string]string{
		"empty":            "",
		"the password":     password,
		"argon2i":          with(1, "argon2i"),
		"bcrypt":           "$2a$10$abcdefghijklmnopqrstuuABCDEFGHIJKLMNOPQRSTUVWXYZ01234",
		"missing key":      strings.Join(parts[:5], "$"),
		"extra part":       good + "$x",
		"bad parameters":   with(3, "m=x,t=3,p=2"),
		"no parameters":    with(3, ""),
		"bad salt":         with(4, "!!!"),
		"bad key":          with(5, "!!!"),
		"empty key":        with(5, ""),
		"other salt":       with(4, base64.RawStdEncoding.EncodeToString([]byte("0123456789abcdef"))),
		"other key":        with(5, base64.RawStdEncoding.EncodeToString(make([]byte, 32))),
		"shorter key":      with(5, parts[5][:20]),
		"other parameters": with(3, "m=65536,t=2,p=2"),
	}
	for name, h := range tests {
		require.False(t, accounts.VerifyPassword(h, password), name)
	}
	require.True(t, accounts.VerifyPassword(good, password))
}

func TestCheckUsernameAndPassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"alice", "alice@example.com", "ünïcödé", strings.Repeat("u", accounts.MaxUsername)} {
		require.Empty(t, accounts.CheckUsername(u), "%q", u)
	}
	for _, u := range []string{"", "a b", "a\tb", "a\nb", "a\x00b", "a\u00a0b", "a\u2003b",
		// The Company's people read usernames: none may read otherwise than it is.
		"admin\u202e", "pay\u200bpal", "a\u2066b", strings.Repeat("u", accounts.MaxUsername+1)} {
		require.NotEmpty(t, accounts.CheckUsername(u), "%q", u)
	}
	for _, p := range []string{"12345678", "ééééééééé", "with spaces ok", strings.Repeat("p", accounts.MaxPassword)} {
		require.Empty(t, accounts.CheckPassword(p), "%q", p)
	}
	for _, p := range []string{"", "1234567", "ééééééé", strings.Repeat("p", accounts.MaxPassword+1), strings.Repeat("é", 129)} {
		require.NotEmpty(t, accounts.CheckPassword(p), "%q", p)
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	ctx := context.Background()
	store := accounts.NewStore(pool)

	company := func(slug string) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id`, slug).Scan(&id))
		return id
	}
	alpha, beta := company("alpha"), company("beta")

	a, err := store.Create(ctx, alpha, "alice", "alpha password")
	require.NoError(t, err)
	require.NotZero(t, a.ID)
	require.Equal(t, "alice", a.Username)
	require.False(t, a.CreatedAt.IsZero())

	// The stored hash verifies the password and is not the password.
	var hash string
	require.NoError(t, pool.QueryRow(ctx, `SELECT password_hash FROM accounts WHERE id = $1`, a.ID).Scan(&hash))
	require.NotEqual(t, "alpha password", hash)
	require.True(t, strings.HasPrefix(hash, "$argon2id$"))
	require.True(t, accounts.VerifyPassword(hash, "alpha password"))

	// Usernames are unique per Company only.
	_, err = store.Create(ctx, alpha, "alice", "another password")
	require.ErrorIs(t, err, accounts.ErrTaken)
	b, err := store.Create(ctx, beta, "alice", "beta password")
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	// Usernames are compared exactly.
	_, err = store.Create(ctx, alpha, "Alice", "capital password")
	require.NoError(t, err)

	got, err := store.Authenticate(ctx, alpha, "alice", "alpha password")
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, "alice", got.Username)
	require.WithinDuration(t, a.CreatedAt, got.CreatedAt, 0)

	got, err = store.Authenticate(ctx, beta, "alice", "beta password")
	require.NoError(t, err)
	require.Equal(t, b.ID, got.ID)

	tests := []struct {
		name      string
		companyID int64
		username  string
		password  string
	}{
		{"wrong password", alpha, "alice", "wrong password"},
		{"empty password", alpha, "alice", ""},
		{"password of another Company's account", alpha, "alice", "beta password"},
		{"account of another Company", beta, "alice", "alpha password"},
		{"unknown username", alpha, "bob", "alpha password"},
		{"username in another case", alpha, "ALICE", "alpha password"},
		{"unknown Company", alpha + beta + 100, "alice", "alpha password"},
	}
	for _, tt := range tests {
		acct, err := store.Authenticate(ctx, tt.companyID, tt.username, tt.password)
		require.ErrorIs(t, err, accounts.ErrNotFound, tt.name)
		require.Zero(t, acct, tt.name)
	}

	// An account goes with its Company.
	_, err = pool.Exec(ctx, `DELETE FROM companies WHERE id = $1`, alpha)
	require.NoError(t, err)
	_, err = store.Authenticate(ctx, alpha, "alice", "alpha password")
	require.ErrorIs(t, err, accounts.ErrNotFound)
	_, err = store.Authenticate(ctx, beta, "alice", "beta password")
	require.NoError(t, err)
}

func TestVerifyPasswordRefusesDamagedHashes(t *testing.T) {
	t.Parallel()
	good := accounts.HashPassword("correct horse")
	parts := strings.Split(good, "$")
	for _, bad := range []string{
		strings.Replace(good, "t=3", "t=0", 1),
		strings.Replace(good, "p=2", "p=0", 1),
		strings.Replace(good, "m=65536", "m=4294967295", 1),
		strings.Replace(good, "v=19", "v=16", 1),
		"$argon2id$" + parts[2] + "$" + parts[3] + "$" + parts[4] + "$",
	} {
		require.False(t, accounts.VerifyPassword(bad, "correct horse"), bad)
	}
	require.True(t, accounts.VerifyPassword(good, "correct horse"))
}
