package signing

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"golang.org/x/sync/singleflight"

	"github.com/poppyhost/poppyhost/internal/sealing"
)

// Options tune Keys. Zero values take the defaults in brackets.
type Options struct {
	// Now is the clock [time.Now].
	Now func() time.Time
	// RotateAfter is the age at which the periodic job replaces a current
	// key [90 days].
	RotateAfter time.Duration
	// Retain is how long a retired key stays published for verification
	// after it stops signing. It must cover the longest lifetime of a token
	// signed with it, plus CacheTTL [48h].
	Retain time.Duration
	// CacheTTL is how long a replica caches a Company's keys and secrets
	// in memory [1 minute].
	CacheTTL time.Duration
}

// Keys signs and verifies a Company's tokens with its keys, and hands out
// its secret. It is safe for concurrent use; make one per process.
type Keys struct {
	pool   *pgxpool.Pool
	sealer *sealing.Sealer
	opts   Options

	loads   singleflight.Group
	flights atomic.Uint64 // loads started, numbering keyrings

	mu      sync.Mutex
	rings   map[int64]*keyring
	secrets map[int64]*secrets
}

// keyring is what a load read of one Company's keys.
type keyring struct {
	gen    uint64    // the load's number: higher started later
	loaded time.Time // by Options.Now, for CacheTTL
	keys   []*key    // the current key first, then retired keys, newest first
}

// key is one stored key, parsed once per load.
type key struct {
	kid       string
	public    jwk.Key // kid, alg ES256, use sig
	signer    *ecdsa.PrivateKey
	verifier  *ecdsa.PublicKey
	retiredAt time.Time // zero for the current key
}

// current returns the ring's current key, or nil.
func (r *keyring) current() *key {
	if len(r.keys) > 0 && r.keys[0].retiredAt.IsZero() {
		return r.keys[0]
	}
	return nil
}

// valid reports whether k verifies tokens at now: it is current, or was
// retired less than retain ago.
func (k *key) valid(now time.Time, retain time.Duration) bool {
	return k.retiredAt.IsZero() || now.Before(k.retiredAt.Add(retain))
}

// find returns the key named kid if it verifies tokens at now.
func (r *keyring) find(kid string, now time.Time, retain time.Duration) *key {
	for _, k := range r.keys {
		if k.kid == kid && k.valid(now, retain) {
			return k
		}
	}
	return nil
}

// NewKeys returns Keys on pool, whose private keys and secrets sealer
// seals.
func NewKeys(pool *pgxpool.Pool, sealer *sealing.Sealer, opts Options) *Keys {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RotateAfter == 0 {
		opts.RotateAfter = 90 * 24 * time.Hour
	}
	if opts.Retain == 0 {
		opts.Retain = 48 * time.Hour
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = time.Minute
	}
	return &Keys{pool: pool, sealer: sealer, opts: opts, rings: map[int64]*keyring{}, secrets: map[int64]*secrets{}}
}

// Signer returns the Company's current private signing key: a jwk.Key, EC
// P-256, alg ES256, use sig, kid its RFC 7638 thumbprint (base64url). The
// first call for a Company makes its key; racing first calls on any number
// of replicas settle on one. Each call returns a new copy.
func (k *Keys) Signer(ctx context.Context, companyID int64) (jwk.Key, error) {
	cur, err := k.current(ctx, companyID)
	if err != nil {
		return nil, err
	}
	priv, err := jwk.FromRaw(cur.signer)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	for name, v := range map[string]any{jwk.KeyIDKey: cur.kid, jwk.AlgorithmKey: jwa.ES256, jwk.KeyUsageKey: jwk.ForSignature} {
		if err := priv.Set(name, v); err != nil {
			return nil, fmt.Errorf("signing: %w", err)
		}
	}
	return priv, nil
}

// current returns the Company's current key, making it on first use.
func (k *Keys) current(ctx context.Context, companyID int64) (*key, error) {
	ring, _, err := k.cached(ctx, companyID)
	if err != nil {
		return nil, err
	}
	if cur := ring.current(); cur != nil {
		return cur, nil
	}
	if err := k.create(ctx, companyID); err != nil {
		return nil, err
	}
	if ring, err = k.fresh(ctx, companyID); err != nil {
		return nil, err
	}
	if cur := ring.current(); cur != nil {
		return cur, nil
	}
	return nil, fmt.Errorf("signing: company %d has no current key after making one", companyID)
}

// PublicSet returns the public keys that verify the Company's tokens: the
// current key first, then the keys retired less than Retain ago, newest
// first. Each has kid, alg ES256 and use sig. The first call for a Company
// makes its key. The keys are shared: do not modify them.
func (k *Keys) PublicSet(ctx context.Context, companyID int64) (jwk.Set, error) {
	if _, err := k.current(ctx, companyID); err != nil {
		return nil, err
	}
	ring, _, err := k.cached(ctx, companyID)
	if err != nil {
		return nil, err
	}
	now := k.opts.Now()
	set := jwk.NewSet()
	for _, key := range ring.keys {
		if key.valid(now, k.opts.Retain) {
			if err := set.AddKey(key.public); err != nil {
				return nil, fmt.Errorf("signing: %w", err)
			}
		}
	}
	return set, nil
}

// Rotate makes a new current key for the Company. The old one, if any, is
// retired now: it signs nothing more and stays in PublicSet for Retain.
// Rotations racing on several replicas may settle on one new key.
func (k *Keys) Rotate(ctx context.Context, companyID int64) error {
	_, err := k.rotate(ctx, companyID, nil)
	return err
}

// rotate retires the Company's current key and stores a new one, in one
// transaction. With olderThan, it does so only while the current key was
// made at or before then, so that the periodic job does not rotate a key
// someone has just rotated. It reports whether it retired a key.
func (k *Keys) rotate(ctx context.Context, companyID int64, olderThan *time.Time) (bool, error) {
	kid, jwkJSON, err := newKey()
	if err != nil {
		return false, err
	}
	sealed, err := k.sealer.Seal(ctx, companyID, sealing.SigningKey, kid, jwkJSON)
	if err != nil {
		return false, err
	}
	retired, err := k.replaceKey(ctx, companyID, kid, sealed, k.opts.Now(), olderThan)
	if err != nil || olderThan != nil && !retired {
		return false, err
	}
	// Sign with the new key here at once; other replicas follow within
	// CacheTTL.
	if _, err := k.fresh(ctx, companyID); err != nil {
		k.mu.Lock()
		delete(k.rings, companyID)
		k.mu.Unlock()
	}
	return retired, nil
}

// create stores a first key for the Company unless it has a current one.
func (k *Keys) create(ctx context.Context, companyID int64) error {
	kid, jwkJSON, err := newKey()
	if err != nil {
		return err
	}
	sealed, err := k.sealer.Seal(ctx, companyID, sealing.SigningKey, kid, jwkJSON)
	if err != nil {
		return err
	}
	return insertKey(ctx, k.pool, companyID, kid, sealed, k.opts.Now())
}

// newKey makes a P-256 key and returns its kid and its private JWK.
func newKey() (string, []byte, error) {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, fmt.Errorf("signing: generate key: %w", err)
	}
	priv, err := jwk.FromRaw(raw)
	if err != nil {
		return "", nil, fmt.Errorf("signing: %w", err)
	}
	tp, err := priv.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", nil, fmt.Errorf("signing: %w", err)
	}
	kid := base64.RawURLEncoding.EncodeToString(tp)
	for name, v := range map[string]any{jwk.KeyIDKey: kid, jwk.AlgorithmKey: jwa.ES256, jwk.KeyUsageKey: jwk.ForSignature} {
		if err := priv.Set(name, v); err != nil {
			return "", nil, fmt.Errorf("signing: %w", err)
		}
	}
	b, err := json.Marshal(priv)
	if err != nil {
		return "", nil, fmt.Errorf("signing: %w", err)
	}
	return kid, b, nil
}

// parseKey reads a stored private JWK. Its errors never quote the JWK.
func parseKey(kid string, jwkJSON []byte, retiredAt *time.Time) (*key, error) {
	priv, err := jwk.ParseKey(jwkJSON)
	if err != nil {
		return nil, errors.New("not a JWK")
	}
	var raw ecdsa.PrivateKey
	if err := priv.Raw(&raw); err != nil || raw.Curve != elliptic.P256() {
		return nil, errors.New("not an EC P-256 private key")
	}
	if priv.KeyID() != kid {
		return nil, errors.New("its kid differs from the row's")
	}
	pub, err := priv.PublicKey()
	if err != nil {
		return nil, err
	}
	k := &key{kid: kid, public: pub, signer: &raw, verifier: &raw.PublicKey}
	if retiredAt != nil {
		k.retiredAt = *retiredAt
	}
	return k, nil
}

// unseal returns a stored secret: opened when sealed, else as stored
// before migration 00025 until sealing.SealPlaintext seals it.
func (k *Keys) unseal(ctx context.Context, companyID int64, purpose sealing.Purpose, row string, plain, sealed []byte) ([]byte, error) {
	if sealed == nil {
		return plain, nil
	}
	return k.sealer.Open(ctx, companyID, purpose, row, sealed)
}

// loadTimeout bounds a coalesced load, which outlives the callers'
// contexts so that one caller giving up does not fail the others.
const loadTimeout = 10 * time.Second

// cached returns the Company's keys from the cache while younger than
// CacheTTL, else loads them. fresh says whether they were loaded for this
// call.
func (k *Keys) cached(ctx context.Context, companyID int64) (ring *keyring, fresh bool, err error) {
	k.mu.Lock()
	ring = k.rings[companyID]
	k.mu.Unlock()
	if ring != nil && k.opts.Now().Sub(ring.loaded) < k.opts.CacheTTL {
		return ring, false, nil
	}
	ring, err = k.fresh(ctx, companyID)
	return ring, true, err
}

// fresh returns the Company's keys as read by a query that started after
// the call, so that it sees every key committed before. A load already in
// flight is joined, and if it started too early, one more is made.
func (k *Keys) fresh(ctx context.Context, companyID int64) (*keyring, error) {
	after := k.flights.Load()
	for {
		ring, err := k.flight(ctx, companyID)
		if err != nil || ring.gen > after {
			return ring, err
		}
	}
}

// flight loads the Company's keys into the cache, sharing one query with
// concurrent callers.
func (k *Keys) flight(ctx context.Context, companyID int64) (*keyring, error) {
	ch := k.loads.DoChan(strconv.FormatInt(companyID, 10), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
		defer cancel()
		ring, err := k.load(ctx, companyID, k.flights.Add(1))
		if err != nil {
			return nil, err
		}
		k.mu.Lock()
		k.rings[companyID] = ring
		k.mu.Unlock()
		return ring, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*keyring), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// load reads the Company's current key and the keys retired less than
// Retain ago.
func (k *Keys) load(ctx context.Context, companyID int64, gen uint64) (*keyring, error) {
	now := k.opts.Now()
	ring := &keyring{gen: gen, loaded: now}
	err := k.eachKey(ctx, companyID, now.Add(-k.opts.Retain), func(kid string, plain, sealed []byte, retiredAt *time.Time) error {
		jwkJSON, err := k.unseal(ctx, companyID, sealing.SigningKey, kid, plain, sealed)
		if err != nil {
			return fmt.Errorf("stored key %s: %w", kid, err)
		}
		key, err := parseKey(kid, jwkJSON, retiredAt)
		if err != nil {
			return fmt.Errorf("stored key %s: %w", kid, err)
		}
		ring.keys = append(ring.keys, key)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("signing: load keys of company %d: %w", companyID, err)
	}
	return ring, nil
}
