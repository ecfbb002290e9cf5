package browserjoin

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
)

// Store keeps join codes and web sessions, every query for one Company.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// hash is how codes and cookies are stored.
func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Grant is what step 2 authorized: a Session and, signed in, an account
// and scopes.
type Grant struct {
	ClientID   string
	SID        string
	AccountID  int64
	Scopes     []string
	Extensions map[string]string
}

// newCode records a code of step 1 for domain, tied to browser.
func (s *Store) newCode(ctx context.Context, companyID int64, code, domain, browser string, now, expires time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO browser_join_codes (company_id, code, domain, browser, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, companyID, hash(code), domain, hash(browser), now, expires)
	return err
}

// authorize records g for code, once, while it is unexpired and was issued
// for domain. It reports whether it did.
func (s *Store) authorize(ctx context.Context, companyID int64, code, domain string, g *Grant, now time.Time) (bool, error) {
	var account *int64
	if g.AccountID != 0 {
		account = &g.AccountID
	}
	ext := g.Extensions
	if ext == nil {
		ext = map[string]string{}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE browser_join_codes SET authorized_at = $4, client_id = $5, sid = $6,
			account_id = $7, scopes = $8, extensions = $9
		WHERE company_id = $1 AND code = $2 AND domain = $3 AND authorized_at IS NULL AND submitted_at IS NULL
			AND expires_at > $4`,
		companyID, hash(code), domain, now, g.ClientID, g.SID, account, nonNil(g.Scopes), ext)
	return tag.RowsAffected() == 1, err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// errCode: the code cannot be used (step 3).
var errCode = errors.New("browserjoin: code not usable")

// submit uses up code (whatever happens next: spec 6 step 3) and returns
// its grant when it was authorized, unexpired, issued for domain and tied
// to browser.
func (s *Store) submit(ctx context.Context, companyID int64, code, domain, browser string, now time.Time) (*Grant, error) {
	var (
		g          Grant
		gotBrowser []byte
		gotDomain  string
		expires    time.Time
		authorized *time.Time
		clientID   *string
		sid        *string
		account    *int64
	)
	err := s.pool.QueryRow(ctx, `UPDATE browser_join_codes SET submitted_at = $3
		WHERE company_id = $1 AND code = $2 AND submitted_at IS NULL
		RETURNING browser, domain, expires_at, authorized_at, client_id, sid, account_id, coalesce(scopes, '{}'),
			coalesce(extensions, '{}')`,
		companyID, hash(code), now).Scan(&gotBrowser, &gotDomain, &expires, &authorized, &clientID, &sid, &account,
		&g.Scopes, &g.Extensions)
	if err != nil {
		return nil, db.NotFound(err, errCode)
	}
	if browser == "" || string(gotBrowser) != string(hash(browser)) || gotDomain != domain ||
		authorized == nil || !now.Before(expires) {
		return nil, errCode
	}
	g.ClientID, g.SID = *clientID, *sid
	if account != nil {
		g.AccountID = *account
	}
	return &g, nil
}

// WebSession is what a Session cookie stands for.
type WebSession struct {
	ClientID   string
	SID        string
	UserID     string
	AgentID    string
	AccountID  int64
	Scopes     []string
	Extensions map[string]string
	ExpiresAt  time.Time
	// lastSeen is when its Session was last used.
	lastSeen time.Time
}

// touchEvery is how stale a Session's last use may get before a browser
// request records it: the browser's requests belong to the Session (spec
// 6), so browsing keeps it from ending idle.
const touchEvery = time.Minute

// touch records that w's Session was used now, when its record is stale.
func (s *Store) touch(ctx context.Context, companyID int64, w *WebSession, now time.Time) error {
	if now.Sub(w.lastSeen) < touchEvery {
		return nil
	}
	_, err := s.pool.Exec(ctx, `UPDATE sessions SET last_seen_at = $4
		WHERE company_id = $1 AND client_id = $2 AND sid = $3 AND last_seen_at < $4`, companyID, w.ClientID, w.SID, now)
	return err
}

// start records a web session for g under token, ending the ones the
// browser carried before (previous), in one transaction. It returns
// errCode when the Session has ended since step 2.
func (s *Store) start(ctx context.Context, companyID int64, token string, previous []string, g *Grant, now, expires time.Time) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		for _, p := range previous {
			if _, err := tx.Exec(ctx, `UPDATE web_sessions SET ended_at = $3
				WHERE company_id = $1 AND token = $2 AND ended_at IS NULL`, companyID, hash(p), now); err != nil {
				return err
			}
		}
		var account *int64
		if g.AccountID != 0 {
			account = &g.AccountID
		}
		tag, err := tx.Exec(ctx, `INSERT INTO web_sessions (company_id, token, client_id, sid, account_id, scopes,
				extensions, created_at, expires_at)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM sessions
			WHERE company_id = $1 AND client_id = $3 AND sid = $4 AND ended_at IS NULL`,
			companyID, hash(token), g.ClientID, g.SID, account, nonNil(g.Scopes), g.Extensions, now, expires)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errCode
		}
		return nil
	})
}

// lookup returns the web session of token while it and its Session are
// active: not ended, not expired, the Session not ended and used within
// idle (0: no idle limit). Its account and scopes are kept only while the
// Personal Agent holds a valid refresh or access token for the account
// (spec 5.5: signing out revokes them, as does a disconnect; the issuer's
// SignedOut hook records it, this check covers tokens that expired);
// otherwise
// it acts for the Session signed out. It returns nil for no active web
// session.
func (s *Store) lookup(ctx context.Context, companyID int64, token string, idle time.Duration, now time.Time) (*WebSession, error) {
	var (
		w       WebSession
		account *int64
	)
	err := s.pool.QueryRow(ctx, `SELECT w.client_id, w.sid, s.user_id, s.agent_id, w.scopes, w.extensions, w.expires_at,
			s.last_seen_at,
			CASE WHEN EXISTS (SELECT 1 FROM oauth_tokens t WHERE t.company_id = w.company_id
				AND t.account_id = w.account_id AND t.client_id = w.client_id AND t.kind = 'refresh'
				AND t.active AND t.expires_at > $3) THEN w.account_id END
		FROM web_sessions w JOIN sessions s USING (company_id, client_id, sid)
		WHERE w.company_id = $1 AND w.token = $2 AND w.ended_at IS NULL AND w.expires_at > $3
			AND s.ended_at IS NULL AND ($4::bigint = 0 OR s.last_seen_at > $3 - make_interval(secs => $4))`,
		companyID, hash(token), now, int64(idle/time.Second)).Scan(&w.ClientID, &w.SID, &w.UserID, &w.AgentID,
		&w.Scopes, &w.Extensions, &w.ExpiresAt, &w.lastSeen, &account)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if account == nil {
		w.Scopes = []string{}
	} else {
		w.AccountID = *account
	}
	return &w, nil
}

// end ends the web session of token, and reports whether it was active.
func (s *Store) end(ctx context.Context, companyID int64, token string, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE web_sessions SET ended_at = $3
		WHERE company_id = $1 AND token = $2 AND ended_at IS NULL`, companyID, hash(token), now)
	return tag.RowsAffected() == 1, err
}

// sweep deletes codes and web sessions that expired before cutoff, and
// returns how many.
func (s *Store) sweep(ctx context.Context, cutoff time.Time) (int64, error) {
	codes, err := db.DeleteInBatches(ctx, s.pool, "browser_join_codes", "expires_at < $1", cutoff)
	if err != nil {
		return codes, err
	}
	sessions, err := db.DeleteInBatches(ctx, s.pool, "web_sessions", "expires_at < $1", cutoff)
	return codes + sessions, err
}

// SignedOut stops the web sessions that act for accountID in clientID's
// name, and started before endedAt (zero: any), from acting for it
// (issuer.SignedOut): they go on for their Session signed out, and a later
// sign-in does not bring the account back to them (spec 6: "an earlier
// login doesn't come back"), whether the sign-in was revoked or expired.
func (s *Store) SignedOut(ctx context.Context, tx db.Executor, companyID, accountID int64, clientID string, endedAt time.Time) error {
	var before *time.Time
	if !endedAt.IsZero() {
		before = &endedAt
	}
	_, err := tx.Exec(ctx, `UPDATE web_sessions SET account_id = NULL, scopes = '{}'
		WHERE company_id = $1 AND client_id = $2 AND account_id = $3
			AND ($4::timestamptz IS NULL OR created_at <= $4)`, companyID, clientID, accountID, before)
	return err
}
