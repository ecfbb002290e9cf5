package clientauth

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
)

// PGReplays is the ReplayStore on PostgreSQL (table client_assertion_jtis),
// shared by every replica.
//
// Rows are keyed by (issuer, client_id, jti), not by Company: Use is given
// the issuer, and the issuer is safe to key by because it stands for exactly
// one Company for good. It is {PUBLIC_URL}/t/{slug} (tenant.URLs.Issuer),
// and a slug is never reused, even after its Company is deleted
// (retired_slugs, spec 3.2), so one Company's jti never blocks, nor is
// blocked by, another's. A deleted Company's rows simply wait for the sweep.
type PGReplays struct {
	pool *pgxpool.Pool
}

// NewPGReplays returns a PGReplays on pool.
func NewPGReplays(pool *pgxpool.Pool) *PGReplays { return &PGReplays{pool: pool} }

var _ ReplayStore = (*PGReplays)(nil)

// Use records jti for clientID at issuer until exp. It reports true only to
// the first caller, however many race: the primary key decides. A row is
// refused until the sweep removes it, even just past exp, which is stricter
// than needed and never lets a jti through twice.
func (s *PGReplays) Use(ctx context.Context, issuer, clientID, jti string, exp time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO client_assertion_jtis (issuer, client_id, jti, expires_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, issuer, clientID, jti, exp)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Sweep deletes the records whose exp is before now, and says how many.
func (s *PGReplays) Sweep(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "client_assertion_jtis", "expires_at < $1", now)
}
