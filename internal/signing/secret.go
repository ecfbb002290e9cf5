package signing

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/sealing"
)

// secretLen is the size of a Company secret: 256 bits, HMAC-SHA256's block
// of security.
const secretLen = 32

// secrets is what a load read of one Company's secrets.
type secrets struct {
	loaded  time.Time // by Options.Now, for CacheTTL
	current []byte
	retired []retiredSecret // newest first
}

// retiredSecret is a secret that signs nothing more and verifies until
// until.
type retiredSecret struct {
	value []byte
	until time.Time
}

// Secret returns the Company's current 32-byte random secret, for HMACs of
// its codes and tokens. The first call for a Company makes it. Each
// replica caches it for CacheTTL, so after RotateSecret another replica
// may go on using the old one for that long. Each call returns a new copy.
func (k *Keys) Secret(ctx context.Context, companyID int64) ([]byte, error) {
	s, err := k.secretsOf(ctx, companyID)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(s.current), nil
}

// RotatedSecrets returns the Company's retired secrets that still verify
// what they signed, newest first. Each call returns new copies.
func (k *Keys) RotatedSecrets(ctx context.Context, companyID int64) ([][]byte, error) {
	s, err := k.secretsOf(ctx, companyID)
	if err != nil {
		return nil, err
	}
	now := k.opts.Now()
	var out [][]byte
	for _, r := range s.retired {
		if now.Before(r.until) {
			out = append(out, bytes.Clone(r.value))
		}
	}
	return out, nil
}

// maxRotationTries bounds how many times a rotation looks again for the
// current secret that racing rotations keep replacing.
const maxRotationTries = 100

// SecretRotation is what RotateSecret did.
type SecretRotation struct {
	// CreatedAt is when the new secret was made.
	CreatedAt time.Time
	// PreviousVerifiesUntil is until when the secret it replaced verifies.
	PreviousVerifiesUntil time.Time
}

// RotateSecret makes a new current secret for the Company. The one it
// replaces signs nothing more (on other replicas, after up to CacheTTL)
// and verifies until signedUntil, when what it signed has expired, plus
// CacheTTL for what other replicas signed with it meanwhile; the sweep
// then deletes it. Rotations racing on several replicas happen one after
// the other.
func (k *Keys) RotateSecret(ctx context.Context, companyID int64, signedUntil time.Time) (SecretRotation, error) {
	// The first secret, if the Company has none yet, is the one replaced.
	if _, err := k.secretsOf(ctx, companyID); err != nil {
		return SecretRotation{}, err
	}
	now := k.opts.Now()
	until := signedUntil
	if until.Before(now) {
		until = now
	}
	until = until.Add(k.opts.CacheTTL)
	value := make([]byte, secretLen)
	_, _ = rand.Read(value) // never fails (crypto/rand)
	err := db.InTx(ctx, k.pool, func(tx pgx.Tx) error {
		var version int
		// A racing rotation waits here for the first to commit, then finds
		// the row it locked retired and reads again the new current one
		// (each statement sees what committed before it).
		for tries := 0; ; tries++ {
			err := tx.QueryRow(ctx, `SELECT version FROM company_secrets
				WHERE company_id = $1 AND retired_at IS NULL FOR UPDATE`, companyID).Scan(&version)
			if err == nil {
				break
			}
			if !db.IsNotFound(err) || tries == maxRotationTries {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE company_secrets SET retired_at = $3, verifies_until = $4
			WHERE company_id = $1 AND version = $2`, companyID, version, now, until); err != nil {
			return err
		}
		return k.insertSecret(ctx, tx, companyID, version+1, value)
	})
	k.mu.Lock()
	delete(k.secrets, companyID)
	k.mu.Unlock()
	if err != nil {
		return SecretRotation{}, fmt.Errorf("signing: rotate the secret of company %d: %w", companyID, err)
	}
	return SecretRotation{CreatedAt: now, PreviousVerifiesUntil: until}, nil
}

// secretsOf returns the Company's secrets from the cache while younger
// than CacheTTL, else loads them, making the first secret on first use.
func (k *Keys) secretsOf(ctx context.Context, companyID int64) (*secrets, error) {
	now := k.opts.Now()
	k.mu.Lock()
	s := k.secrets[companyID]
	k.mu.Unlock()
	if s != nil && now.Sub(s.loaded) < k.opts.CacheTTL {
		return s, nil
	}
	// Requests that find the cache stale at once share one load, which
	// outlives the first caller's context as keys' loads do.
	v, err, _ := k.loads.Do("secret "+strconv.FormatInt(companyID, 10), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
		defer cancel()
		return k.loadSecrets(ctx, companyID, now)
	})
	if err == nil {
		s = v.(*secrets)
	}
	if err == nil && s.current == nil {
		value := make([]byte, secretLen)
		_, _ = rand.Read(value) // never fails (crypto/rand)
		// A racing replica's secret wins; both then read the same one.
		if err := k.insertSecret(ctx, k.pool, companyID, 1, value); err != nil {
			return nil, fmt.Errorf("signing: store the secret of company %d: %w", companyID, err)
		}
		s, err = k.loadSecrets(ctx, companyID, now)
	}
	if err != nil {
		return nil, fmt.Errorf("signing: read the secret of company %d: %w", companyID, err)
	}
	if s.current == nil {
		return nil, fmt.Errorf("signing: company %d has no current secret after making one", companyID)
	}
	k.mu.Lock()
	k.secrets[companyID] = s
	k.mu.Unlock()
	return s, nil
}

// loadSecrets reads the Company's current secret and the retired ones
// that still verify at now.
func (k *Keys) loadSecrets(ctx context.Context, companyID int64, now time.Time) (*secrets, error) {
	rows, err := k.pool.Query(ctx, `SELECT version, secret, secret_sealed, verifies_until FROM company_secrets
		WHERE company_id = $1 AND (retired_at IS NULL OR verifies_until > $2) ORDER BY version DESC`, companyID, now)
	if err != nil {
		return nil, err
	}
	var (
		version       int
		plain, sealed []byte
		until         *time.Time
	)
	s := &secrets{loaded: now}
	_, err = pgx.ForEachRow(rows, []any{&version, &plain, &sealed, &until}, func() error {
		value, err := k.unseal(ctx, companyID, sealing.CompanySecret, strconv.Itoa(version), plain, sealed)
		if err != nil {
			return fmt.Errorf("secret %d: %w", version, err)
		}
		if len(value) != secretLen {
			return fmt.Errorf("secret %d is not %d bytes", version, secretLen)
		}
		if until == nil {
			s.current = value
		} else {
			s.retired = append(s.retired, retiredSecret{value: value, until: *until})
		}
		return nil
	})
	return s, err
}

// insertSecret stores value, sealed, as the Company's current secret
// numbered version unless it has a current one or one so numbered.
func (k *Keys) insertSecret(ctx context.Context, ex db.Executor, companyID int64, version int, value []byte) error {
	sealed, err := k.sealer.Seal(ctx, companyID, sealing.CompanySecret, strconv.Itoa(version), value)
	if err != nil {
		return err
	}
	_, err = ex.Exec(ctx, `INSERT INTO company_secrets (company_id, version, secret_sealed, created_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, companyID, version, sealed, k.opts.Now())
	return err
}

// deleteVerified deletes the retired secrets that verify nothing more at
// now and returns how many.
func (k *Keys) deleteVerified(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, k.pool, "company_secrets", "verifies_until <= $1", now)
}
