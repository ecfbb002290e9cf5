package dpop

import (
	"context"
	"time"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Store is the ReplayStore in PostgreSQL (table dpop_jtis).
type Store struct {
	db db.Executor
}

// NewStore returns a Store on e.
func NewStore(e db.Executor) *Store { return &Store{db: e} }

// Seen records jti for the key until then and reports whether it was new.
func (s *Store) Seen(ctx context.Context, companyID int64, jkt, jti string, until time.Time) (bool, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO dpop_jtis (company_id, jkt, jti, expires_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, companyID, jkt, jti, until)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Sweep deletes replay records past their window.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.db, "dpop_jtis", "expires_at < $1", now)
}

// Sweeps are the package's periodic work: forgetting proof jtis past
// their window, every minute.
func Sweeps(s *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "dpop_sweep_jtis", Every: time.Minute, Run: s.Sweep}}
}
