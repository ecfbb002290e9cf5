package issuer

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Kinds of rows in oauth_tokens.
const (
	kindCode    = "code"
	kindPKCE    = "pkce"
	kindAccess  = "access"
	kindRefresh = "refresh"
)

// storedForm lists the request parameters kept with a grant: what later
// steps read (redirect_uri for the code exchange, the PKCE challenge, the
// resource). Assertions, codes, tokens and verifiers are never stored.
var storedForm = []string{"redirect_uri", "code_challenge", "code_challenge_method", "resource", "scope", "response_type"}

// errCodeUsed is returned when a concurrent exchange used the code first.
var errCodeUsed = errors.New("the authorization code was used concurrently")

// errRefreshUsed is returned when a concurrent refresh rotated the refresh
// token first. fosite turns any error of RotateRefreshToken but its own
// few into server_error, so the token endpoint maps it to invalid_grant.
var errRefreshUsed = errors.New("the refresh token was used concurrently")

// Store keeps the issuer's grants in PostgreSQL: fosite's storage
// interfaces, every query filtered by the Company in the context.
type Store struct {
	pool *pgxpool.Pool
	// clients resolves client_ids for fosite's GetClient.
	clients func(ctx context.Context, id string) (fosite.Client, error)
	// signedOut, when set, hears of each sign-out in its transaction.
	signedOut SignedOut

	mu sync.Mutex
	// revoked hear, once it committed, that access tokens of a Company
	// were revoked on this replica (OnAccessRevoked).
	revoked []func(companyID int64)
}

// AccessRevokedChannel is the notification every revoked or deleted
// access token that had not expired sends, with "{company_id} {hex of
// its stored signature hash}" (a trigger, migration 00023).
const AccessRevokedChannel = "poppy_access_token_revoked"

// OnAccessRevoked has f called after each transaction of this Store that
// revoked access tokens of a Company commits: this replica's caches of
// verified tokens drop them at once, before the notification that tells
// every replica's arrives.
func (s *Store) OnAccessRevoked(f func(companyID int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked = append(s.revoked, f)
}

// SignatureHash is how the Store keeps an access token's signature (the
// payload of AccessRevokedChannel, in hex).
func SignatureHash(token string) [32]byte { return sha256.Sum256([]byte(Signature(token))) }

// SignedOut is told, in the transaction that made it so, that a Personal
// Agent is signed out of an account: no refresh token the Company issued
// to it for the account is valid any more (spec 5.5). What acted for the
// account in its name since before endedAt, such as a joined browser,
// stops. endedAt is zero for a revocation, which ends it now, and the
// expiry of the last refresh token for a sign-in that ran out
// (EndExpiredSignIns).
type SignedOut func(ctx context.Context, tx db.Executor, companyID, accountID int64, clientID string, endedAt time.Time) error

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

type txKey struct{}

// txState is the transaction in a context, and what its commit must tell.
type txState struct {
	tx pgx.Tx
	// revoked are the Companies whose access tokens it revoked.
	revoked []int64
}

func txOf(ctx context.Context) (*txState, bool) {
	st, ok := ctx.Value(txKey{}).(*txState)
	return st, ok
}

// db is the transaction in the context (fosite's storage.Transactional
// puts it there, as inTx does) or else the pool.
func (s *Store) db(ctx context.Context) db.Executor {
	if st, ok := txOf(ctx); ok {
		return st.tx
	}
	return s.pool
}

// BeginTX implements fosite's storage.Transactional.
func (s *Store) BeginTX(ctx context.Context) (context.Context, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, txKey{}, &txState{tx: tx}), nil
}

// Commit implements fosite's storage.Transactional, then tells
// OnAccessRevoked of the revocations it committed.
func (s *Store) Commit(ctx context.Context) error {
	st, ok := txOf(ctx)
	if !ok {
		return errors.New("issuer: commit without a transaction")
	}
	if err := st.tx.Commit(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	hooks := s.revoked
	s.mu.Unlock()
	for _, id := range st.revoked {
		for _, f := range hooks {
			f(id)
		}
	}
	return nil
}

// Rollback implements fosite's storage.Transactional.
func (s *Store) Rollback(ctx context.Context) error {
	st, ok := txOf(ctx)
	if !ok {
		return errors.New("issuer: rollback without a transaction")
	}
	return st.tx.Rollback(ctx)
}

// revokedAccess notes that the transaction in ctx revokes access tokens of
// companyID, for Commit to tell; without a transaction it tells at once.
func (s *Store) revokedAccess(ctx context.Context, companyID int64) {
	if st, ok := txOf(ctx); ok {
		st.revoked = append(st.revoked, companyID)
		return
	}
	s.mu.Lock()
	hooks := s.revoked
	s.mu.Unlock()
	for _, f := range hooks {
		f(companyID)
	}
}

func companyID(ctx context.Context) int64 {
	c := tenant.FromContext(ctx)
	if c == nil {
		// Every route of the issuer runs behind tenant.BySlug.
		panic("issuer: no Company in the context")
	}
	return c.ID
}

func hashSig(sig string) []byte {
	h := sha256.Sum256([]byte(sig))
	return h[:]
}

// GetClient implements fosite.ClientManager.
func (s *Store) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	return s.clients(ctx, id)
}

// ClientAssertionJWTValid implements fosite.ClientManager. Client
// assertions are verified by internal/clientauth, which keeps its own jti
// store, so fosite's default strategy never calls this.
func (s *Store) ClientAssertionJWTValid(context.Context, string) error { return nil }

// SetClientAssertionJWT implements fosite.ClientManager; see
// ClientAssertionJWTValid.
func (s *Store) SetClientAssertionJWT(context.Context, string, time.Time) error { return nil }

// grantRow is what the rows of oauth_tokens written for one request
// share: the request and its session, as stored.
type grantRow struct {
	sess                *Session
	requestID, clientID string
	account             *int64
	requestedAt         time.Time
	scopes, granted     []string
	formJSON, sessJSON  []byte
}

// newGrantRow is the stored form of r.
func newGrantRow(r fosite.Requester) (*grantRow, error) {
	sess, ok := r.GetSession().(*Session)
	if !ok {
		return nil, fmt.Errorf("issuer: unexpected session type %T", r.GetSession())
	}
	form := url.Values{}
	for _, k := range storedForm {
		if v, ok := r.GetRequestForm()[k]; ok {
			form[k] = v
		}
	}
	g := &grantRow{sess: sess, requestID: r.GetID(), clientID: r.GetClient().GetID(),
		requestedAt: r.GetRequestedAt(), scopes: nonNil(r.GetRequestedScopes()), granted: nonNil(r.GetGrantedScopes())}
	var err error
	if g.formJSON, err = json.Marshal(form); err != nil {
		return nil, err
	}
	if g.sessJSON, err = json.Marshal(sess); err != nil {
		return nil, err
	}
	if sess.AccountID != 0 {
		g.account = &sess.AccountID
	}
	return g, nil
}

// token is the granted scopes and the expiry of the grant's row of kind:
// a refresh token keeps every scope of the sign-in (Session.RefreshScopes).
func (g *grantRow) token(kind string) (granted []string, exp time.Time, err error) {
	granted, exp = g.granted, g.sess.GetExpiresAt(fosite.AuthorizeCode)
	switch kind {
	case kindAccess:
		exp = g.sess.GetExpiresAt(fosite.AccessToken)
	case kindRefresh:
		exp = g.sess.GetExpiresAt(fosite.RefreshToken)
		if len(g.sess.RefreshScopes) > 0 {
			granted = g.sess.RefreshScopes
		}
	}
	if exp.IsZero() {
		return nil, exp, fmt.Errorf("issuer: %s without an expiry", kind)
	}
	return granted, exp, nil
}

func (s *Store) create(ctx context.Context, kind, sig string, r fosite.Requester) error {
	g, err := newGrantRow(r)
	if err != nil {
		return err
	}
	granted, exp, err := g.token(kind)
	if err != nil {
		return err
	}
	_, err = s.db(ctx).Exec(ctx, `
		INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, account_id,
			requested_at, scopes, granted_scopes, form, session, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		companyID(ctx), kind, hashSig(sig), g.requestID, g.clientID, g.account,
		g.requestedAt, g.scopes, granted, g.formJSON, g.sessJSON, exp)
	return err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// get loads a row; inactive rows return the request with inactiveErr.
func (s *Store) get(ctx context.Context, kind, sig string, session fosite.Session, inactiveErr error) (fosite.Requester, error) {
	var (
		req                fosite.Request
		clientID           string
		scopes, granted    []string
		formJSON, sessJSON []byte
		active             bool
	)
	scan := func(row pgx.Row) error {
		return row.Scan(&req.ID, &clientID, &req.RequestedAt, &scopes, &granted, &formJSON, &sessJSON, &active)
	}
	const query = `SELECT request_id, client_id, requested_at, scopes, granted_scopes, form, session, active
		FROM oauth_tokens WHERE company_id = $1 AND kind = $2 AND signature = $3`
	args := []any{companyID(ctx), kind, hashSig(sig)}
	var err error
	b := &pgx.Batch{}
	if _, inTx := txOf(ctx); !inTx && clientauth.DeferredFrom(ctx).Queue(b) {
		// A refresh's client assertion: its jti is recorded in this
		// round trip, and a replayed one fails it (issue 19).
		b.Queue(query, args...).QueryRow(scan)
		err = s.pool.SendBatch(ctx, b).Close()
	} else {
		err = scan(s.db(ctx).QueryRow(ctx, query, args...))
	}
	if err != nil {
		return nil, db.NotFound(err, fosite.ErrNotFound)
	}
	if session == nil {
		session = &Session{}
	}
	if err := json.Unmarshal(sessJSON, session); err != nil {
		return nil, err
	}
	req.Form = url.Values{}
	if err := json.Unmarshal(formJSON, &req.Form); err != nil {
		return nil, err
	}
	req.Client = &Client{ID: clientID}
	req.RequestedScope = scopes
	req.GrantedScope = granted
	req.RequestedAudience = fosite.Arguments{}
	req.GrantedAudience = fosite.Arguments{}
	req.Session = session
	req.RequestedAt = req.RequestedAt.UTC()
	if !active {
		return &req, inactiveErr
	}
	return &req, nil
}

func (s *Store) deactivate(ctx context.Context, kind, sig string) error {
	_, err := s.db(ctx).Exec(ctx, `UPDATE oauth_tokens SET active = false
		WHERE company_id = $1 AND kind = $2 AND signature = $3`, companyID(ctx), kind, hashSig(sig))
	return err
}

func (s *Store) delete(ctx context.Context, kind, sig string) error {
	_, err := s.db(ctx).Exec(ctx, `DELETE FROM oauth_tokens
		WHERE company_id = $1 AND kind = $2 AND signature = $3`, companyID(ctx), kind, hashSig(sig))
	return err
}

// CreateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *Store) CreateAuthorizeCodeSession(ctx context.Context, sig string, r fosite.Requester) error {
	return s.create(ctx, kindCode, sig, r)
}

// GetAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *Store) GetAuthorizeCodeSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindCode, sig, session, fosite.ErrInvalidatedAuthorizeCode)
}

// InvalidateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage:
// one conditional UPDATE, so of two concurrent exchanges one wins.
func (s *Store) InvalidateAuthorizeCodeSession(ctx context.Context, sig string) error {
	var requestID string
	err := s.db(ctx).QueryRow(ctx, `SELECT request_id FROM oauth_tokens
		WHERE company_id = $1 AND kind = $2 AND signature = $3`, companyID(ctx), kindCode, hashSig(sig)).Scan(&requestID)
	if err != nil {
		return db.NotFound(err, errCodeUsed)
	}
	if err := s.lockGrant(ctx, requestID); err != nil {
		return err
	}
	tag, err := s.db(ctx).Exec(ctx, `UPDATE oauth_tokens SET active = false
		WHERE company_id = $1 AND kind = $2 AND signature = $3 AND active`, companyID(ctx), kindCode, hashSig(sig))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errCodeUsed
	}
	return nil
}

// CreatePKCERequestSession implements pkce.PKCERequestStorage.
func (s *Store) CreatePKCERequestSession(ctx context.Context, sig string, r fosite.Requester) error {
	return s.create(ctx, kindPKCE, sig, r)
}

// GetPKCERequestSession implements pkce.PKCERequestStorage.
func (s *Store) GetPKCERequestSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindPKCE, sig, session, fosite.ErrNotFound)
}

// DeletePKCERequestSession implements pkce.PKCERequestStorage.
func (s *Store) DeletePKCERequestSession(ctx context.Context, sig string) error {
	return s.delete(ctx, kindPKCE, sig)
}

// CreateAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *Store) CreateAccessTokenSession(ctx context.Context, sig string, r fosite.Requester) error {
	return s.create(ctx, kindAccess, sig, r)
}

// GetAccessTokenSession implements oauth2.AccessTokenStorage. A revoked
// access token is not found.
func (s *Store) GetAccessTokenSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindAccess, sig, session, fosite.ErrNotFound)
}

// DeleteAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *Store) DeleteAccessTokenSession(ctx context.Context, sig string) error {
	if err := s.deactivate(ctx, kindAccess, sig); err != nil {
		return err
	}
	s.revokedAccess(ctx, companyID(ctx))
	return nil
}

// CreateRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *Store) CreateRefreshTokenSession(ctx context.Context, sig, _ string, r fosite.Requester) error {
	return s.create(ctx, kindRefresh, sig, r)
}

// GetRefreshTokenSession implements oauth2.RefreshTokenStorage: a rotated
// or revoked refresh token returns its request with ErrInactiveToken, so
// fosite treats its reuse as theft and revokes the grant.
func (s *Store) GetRefreshTokenSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindRefresh, sig, session, fosite.ErrInactiveToken)
}

// DeleteRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *Store) DeleteRefreshTokenSession(ctx context.Context, sig string) error {
	return s.deactivate(ctx, kindRefresh, sig)
}

// RotateRefreshToken implements oauth2.RefreshTokenStorage: the used
// refresh token becomes inactive, with one winner among concurrent
// refreshes. Access tokens issued earlier under the grant stay valid until
// they expire: an agent may hold a narrower or single-service token for
// one task next to its default token (spec 4.4, 4.5). fosite's refresh
// handler calls it in the transaction that then stores the new tokens;
// the issuer's (refreshGrant) rotates with rotateRefresh instead, which
// does all of it in one round trip.
func (s *Store) RotateRefreshToken(ctx context.Context, requestID, sig string) error {
	if err := s.lockGrant(ctx, requestID); err != nil {
		return err
	}
	tag, err := s.db(ctx).Exec(ctx, `UPDATE oauth_tokens SET active = false
		WHERE company_id = $1 AND kind = $2 AND signature = $3 AND active`, companyID(ctx), kindRefresh, hashSig(sig))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errRefreshUsed
	}
	return nil
}

// lockGrant serialises changes to one grant until the transaction in ctx
// ends, so a revocation never misses the refresh token that a concurrent
// refresh or code exchange is adding. Without a transaction it does
// nothing: callers that need it start one (inTx).
func (s *Store) lockGrant(ctx context.Context, requestID string) error {
	if _, ok := txOf(ctx); !ok {
		return nil
	}
	_, err := s.db(ctx).Exec(ctx, lockGrantSQL, companyID(ctx), requestID)
	return err
}

// lockGrantSQL takes the lock of grant $2 of Company $1 until the
// transaction ends.
const lockGrantSQL = `SELECT pg_advisory_xact_lock(hashtextextended('oauth grant ' || $1::bigint || ' ' || $2, 0))`

// rotateRefresh is a refresh's whole write: the used refresh token, with
// signature used, becomes inactive and r's new access and refresh tokens
// are stored, in one round trip and one transaction: a batch, which runs
// in one implicit transaction, of the grant's lock (lockGrant, so a
// revocation under way never misses the new refresh token) and one
// statement that inserts the new rows only when it deactivated the used
// one. Of concurrent refreshes with one token, one rotates; the others,
// and a refresh whose token a revocation deactivated first, get
// errRefreshUsed and store nothing.
func (s *Store) rotateRefresh(ctx context.Context, used, accessSig, refreshSig string, r fosite.Requester) error {
	g, err := newGrantRow(r)
	if err != nil {
		return err
	}
	accessScopes, accessExp, err := g.token(kindAccess)
	if err != nil {
		return err
	}
	refreshScopes, refreshExp, err := g.token(kindRefresh)
	if err != nil {
		return err
	}
	company := companyID(ctx)
	b := &pgx.Batch{}
	b.Queue(lockGrantSQL, company, g.requestID)
	b.Queue(`
		WITH rotated AS (
			UPDATE oauth_tokens SET active = false
			WHERE company_id = $1 AND kind = 'refresh' AND signature = $2 AND active
			RETURNING 1
		)
		INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, account_id,
			requested_at, scopes, granted_scopes, form, session, expires_at)
		SELECT $1, t.kind, t.signature, $3, $4, $5, $6, $7, t.granted_scopes, $8, $9, t.expires_at
		FROM (VALUES ('access', $10::bytea, $11::text[], $12::timestamptz),
			('refresh', $13::bytea, $14::text[], $15::timestamptz)) AS t (kind, signature, granted_scopes, expires_at)
		WHERE EXISTS (SELECT FROM rotated)`,
		company, hashSig(used), g.requestID, g.clientID, g.account, g.requestedAt, g.scopes, g.formJSON, g.sessJSON,
		hashSig(accessSig), accessScopes, accessExp, hashSig(refreshSig), refreshScopes, refreshExp)
	results := s.pool.SendBatch(ctx, b)
	_, err = results.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = results.Exec()
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errRefreshUsed
	}
	return nil
}

// inTx runs f in the transaction in ctx, or in a new one.
func (s *Store) inTx(ctx context.Context, f func(ctx context.Context) error) (err error) {
	if _, ok := txOf(ctx); ok {
		return f(ctx)
	}
	if ctx, err = s.BeginTX(ctx); err != nil {
		return err
	}
	if err = f(ctx); err != nil {
		_ = s.Rollback(ctx)
		return err
	}
	return s.Commit(ctx)
}

// RevokeRefreshToken implements oauth2.TokenRevocationStorage: every
// refresh token of the grant.
func (s *Store) RevokeRefreshToken(ctx context.Context, requestID string) error {
	return s.revoke(ctx, kindRefresh, requestID)
}

// RevokeAccessToken implements oauth2.TokenRevocationStorage: every access
// token of the grant (RFC 7009 §2.1).
func (s *Store) RevokeAccessToken(ctx context.Context, requestID string) error {
	return s.revoke(ctx, kindAccess, requestID)
}

func (s *Store) revoke(ctx context.Context, kind, requestID string) error {
	return s.inTx(ctx, func(ctx context.Context) error {
		if err := s.lockGrant(ctx, requestID); err != nil {
			return err
		}
		rows, err := s.db(ctx).Query(ctx, `UPDATE oauth_tokens SET active = false
			WHERE company_id = $1 AND kind = $2 AND request_id = $3 AND active
			RETURNING coalesce(account_id, 0), client_id`, companyID(ctx), kind, requestID)
		if err != nil {
			return err
		}
		if kind == kindAccess {
			s.revokedAccess(ctx, companyID(ctx))
		}
		var account int64
		var client string
		_, err = pgx.ForEachRow(rows, []any{&account, &client}, func() error { return nil })
		if err != nil || kind != kindRefresh || account == 0 {
			return err
		}
		return s.checkSignedOut(ctx, account, client)
	})
}

// checkSignedOut tells signedOut when the client holds no valid refresh
// token for the account any more. Revoking a refresh token that a new
// sign-in replaced is not a sign-out (spec 4.7, 5.5).
func (s *Store) checkSignedOut(ctx context.Context, accountID int64, clientID string) error {
	if s.signedOut == nil {
		return nil
	}
	var signedIn bool
	if err := s.db(ctx).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM oauth_tokens WHERE company_id = $1
		AND account_id = $2 AND client_id = $3 AND kind = 'refresh' AND active AND expires_at > now())`,
		companyID(ctx), accountID, clientID).Scan(&signedIn); err != nil || signedIn {
		return err
	}
	return s.signedOut(ctx, s.db(ctx), companyID(ctx), accountID, clientID, time.Time{})
}

// AccessTokenActive reports whether the access token with this signature
// was issued by the Company and is neither revoked nor expired.
func (s *Store) AccessTokenActive(ctx context.Context, companyID int64, sig string, now time.Time) (bool, error) {
	var active bool
	err := s.pool.QueryRow(ctx, `SELECT active AND expires_at > $4 FROM oauth_tokens
		WHERE company_id = $1 AND kind = $2 AND signature = $3`, companyID, kindAccess, hashSig(sig), now).Scan(&active)
	if db.IsNotFound(err) {
		return false, nil
	}
	return active, err
}

// Connection is a Personal Agent with valid refresh tokens for an account.
type Connection struct {
	ClientID string
	Scopes   []string
	Since    time.Time
}

// Connections lists the Personal Agents connected to an account.
func (s *Store) Connections(ctx context.Context, companyID, accountID int64, now time.Time) ([]Connection, error) {
	// A grant's first row, active or not, says when it was signed in;
	// its active refresh tokens say what it holds now.
	rows, err := s.pool.Query(ctx, `
		WITH live AS (
			SELECT client_id, request_id, granted_scopes FROM oauth_tokens
			WHERE company_id = $1 AND account_id = $2 AND kind = 'refresh' AND active AND expires_at > $3
		), since AS (
			SELECT request_id, min(requested_at) AS at FROM oauth_tokens
			WHERE company_id = $1 AND request_id IN (SELECT request_id FROM live)
			GROUP BY request_id
		)
		SELECT live.client_id, min(since.at), array_agg(DISTINCT scope ORDER BY scope)
		FROM live JOIN since USING (request_id), unnest(live.granted_scopes) AS scope
		GROUP BY live.client_id ORDER BY live.client_id`, companyID, accountID, now)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Connection, error) {
		var c Connection
		err := row.Scan(&c.ClientID, &c.Since, &c.Scopes)
		return c, err
	})
}

// Disconnect revokes every refresh token of clientID for an account, and
// the access tokens issued under them (spec 5.5).
func (s *Store) Disconnect(ctx context.Context, companyID, accountID int64, clientID string) error {
	ctx = tenant.WithCompany(ctx, &tenant.Company{ID: companyID})
	return s.inTx(ctx, func(ctx context.Context) error {
		// Approved device requests first: a redemption under way holds
		// its row until it commits, so this waits for it, and the
		// statements after see the tokens it issued; one not yet begun
		// finds its request denied.
		if _, err := s.db(ctx).Exec(ctx, `UPDATE device_grants SET status = 'denied'
			WHERE company_id = $1 AND account_id = $2 AND client_id = $3 AND status = 'approved'`,
			companyID, accountID, clientID); err != nil {
			return err
		}
		rows, err := s.db(ctx).Query(ctx, `SELECT DISTINCT request_id FROM oauth_tokens
			WHERE company_id = $1 AND account_id = $2 AND client_id = $3 AND active ORDER BY 1`,
			companyID, accountID, clientID)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := s.lockGrant(ctx, id); err != nil {
				return err
			}
		}
		// Codes not yet exchanged go too, so no sign-in under way
		// reconnects the agent.
		if _, err := s.db(ctx).Exec(ctx, `UPDATE oauth_tokens SET active = false
			WHERE company_id = $1 AND account_id = $2 AND client_id = $3 AND active`,
			companyID, accountID, clientID); err != nil {
			return err
		}
		s.revokedAccess(ctx, companyID)
		if err := s.checkSignedOut(ctx, accountID, clientID); err != nil {
			return err
		}
		// Audited with the change when the Company's staff made it (the
		// console); a User's own disconnect is not administration.
		audit.Note(ctx, "account_id", "client_id")
		return audit.Record(ctx, s.db(ctx))
	})
}

// DeleteExpired removes rows that expired before cutoff, and returns how
// many.
func (s *Store) DeleteExpired(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	for _, table := range []string{"oauth_tokens", "device_grants", "issuer_logins"} {
		deleted, err := db.DeleteInBatches(ctx, s.pool, table, "expires_at < $1", cutoff)
		n += deleted
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// SecretSignedUntil is until when what the Company's current secret
// signed, or may sign next, can be valid (signing.SignedUntil): the last
// expiry of its stored codes, refresh tokens and device grants, and a
// refresh token's lifetime from now for those signed by replicas that
// have not yet seen a rotation.
func (s *Server) SecretSignedUntil(ctx context.Context, c *tenant.Company) (time.Time, error) {
	until := s.now().Add(max(RefreshTokenLifetime(c), codeLifetime))
	var stored *time.Time
	err := s.store.pool.QueryRow(ctx, `SELECT max(e) FROM (
		SELECT max(expires_at) FROM oauth_tokens WHERE company_id = $1 AND kind <> 'access' AND active
		UNION ALL
		SELECT max(expires_at) FROM device_grants WHERE company_id = $1 AND status IN ('pending', 'approved')) AS t(e)`,
		c.ID).Scan(&stored)
	if err != nil {
		return time.Time{}, fmt.Errorf("issuer: when the secret's codes expire: %w", err)
	}
	if stored != nil && stored.After(until) {
		until = *stored
	}
	return until, nil
}
