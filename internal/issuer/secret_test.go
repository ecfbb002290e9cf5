package issuer_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// signedBy reports whether token, fosite's "key.signature", was made
// with secret (HMAC-SHA512/256, fosite's default).
func signedBy(t *testing.T, token string, secret []byte) bool {
	t.Helper()
	key, sig, ok := strings.Cut(token, ".")
	require.True(t, ok)
	raw, err := base64.RawURLEncoding.DecodeString(key)
	require.NoError(t, err)
	m := hmac.New(sha512.New512_256, secret)
	m.Write(raw)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)) == sig
}

// TestSecretRotation: after the operator rotates a Company's secret, new
// codes and refresh tokens are signed with the new one, and what the old
// one signed still works until it expires.
func TestSecretRotation(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	var companyID int64
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = 'stormline'`).Scan(&companyID))
	secrets := func() (current []byte, rotated [][]byte) {
		keys := signing.NewKeys(s.env.Pool, testdb.Sealer(s.env.Pool), signing.Options{})
		current, err := keys.Secret(ctx, companyID)
		require.NoError(t, err)
		rotated, err = keys.RotatedSecrets(ctx, companyID)
		require.NoError(t, err)
		return current, rotated
	}

	// A token and an unused code, signed with the first secret.
	verifier := oauth2.GenerateVerifier()
	back := s.signIn(t, s.env.Browser(t), verifier, "st4te", []string{"orders:read"})
	tok, err := s.conf.Exchange(s.ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	verifier2 := oauth2.GenerateVerifier()
	code := s.signIn(t, s.env.Browser(t), verifier2, "st4te", []string{"orders:read"}).Query().Get("code")
	first, rotated := secrets()
	require.Empty(t, rotated)
	require.True(t, signedBy(t, tok.RefreshToken, first))

	resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/secret/rotations", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	until, err := time.Parse(time.RFC3339, resp.JSON(t)["previous_verifies_until"].(string))
	require.NoError(t, err)
	require.True(t, until.After(time.Now().Add(29*24*time.Hour)), "the old secret verifies as long as a refresh token lasts: %s", until)
	second, rotated := secrets()
	require.NotEqual(t, first, second)
	require.Equal(t, [][]byte{first}, rotated)

	// The old code and refresh token still work; what they yield is
	// signed with the new secret.
	fromCode, err := s.conf.Exchange(s.ctx, code, oauth2.VerifierOption(verifier2))
	require.NoError(t, err)
	require.True(t, signedBy(t, fromCode.RefreshToken, second))
	tok.Expiry = time.Now().Add(-time.Hour)
	fresh, err := s.conf.TokenSource(s.ctx, tok).Token()
	require.NoError(t, err)
	require.NotEqual(t, tok.RefreshToken, fresh.RefreshToken)
	require.True(t, signedBy(t, fresh.RefreshToken, second))
	require.False(t, signedBy(t, fresh.RefreshToken, first))

	require.Equal(t, http.StatusNotFound,
		s.env.Admin(t, http.MethodPost, "/admin/v1/companies/nobody/secret/rotations", nil).Status)
}
