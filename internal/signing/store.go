package signing

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// replaceKey retires the Company's current key and stores the new one, in
// one transaction; with olderThan, only while the current key was made at
// or before then. It reports whether it retired a key.
func (k *Keys) replaceKey(ctx context.Context, companyID int64, kid string, sealed []byte, now time.Time, olderThan *time.Time) (bool, error) {
	var retired bool
	err := db.InTx(ctx, k.pool, func(tx pgx.Tx) error {
		// A racing rotation waits here for the first to commit, then finds
		// no current key to retire, and its insert below yields to the
		// first's key.
		tag, err := tx.Exec(ctx, `UPDATE signing_keys SET retired_at = $2
			WHERE company_id = $1 AND retired_at IS NULL AND ($3::timestamptz IS NULL OR created_at <= $3)`,
			companyID, now, olderThan)
		if err != nil {
			return fmt.Errorf("signing: rotate: %w", err)
		}
		retired = tag.RowsAffected() > 0
		if olderThan != nil && !retired {
			return nil
		}
		return insertKey(ctx, tx, companyID, kid, sealed, now)
	})
	if err != nil {
		return false, err
	}
	return retired, nil
}

// insertKey stores a new current key, its private JWK sealed, or nothing
// when the Company already has one: the partial unique index
// signing_keys_current decides races.
func insertKey(ctx context.Context, ex db.Executor, companyID int64, kid string, sealed []byte, now time.Time) error {
	_, err := ex.Exec(ctx, `INSERT INTO signing_keys (company_id, kid, private_jwk_sealed, created_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (company_id) WHERE retired_at IS NULL DO NOTHING`,
		companyID, kid, sealed, now)
	if err != nil {
		return fmt.Errorf("signing: store a key for company %d: %w", companyID, err)
	}
	return nil
}

// eachKey calls fn with each of the Company's keys that is current or was
// retired after since, its private JWK sealed or, stored before sealing,
// plain: the current key first, then the retired ones, newest first.
func (k *Keys) eachKey(ctx context.Context, companyID int64, since time.Time, fn func(kid string, plain, sealed []byte, retiredAt *time.Time) error) error {
	rows, err := k.pool.Query(ctx, `SELECT kid, private_jwk, private_jwk_sealed, retired_at FROM signing_keys
		WHERE company_id = $1 AND (retired_at IS NULL OR retired_at > $2)
		ORDER BY retired_at DESC NULLS FIRST`, companyID, since)
	if err != nil {
		return err
	}
	var (
		kid           string
		plain, sealed []byte
		retiredAt     *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&kid, &plain, &sealed, &retiredAt}, func() error {
		return fn(kid, plain, sealed, retiredAt)
	})
	return err
}

// companiesWithKeysBefore lists the Companies whose current key was made
// at or before cutoff.
func (k *Keys) companiesWithKeysBefore(ctx context.Context, cutoff time.Time) ([]int64, error) {
	rows, err := k.pool.Query(ctx, `SELECT company_id FROM signing_keys
		WHERE retired_at IS NULL AND created_at <= $1 ORDER BY company_id`, cutoff)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// deleteRetired deletes the keys retired at or before cutoff and returns
// how many.
func (k *Keys) deleteRetired(ctx context.Context, cutoff time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, k.pool, "signing_keys", "retired_at <= $1", cutoff)
}
