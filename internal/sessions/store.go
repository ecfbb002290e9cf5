package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
)

// ErrNotFound means no such Session.
var ErrNotFound = errors.New("session not found")

// Session is a verified Session (spec 5).
type Session struct {
	CompanyID  int64
	ClientID   string
	SID        string
	UserID     string
	AgentID    string
	CreatedAt  time.Time
	LastSeenAt time.Time
	EndedAt    *time.Time
	// AccountID is the account the Session acts for since its first
	// access token, or 0 (spec 5.4).
	AccountID int64
	// New is true on the request that started the Session.
	New bool
	// Extensions are the extensions the Personal Agent declared, name to
	// version (its client metadata, spec 3.3).
	Extensions map[string]string
	// Operator is the operator a Web Bot Auth signature on this request
	// recognised (the key directory's host), or "".
	Operator string
	// pending is the Session's creation or use not yet recorded (Continue).
	pending *pending
	// replay is the request's jti, when its route records it (DeferReplay).
	replay *Replay
}

// Store keeps Sessions and the jti replay window in PostgreSQL, always
// filtered by Company.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

const sessionColumns = `client_id, sid, user_id, agent_id, created_at, last_seen_at, ended_at, coalesce(account_id, 0)`

func scanSession(companyID int64, row pgx.Row) (*Session, error) {
	s := &Session{CompanyID: companyID}
	err := row.Scan(&s.ClientID, &s.SID, &s.UserID, &s.AgentID, &s.CreatedAt, &s.LastSeenAt, &s.EndedAt, &s.AccountID)
	if err != nil {
		return nil, db.NotFound(err, ErrNotFound)
	}
	return s, nil
}

// lookup fetches the Session and records the jti in one statement, one
// round trip. It reports whether the jti was new. session_jtis is
// unlogged: a request that only records its jti writes no WAL, so its
// commit waits for no flush. With record false it only checks that the
// jti is unused, writing nothing: the request's route records it
// (DeferReplay).
func (s *Store) lookup(ctx context.Context, companyID int64, c *Claims, jtiUntil time.Time, record bool) (*Session, bool, error) {
	var (
		fresh, found bool
		sess         = &Session{CompanyID: companyID}
	)
	sql, args := `SELECT NOT EXISTS (SELECT FROM session_jtis WHERE company_id = $1 AND client_id = $2 AND jti = $4),`,
		[]any{companyID, c.ClientID, c.SID, c.JTI}
	if record {
		sql = `WITH jti AS (
			INSERT INTO session_jtis (company_id, client_id, jti, expires_at) VALUES ($1, $2, $4, $5)
			ON CONFLICT DO NOTHING RETURNING true AS fresh)
		SELECT coalesce((SELECT fresh FROM jti), false),`
		args = append(args, jtiUntil)
	}
	err := s.pool.QueryRow(ctx, sql+` s.sid IS NOT NULL,
			coalesce(s.client_id, ''), coalesce(s.sid, ''), coalesce(s.user_id, ''), coalesce(s.agent_id, ''),
			coalesce(s.created_at, 'epoch'), coalesce(s.last_seen_at, 'epoch'), s.ended_at, coalesce(s.account_id, 0)
		FROM (VALUES (1)) AS one
		LEFT JOIN sessions s ON s.company_id = $1 AND s.client_id = $2 AND s.sid = $3`,
		args...).Scan(&fresh, &found,
		&sess.ClientID, &sess.SID, &sess.UserID, &sess.AgentID, &sess.CreatedAt, &sess.LastSeenAt, &sess.EndedAt, &sess.AccountID)
	if err != nil {
		return nil, false, err
	}
	if !found {
		sess = nil
	}
	return sess, fresh, nil
}

// create starts a Session, or returns the one a concurrent request just
// started with the same sid.
func (s *Store) create(ctx context.Context, companyID int64, c *Claims) (*Session, error) {
	sess, err := scanSession(companyID, s.pool.QueryRow(ctx, `INSERT INTO sessions (company_id, client_id, sid, user_id, agent_id)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING `+sessionColumns,
		companyID, c.ClientID, c.SID, c.UserID, c.AgentID))
	if errors.Is(err, ErrNotFound) {
		return s.Get(ctx, companyID, c.ClientID, c.SID)
	}
	if err == nil {
		sess.New = true
	}
	return sess, err
}

// touch records that the Session was used now.
func (s *Store) touch(ctx context.Context, companyID int64, sess *Session, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE sessions SET last_seen_at = $4
		WHERE company_id = $1 AND client_id = $2 AND sid = $3 AND ended_at IS NULL`,
		companyID, sess.ClientID, sess.SID, now)
	return err
}

// Get returns one Session.
func (s *Store) Get(ctx context.Context, companyID int64, clientID, sid string) (*Session, error) {
	return scanSession(companyID, s.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE company_id = $1 AND client_id = $2 AND sid = $3`, companyID, clientID, sid))
}

// End ends a Session; it stays ended (spec 5.5). Ending an ended Session
// is fine.
func (s *Store) End(ctx context.Context, companyID int64, clientID, sid string, now time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sessions SET ended_at = coalesce(ended_at, $4)
		WHERE company_id = $1 AND client_id = $2 AND sid = $3`, companyID, clientID, sid, now)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// BindAccount records accountID as the Session's account if it has none,
// and reports whether the Session's account is accountID (spec 5.4: a
// Company may end a Session whose requests change account; we do).
func (s *Store) BindAccount(ctx context.Context, companyID int64, clientID, sid string, accountID int64) (bool, error) {
	var bound int64
	err := s.pool.QueryRow(ctx, `
		UPDATE sessions SET account_id = coalesce(account_id, $4)
		WHERE company_id = $1 AND client_id = $2 AND sid = $3
		RETURNING account_id`, companyID, clientID, sid, accountID).Scan(&bound)
	if err != nil {
		return false, db.NotFound(err, ErrNotFound)
	}
	return bound == accountID, nil
}

// insertJTI records a jti on its own and reports whether it was new.
func (s *Store) insertJTI(ctx context.Context, companyID int64, clientID, jti string, until time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, insertJTISQL, companyID, clientID, jti, until)
	return tag.RowsAffected() == 1, err
}
