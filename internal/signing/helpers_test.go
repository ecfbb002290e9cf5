package signing_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// clock is a settable clock shared by the Keys of one test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// bundle is what a test works with: a database, a clock, and Keys on them
// standing for one replica.
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *clock
	keys  *signing.Keys
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{
		ctx:   context.Background(),
		pool:  testdb.NewPool(t),
		clock: &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
	}
	b.keys = b.replica()
	return b
}

// replica returns new Keys on the bundle's database and clock, as another
// replica would have.
func (b *bundle) replica() *signing.Keys {
	return signing.NewKeys(b.pool, testdb.Sealer(b.pool), signing.Options{Now: b.clock.Now})
}

// handler returns a Handler on the bundle's Keys, by which what a secret
// signed expires an hour from now.
func (b *bundle) handler() *signing.Handler {
	return signing.NewHandler(b.keys, func(context.Context, *tenant.Company) (time.Time, error) {
		return b.clock.Now().Add(time.Hour), nil
	})
}

// company inserts a Company and returns its ID.
func (b *bundle) company(t testing.TB, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id`, slug).Scan(&id))
	return id
}

// count returns how many signing keys the Company has stored, and how many
// of them are current.
func (b *bundle) count(t testing.TB, companyID int64) (all, current int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*), count(*) FILTER (WHERE retired_at IS NULL)
		FROM signing_keys WHERE company_id = $1`, companyID).Scan(&all, &current))
	return all, current
}

// kid returns the kid of the Company's current key.
func (b *bundle) kid(t testing.TB, k *signing.Keys, companyID int64) string {
	t.Helper()
	key, err := k.Signer(b.ctx, companyID)
	require.NoError(t, err)
	return key.KeyID()
}

// kids lists the kids of the Company's public set, in order.
func (b *bundle) kids(t testing.TB, k *signing.Keys, companyID int64) []string {
	t.Helper()
	set, err := k.PublicSet(b.ctx, companyID)
	require.NoError(t, err)
	var kids []string
	for i := range set.Len() {
		key, _ := set.Key(i)
		kids = append(kids, key.KeyID())
	}
	return kids
}

// sign signs payload for the Company and fails the test on error.
func (b *bundle) sign(t testing.TB, k *signing.Keys, companyID int64, typ, payload string) string {
	t.Helper()
	tok, err := k.Sign(b.ctx, companyID, typ, []byte(payload))
	require.NoError(t, err)
	return tok
}

// thumbprint is the RFC 7638 SHA-256 thumbprint of key, base64url.
func thumbprint(t testing.TB, key jwk.Key) string {
	t.Helper()
	tp, err := key.Thumbprint(crypto.SHA256)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(tp)
}

// decodeHeader returns the protected header of a compact JWS as members.
func decodeHeader(t testing.TB, tok string) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	require.NoError(t, err)
	var h map[string]any
	require.NoError(t, json.Unmarshal(raw, &h))
	return h
}

// segment is v as a base64url JSON segment.
func segment(t testing.TB, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(raw)
}
