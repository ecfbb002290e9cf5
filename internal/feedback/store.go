package feedback

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is one stored feedback report.
type Report struct {
	ID          int64     `json:"id"`
	ClientID    string    `json:"client_id"`
	UserID      string    `json:"user_id"`
	AgentID     string    `json:"agent_id,omitempty"`
	SID         string    `json:"sid"`
	Task        string    `json:"task"`
	Description string    `json:"description"`
	Answered    bool      `json:"answered"`
	CreatedAt   time.Time `json:"created_at"`
}

// Store keeps reports in PostgreSQL, always filtered by Company.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

func (s *Store) add(ctx context.Context, companyID int64, r *Report) error {
	return s.pool.QueryRow(ctx, `INSERT INTO feedback (company_id, client_id, user_id, agent_id, sid, task, description, answered)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id, created_at`,
		companyID, r.ClientID, r.UserID, r.AgentID, r.SID, r.Task, r.Description, r.Answered).Scan(&r.ID, &r.CreatedAt)
}

// List returns up to limit reports of a Company, newest first, older than
// the report before (0: from the newest).
func (s *Store) List(ctx context.Context, companyID, before int64, limit int) ([]Report, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, client_id, user_id, agent_id, sid, task, description, answered, created_at
		FROM feedback WHERE company_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, companyID, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Report, error) {
		var r Report
		err := row.Scan(&r.ID, &r.ClientID, &r.UserID, &r.AgentID, &r.SID, &r.Task, &r.Description, &r.Answered, &r.CreatedAt)
		return r, err
	})
}
