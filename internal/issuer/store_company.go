package issuer

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the Company sees of the Personal Agents its Users connected to
// their accounts: the same grants the account page (spec 5.5) lists to
// each User, across every account of the Company.

// AccountConnection is a Personal Agent with valid refresh tokens for one
// of the Company's accounts.
type AccountConnection struct {
	AccountID int64
	Username  string
	Connection
}

// CompanyConnections lists up to limit Personal Agents connected to the
// Company's accounts at now, by account ID then client_id, after the pair
// (afterAccount, afterClient) (0, "": from the first).
func (s *Store) CompanyConnections(ctx context.Context, companyID int64, now time.Time, afterAccount int64,
	afterClient string, limit int) ([]AccountConnection, error) {
	// As Connections: a grant's first row says when it was signed in, its
	// active refresh tokens what it holds now. A grant with no scope is
	// listed too: it is still connected. The Company's refresh tokens are
	// read by the primary key's prefix (company_id, kind); the page's
	// bound applies after, and the statement does not imply the account
	// index's predicate (account_id IS NOT NULL: the join with accounts
	// says it), so that index, every Company's, is never a way to read
	// them (TestCompanyConnectionsPlans).
	rows, err := s.pool.Query(ctx, `
		WITH live AS (
			SELECT account_id, client_id, request_id, granted_scopes FROM oauth_tokens
			WHERE company_id = $1 AND kind = 'refresh' AND active AND expires_at > $2
		), since AS (
			SELECT request_id, min(requested_at) AS at FROM oauth_tokens
			WHERE company_id = $1 AND request_id IN (SELECT request_id FROM live)
			GROUP BY request_id
		)
		SELECT live.account_id, a.username, live.client_id, min(since.at),
			coalesce(array_agg(DISTINCT scope ORDER BY scope) FILTER (WHERE scope IS NOT NULL), '{}')
		FROM live JOIN since USING (request_id)
		JOIN accounts a ON a.company_id = $1 AND a.id = live.account_id
		LEFT JOIN LATERAL unnest(live.granted_scopes) AS scope ON true
		WHERE (live.account_id, live.client_id) > ($3, $4)
		GROUP BY live.account_id, a.username, live.client_id
		ORDER BY live.account_id, live.client_id LIMIT $5`, companyID, now, afterAccount, afterClient, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AccountConnection, error) {
		var c AccountConnection
		err := row.Scan(&c.AccountID, &c.Username, &c.ClientID, &c.Since, &c.Scopes)
		return c, err
	})
}

// SignIn is one sign-in of a Personal Agent to an account of the
// Company: a grant, from the authorization it was issued for to its
// refresh tokens, while the Company keeps its rows.
type SignIn struct {
	AccountID int64
	Username  string
	ClientID  string
	Scopes    []string
	At        time.Time
	// Connected: the grant still has a valid refresh token.
	Connected bool
}

// SignIns lists up to limit of the latest sign-ins to the Company's
// accounts, newest first, made before before (zero: up to now). A
// sign-in is dated as Connections dates it, by its grant's first row (its
// authorization code's), and listed once tokens were issued.
func (s *Store) SignIns(ctx context.Context, companyID int64, now, before time.Time, limit int) ([]SignIn, error) {
	if before.IsZero() {
		before = now.Add(time.Nanosecond)
	}
	rows, err := s.pool.Query(ctx, `
		WITH grants AS (
			SELECT request_id, min(requested_at) AS at,
				bool_or(kind = 'refresh' AND active AND expires_at > $2) AS connected
			FROM oauth_tokens
			WHERE company_id = $1 AND kind IN ('code', 'access', 'refresh') AND account_id IS NOT NULL
			GROUP BY request_id
			HAVING min(requested_at) < $3 AND bool_or(kind IN ('access', 'refresh'))
			ORDER BY at DESC, request_id LIMIT $4
		)
		SELECT f.account_id, a.username, f.client_id, g.at, g.connected, f.granted_scopes
		FROM grants g
		CROSS JOIN LATERAL (SELECT account_id, client_id, granted_scopes FROM oauth_tokens t
			WHERE t.request_id = g.request_id AND t.company_id = $1 AND t.kind IN ('access', 'refresh')
			ORDER BY t.requested_at LIMIT 1) f
		JOIN accounts a ON a.company_id = $1 AND a.id = f.account_id
		ORDER BY g.at DESC, g.request_id`, companyID, now, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (SignIn, error) {
		var si SignIn
		err := row.Scan(&si.AccountID, &si.Username, &si.ClientID, &si.At, &si.Connected, &si.Scopes)
		return si, err
	})
}
