package sealing_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/signing"
)

// secretSet collects key material a dump must not reveal.
type secretSet struct {
	t    *testing.T
	raws [][]byte
}

// add records raw secret bytes.
func (s *secretSet) add(raw []byte) { s.raws = append(s.raws, bytes.Clone(raw)) }

// addKey records a private JWK's d.
func (s *secretSet) addKey(key jwk.Key) {
	var members map[string]any
	b, err := json.Marshal(key)
	require.NoError(s.t, err)
	require.NoError(s.t, json.Unmarshal(b, &members))
	d, err := base64.RawURLEncoding.DecodeString(members["d"].(string))
	require.NoError(s.t, err)
	s.add(d)
}

// revealed returns the recorded secrets that dump shows, each once, in hex (how a
// dump writes bytea), base64 or base64url (how JSON carries them).
func (s *secretSet) revealed(dump []byte) []string {
	var found []string
	for _, raw := range s.raws {
		for _, form := range []string{hex.EncodeToString(raw), base64.StdEncoding.EncodeToString(raw),
			base64.RawStdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw)} {
			if bytes.Contains(dump, []byte(form)) {
				found = append(found, form)
				break
			}
		}
	}
	return found
}

// pgDump dumps the bundle's database, schema and data, as a backup would.
func (b *bundle) pgDump(t *testing.T) []byte {
	t.Helper()
	out, err := exec.Command("/usr/bin/pg_dump", "--dbname", b.pool.Config().ConnString()).Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "company_data_keys")
	return out
}

// legacyCompany stores a Company's secrets as they were stored before
// sealing: a signing key, an HMAC secret and two webhook secrets, in
// plaintext.
func (b *bundle) legacyCompany(t *testing.T, slug string, secrets *secretSet) (id int64, kid string, secret []byte) {
	t.Helper()
	id = b.company(t, slug)
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	key, err := jwk.FromRaw(raw)
	require.NoError(t, err)
	tp, err := key.Thumbprint(crypto.SHA256)
	require.NoError(t, err)
	kid = base64.RawURLEncoding.EncodeToString(tp)
	require.NoError(t, key.Set(jwk.KeyIDKey, kid))
	jwkJSON, err := json.Marshal(key)
	require.NoError(t, err)
	secrets.addKey(key)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO signing_keys (company_id, kid, private_jwk, created_at) VALUES ($1, $2, $3, now())`,
		id, kid, jwkJSON)
	require.NoError(t, err)

	secret, cur, prev := make([]byte, 32), make([]byte, 32), make([]byte, 32)
	for _, s := range [][]byte{secret, cur, prev} {
		_, _ = rand.Read(s)
		secrets.add(s)
	}
	_, err = b.pool.Exec(b.ctx, `INSERT INTO company_secrets (company_id, version, secret, created_at) VALUES ($1, 1, $2, now())`, id, secret)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO conversation_webhook_secrets (company_id, secret, created_at, previous_secret, previous_until)
		VALUES ($1, $2, now(), $3, now() + interval '1 day')`, id, cur, prev)
	require.NoError(t, err)
	return id, kid, secret
}

// TestDumpRevealsNoSecret: Companies with signing keys (current and
// retired), HMAC secrets (current and rotated) and webhook secrets
// (current and previous), some stored before sealing and sealed since; a
// pg_dump of the database shows none of them.
func TestDumpRevealsNoSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sealer := b.sealer(t, b.k1)
	keys := signing.NewKeys(b.pool, sealer, signing.Options{})
	delivery := conversations.NewDelivery(conversations.DeliveryOptions{Pool: b.pool, Sealer: sealer})
	secrets := &secretSet{t: t}
	legacy, legacyKid, legacySecret := b.legacyCompany(t, "legacy", secrets)

	// Before sealing, the dump shows the legacy secrets: what the test
	// looks for is there to be found.
	require.Len(t, secrets.revealed(b.pgDump(t)), 4)

	// Readers take the plaintext rows as they are meanwhile.
	key, err := signing.NewKeys(b.pool, sealer, signing.Options{}).Signer(b.ctx, legacy)
	require.NoError(t, err)
	require.Equal(t, legacyKid, key.KeyID())
	s, err := signing.NewKeys(b.pool, sealer, signing.Options{}).Secret(b.ctx, legacy)
	require.NoError(t, err)
	require.Equal(t, legacySecret, s)

	for _, slug := range []string{"alpha", "beta", "gamma"} {
		id := b.company(t, slug)
		for range 2 {
			key, err := keys.Signer(b.ctx, id)
			require.NoError(t, err)
			secrets.addKey(key)
			require.NoError(t, keys.Rotate(b.ctx, id))

			secret, err := keys.Secret(b.ctx, id)
			require.NoError(t, err)
			secrets.add(secret)
			_, err = keys.RotateSecret(b.ctx, id, time.Now().Add(time.Hour))
			require.NoError(t, err)

			whsec, _, err := delivery.RotateSecret(b.ctx, id)
			require.NoError(t, err)
			raw, err := conversations.DecodeWebhookSecret(whsec)
			require.NoError(t, err)
			secrets.add(raw)
		}
	}

	// The first start seals the legacy rows, which read the same after.
	n, err := sealer.SealPlaintext(b.ctx, discard)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	n, err = sealer.SealPlaintext(b.ctx, discard)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left")
	key, err = signing.NewKeys(b.pool, sealer, signing.Options{}).Signer(b.ctx, legacy)
	require.NoError(t, err)
	require.Equal(t, legacyKid, key.KeyID())
	s, err = signing.NewKeys(b.pool, b.sealer(t, b.k1), signing.Options{}).Secret(b.ctx, legacy)
	require.NoError(t, err)
	require.Equal(t, legacySecret, s)

	require.Empty(t, secrets.revealed(b.pgDump(t)))
}

// interrupting is an Executor whose context is cancelled after its first
// UPDATE, as a process stopped during SealPlaintext.
type interrupting struct {
	*pgxpool.Pool
	cancel context.CancelFunc
}

func (i interrupting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.HasPrefix(sql, "UPDATE") {
		defer i.cancel()
	}
	return i.Pool.Exec(ctx, sql, args...)
}

// TestSealPlaintextInterrupted: a run stopped after its first row leaves
// every secret readable, some sealed and some not, and the next run
// seals the rest.
func TestSealPlaintextInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	secrets := &secretSet{t: t}
	type legacy struct {
		id     int64
		kid    string
		secret []byte
	}
	var companies []legacy
	for _, slug := range []string{"one", "two", "three"} {
		id, kid, secret := b.legacyCompany(t, slug, secrets)
		companies = append(companies, legacy{id, kid, secret})
	}
	ring, err := sealing.ParseKeyring(b.k1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	n, err := sealing.New(interrupting{b.pool, cancel}, ring, nil).SealPlaintext(ctx, discard)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, n)

	sealer := b.sealer(t, b.k1)
	check := func() {
		t.Helper()
		for _, c := range companies {
			keys := signing.NewKeys(b.pool, sealer, signing.Options{})
			key, err := keys.Signer(b.ctx, c.id)
			require.NoError(t, err)
			require.Equal(t, c.kid, key.KeyID())
			s, err := keys.Secret(b.ctx, c.id)
			require.NoError(t, err)
			require.Equal(t, c.secret, s)
		}
	}
	check()
	require.Len(t, secrets.revealed(b.pgDump(t)), len(secrets.raws)-1, "one sealed, the rest not yet")

	n, err = sealer.SealPlaintext(b.ctx, discard)
	require.NoError(t, err)
	require.Equal(t, 4*len(companies)-1, n)
	check()
	require.Empty(t, secrets.revealed(b.pgDump(t)))
}
