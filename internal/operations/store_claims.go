package operations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Operation states in the operations table. An operation moves
// proposed → performing (a claim) → performed, or back to proposed when
// its origin performed nothing; a claim whose outcome the settle job could
// not learn becomes unknown until the Company resolves it.
const (
	stateProposed   = "proposed"
	statePerforming = "performing"
	stateUnknown    = "unknown"
	statePerformed  = "performed"
)

// Verdict is what the checks of extension 6 say of an approval.
type Verdict int

// The verdicts, in the extension's order of responses.
const (
	// CannotApprove: check 1 failed; the request is handled as one
	// without an approval.
	CannotApprove Verdict = iota
	// NeedsAccount: a signed-out Session of the owner's Personal Agent
	// and User approves an account's operation: a challenge.
	NeedsAccount
	// Performed: check 2; the stored answer is returned.
	Performed
	// Performing: check 2; 503 with Retry-After until it settles, or
	// while its outcome is unknown.
	Performing
	// Stale: check 3 failed; a new revision for what the request asks.
	Stale
	// Approved: every check passed; the request may claim the operation.
	Approved
)

// Checked is the result of Check.
type Checked struct {
	Verdict  Verdict
	Response *Response
	// Operation is the approved revision, Request what performs it and
	// ActionKey the origin's name for the action, with Approved.
	Operation *Operation
	Request   *Request
	ActionKey string
}

// Check makes the checks of extension 6 for approval a on req, sent by
// owner (AccountID 0 signed out) at iface and target. In a conversation
// req may be nil: the operation's own request is performed.
func (s *Store) Check(ctx context.Context, companyID int64, owner Owner, iface, target string, a *Approval,
	req *Request, now time.Time) (*Checked, error) {
	var (
		client, user, gotIface, gotTarget, status, current, actionKey string
		account                                                       int64
		response                                                      *Response
	)
	err := s.pool.QueryRow(ctx, `SELECT client_id, user_id, account_id, interface, target, status, revision, response,
			action_key
		FROM operations WHERE company_id = $1 AND id = $2`, companyID, a.OperationID).Scan(
		&client, &user, &account, &gotIface, &gotTarget, &status, &current, &response, &actionKey)
	if db.IsNotFound(err) {
		// Not ours, or forgotten: check 3 for what the request asks.
		return &Checked{Verdict: Stale}, nil
	}
	if err != nil {
		return nil, err
	}
	// Check 1: the same Personal Agent and User, the same account or
	// signed out as proposed, and the interface it was proposed at.
	if client != owner.ClientID || user != owner.UserID || gotIface != iface {
		return &Checked{Verdict: CannotApprove}, nil
	}
	if account != owner.AccountID {
		if owner.AccountID == 0 {
			return &Checked{Verdict: NeedsAccount}, nil
		}
		return &Checked{Verdict: CannotApprove}, nil
	}
	// Check 2: performed, or being performed or unknown (extension 7:
	// never answered as if it failed).
	switch status {
	case statePerformed:
		return &Checked{Verdict: Performed, Response: response}, nil
	case statePerforming, stateUnknown:
		return &Checked{Verdict: Performing}, nil
	}
	// Check 3: the revision is this operation's current one, unexpired,
	// not declined, for the same target and request.
	var (
		stored             Request
		expires            time.Time
		declined, replaced *time.Time
		terms              json.RawMessage
		summary            string
	)
	err = s.pool.QueryRow(ctx, `SELECT request, expires_at, declined_at, replaced_at, terms, summary
		FROM operation_revisions
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, a.OperationID, a.Revision).Scan(
		&stored, &expires, &declined, &replaced, &terms, &summary)
	if db.IsNotFound(err) {
		return &Checked{Verdict: Stale}, nil
	}
	if err != nil {
		return nil, err
	}
	// In a conversation the request is the one its proposal named: the
	// operation being the conversation's (target) is check 3.
	if a.Revision != current || replaced != nil || declined != nil || !now.Before(expires) || gotTarget != target ||
		iface != InterfaceConversation && !stored.Same(req) {
		return &Checked{Verdict: Stale}, nil
	}
	return &Checked{Verdict: Approved, Request: &stored, ActionKey: actionKey, Operation: &Operation{
		OperationID: a.OperationID, Revision: a.Revision, Summary: summary, Terms: terms, ExpiresAt: expires.UTC()}}, nil
}

// Claim is one claim of an operation: the approval it performs, and the
// send lease of its first send.
type Claim struct {
	ID         string
	LeaseUntil time.Time
}

// Claim makes the request carrying approval a the operation's one
// performer, and reports nil when another request claimed it first or the
// revision can no longer be approved. The operation's row is locked first,
// so a claim and a decline (DeclineUnclaimed) of the same revision never
// both succeed. The claim holds the send lease for lease from now: no
// other send of the operation starts before it lapses; should this
// request not conclude the operation, the settle sweep gives the claim
// its settle job once the lease lapsed (Engine.SettleDue).
func (s *Store) Claim(ctx context.Context, companyID int64, a *Approval, facts *verified.Facts, lease time.Duration,
	now time.Time) (*Claim, error) {
	var c *Claim
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var ok bool
		// Each statement reads what committed before it began: the lock is
		// taken first, so the revision's state below is the latest.
		err := tx.QueryRow(ctx, `SELECT status = 'proposed' AND revision = $3 FROM operations
			WHERE company_id = $1 AND id = $2 FOR UPDATE`, companyID, a.OperationID, a.Revision).Scan(&ok)
		if db.IsNotFound(err) || err == nil && !ok {
			return nil
		}
		if err != nil {
			return err
		}
		c = &Claim{ID: newID("clm_"), LeaseUntil: now.Add(lease)}
		tag, err := tx.Exec(ctx, `UPDATE operations SET status = 'performing', approval = $4, facts = $5,
				performing_since = $6, updated_at = $6, claim = $7, lease_until = $8, sends = 1
			WHERE company_id = $1 AND id = $2 AND EXISTS (SELECT 1 FROM operation_revisions r
				WHERE r.company_id = $1 AND r.operation_id = $2 AND r.revision = $3 AND r.declined_at IS NULL
					AND r.replaced_at IS NULL AND r.expires_at > $6)`,
			companyID, a.OperationID, a.Revision, a, facts, now, c.ID, c.LeaseUntil)
		if err != nil || tag.RowsAffected() != 1 {
			c = nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Next is what ClaimChecked does with a claim whose revision's request is
// not the request's byte for byte, before it commits: route the
// revision's request. An error undoes the claim.
type Next func(ctx context.Context, c *Checked) error

// errNotSame: the stored request of a revision ClaimChecked claimed is
// not the one approved here, so the claim is undone.
var errNotSame = errors.New("operations: another request than the revision's")

// ClaimChecked is Check and Claim in one statement, for an approval that
// nothing has to be asked about between them (no approval hook, not a
// conversation's): it claims operation a.OperationID for the request
// carrying a when every check of extension 6 passes at once (owner, status,
// current revision unexpired, neither declined nor replaced, target, and
// check 3: req asks for the revision's request). It returns nil, nil, nil
// when it did not claim: the caller makes the checks one by one (Check)
// to learn why.
//
// When req is the revision's request byte for byte, as a Personal
// Agent's retry of what it was proposed usually is, check 3 is one more
// condition of the statement, which commits on its own (claimExact).
// Otherwise the same statement claims in a transaction that stays open
// for what only Go can tell (Request.Same: another order of the query or
// of a JSON body's members) and for next, and commits only if both agree
// (claimInTx).
//
// A statement sees what committed before it began, and the revision's
// state is another row than the one it locks: a revision retired between
// the two (a claim released with a decline, say) would go unnoticed. So
// the claim is made only on the very version of the operation's row that
// the checks read (its xmin): every change that retires a revision also
// writes that row (Release, Resolve, Propose, DeclineUnclaimed), and a
// row written since makes this claim find nothing.
func (s *Store) ClaimChecked(ctx context.Context, companyID int64, owner Owner, iface, target string, a *Approval,
	req *Request, facts *verified.Facts, lease time.Duration, now time.Time, next Next) (*Checked, *Claim, error) {
	c := &Claim{ID: newID("clm_"), LeaseUntil: now.Add(lease)}
	exact, ok := exactJSON(req)
	if iface == InterfaceConversation || !ok {
		return s.claimInTx(ctx, companyID, owner, iface, target, a, req, facts, c, now, next)
	}
	checked, proposed, err := s.claimExact(ctx, companyID, owner, iface, target, a, exact, facts, c, now)
	switch {
	case err != nil:
		return nil, nil, err
	case checked != nil:
		return checked, c, nil
	case !proposed:
		// Not approvable at once (another owner, revision, status...):
		// the caller's checks say why.
		return nil, nil, nil
	}
	// Approvable but not claimed: another spelling of the request, or the
	// row changed since it was read. The transaction decides.
	return s.claimInTx(ctx, companyID, owner, iface, target, a, req, facts, c, now, next)
}

// claimExact claims as ClaimChecked does when req is the revision's
// request byte for byte (their JSON equal), in one statement that commits
// on its own. It reports the claim's checks, or nil and whether every
// check but the request's passed on a proposed operation.
//
// The claim commits as the statement ends: a context cancelled while it
// runs may leave it made though an error is returned, as a lost reply to
// a COMMIT would. The claim's send lease lapses and its settle job
// concludes it (Engine.SettleDue), as for any claim whose request ended
// before its send.
func (s *Store) claimExact(ctx context.Context, companyID int64, owner Owner, iface, target string, a *Approval,
	exact json.RawMessage, facts *verified.Facts, c *Claim, now time.Time) (*Checked, bool, error) {
	var row claimRow
	err := row.scan(s.pool.QueryRow(ctx, claimSQL, claimArgs(companyID, owner, iface, target, a, facts, c, now, exact)...))
	if db.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil || !row.claimed {
		return nil, err == nil && row.status == stateProposed, err
	}
	return row.checked(a), true, nil
}

// exactJSON is req's JSON, as the revision's request was stored, when
// equal JSON means the same bytes: not when encoding/json wrote U+FFFD
// for text that is not UTF-8 (so that two requests differing there would
// have one JSON), nor for no request.
func exactJSON(req *Request) (json.RawMessage, bool) {
	if req == nil {
		return nil, false
	}
	b, err := json.Marshal(req)
	if err != nil || bytes.Contains(b, []byte(`\ufffd`)) {
		return nil, false
	}
	return b, true
}

// claimArgs are claimSQL's arguments; exact nil leaves check 3 to Go.
func claimArgs(companyID int64, owner Owner, iface, target string, a *Approval, facts *verified.Facts, c *Claim,
	now time.Time, exact json.RawMessage) []any {
	return []any{companyID, a.OperationID, a.Revision, owner.ClientID, owner.UserID, owner.AccountID, iface, target,
		now, a, facts, c.ID, c.LeaseUntil, exact}
}

// claimRow is what claimSQL answers.
type claimRow struct {
	claimed   bool
	status    string
	actionKey string
	stored    Request
	op        Operation
}

func (r *claimRow) scan(row pgx.Row) error {
	return row.Scan(&r.claimed, &r.status, &r.actionKey, &r.stored, &r.op.Terms, &r.op.Summary, &r.op.ExpiresAt)
}

// checked is the claimed row's Checked for approval a.
func (r *claimRow) checked(a *Approval) *Checked {
	op := r.op
	op.OperationID, op.Revision, op.ExpiresAt = a.OperationID, a.Revision, op.ExpiresAt.UTC()
	return &Checked{Verdict: Approved, Request: &r.stored, ActionKey: r.actionKey, Operation: &op}
}

// claimInTx claims as ClaimChecked does in a transaction, which commits
// when req is the revision's request as Request.Same compares them and
// next agrees.
func (s *Store) claimInTx(ctx context.Context, companyID int64, owner Owner, iface, target string, a *Approval,
	req *Request, facts *verified.Facts, c *Claim, now time.Time, next Next) (*Checked, *Claim, error) {
	var (
		row     claimRow
		checked *Checked
	)
	// BEGIN and the claim go in one round trip; the transaction stays
	// open for what only Go can check (check 3's comparison, next).
	err := db.InTxWith(ctx, s.pool, func(b *pgx.Batch) {
		b.Queue(claimSQL, claimArgs(companyID, owner, iface, target, a, facts, c, now, nil)...).QueryRow(row.scan)
	}, func(pgx.Tx) error {
		if !row.claimed || iface != InterfaceConversation && !row.stored.Same(req) {
			return errNotSame
		}
		ch := row.checked(a)
		if err := next(ctx, ch); err != nil {
			return err
		}
		checked = ch
		return nil
	})
	if errors.Is(err, errNotSame) || db.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return checked, c, nil
}

// claimSQL makes every check of ClaimChecked and the claim, check 3 too
// when $14 is the request's JSON (claimExact; NULL leaves it to Go,
// claimInTx), and answers even when it did not claim: whether it claimed,
// and the operation's status, so that an approvable operation whose
// request is spelled otherwise is claimed the long way and any other is
// left to the checks one by one.
//
// The status is checked on the version seen (seen.status), not in either
// scan's conditions: a condition status = 'proposed' on operations lets
// the planner read the row through operations_action, whose prefix
// company_id matches every proposed operation of the Company and every
// entry left by one proposed before (issue 19). MATERIALIZED keeps that
// check out of the CTE's scan; the xmin makes the claim of the version
// seen.
const claimSQL = `WITH seen AS MATERIALIZED (
		SELECT o.xmin AS version, o.status, o.action_key, r.request, r.terms, r.summary, r.expires_at
		FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id
			AND r.revision = o.revision
		WHERE o.company_id = $1 AND o.id = $2 AND o.revision = $3
			AND o.client_id = $4 AND o.user_id = $5 AND o.account_id = $6 AND o.interface = $7
			AND o.target = $8 AND r.declined_at IS NULL AND r.replaced_at IS NULL AND r.expires_at > $9),
	claimed AS (
		UPDATE operations o SET status = 'performing', approval = $10, facts = $11, performing_since = $9,
			updated_at = $9, claim = $12, lease_until = $13, sends = 1
		FROM seen
		WHERE o.company_id = $1 AND o.id = $2 AND o.revision = $3 AND seen.status = 'proposed'
			AND o.xmin = seen.version AND ($14::jsonb IS NULL OR seen.request = $14)
		RETURNING 1)
	SELECT EXISTS (SELECT FROM claimed), seen.status, seen.action_key, seen.request, seen.terms, seen.summary,
		seen.expires_at
	FROM seen`

// Lease takes the send lease of claim for lease from now, when no send of
// it may still be in flight, and reports whether it did. Otherwise it
// returns when the current lease lapses, the zero time when the claim is
// no longer performing (concluded, released or unknown).
func (s *Store) Lease(ctx context.Context, companyID int64, id, claim string, lease time.Duration,
	now time.Time) (bool, time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, `UPDATE operations SET lease_until = $4, sends = sends + 1, updated_at = $5
		WHERE company_id = $1 AND id = $2 AND claim = $3 AND status = 'performing' AND lease_until <= $5
		RETURNING lease_until`, companyID, id, claim, now.Add(lease), now).Scan(&until)
	if err == nil {
		return true, until, nil
	}
	if !db.IsNotFound(err) {
		return false, time.Time{}, err
	}
	err = s.pool.QueryRow(ctx, `SELECT lease_until FROM operations
		WHERE company_id = $1 AND id = $2 AND claim = $3 AND status = 'performing'`, companyID, id, claim).Scan(&until)
	if db.IsNotFound(err) {
		return false, time.Time{}, nil
	}
	return false, until, err
}

// Unsettled is an operation being performed, as its settle job needs it.
type Unsettled struct {
	Claim      string
	LeaseUntil time.Time
	// Since is when it was claimed.
	Since     time.Time
	Interface string
	Target    string
	ActionKey string
	Approval  *Approval
	Facts     *verified.Facts
	Request   *Request
	Terms     json.RawMessage
}

// Performing returns what the settle job of claim needs while the
// operation is being performed under it, or nil once that claim ended.
func (s *Store) Performing(ctx context.Context, companyID int64, id, claim string) (*Unsettled, error) {
	u := &Unsettled{Request: &Request{}}
	err := s.pool.QueryRow(ctx, `SELECT o.claim, o.lease_until, o.performing_since, o.interface, o.target,
			o.action_key, o.approval, o.facts, r.request, r.terms
		FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id
			AND r.revision = o.approval->>'revision'
		WHERE o.company_id = $1 AND o.id = $2 AND o.status = 'performing' AND o.claim = $3`, companyID, id, claim).Scan(
		&u.Claim, &u.LeaseUntil, &u.Since, &u.Interface, &u.Target, &u.ActionKey, &u.Approval, &u.Facts, u.Request,
		&u.Terms)
	if db.IsNotFound(err) {
		return nil, nil
	}
	return u, err
}

// Performed stores the origin's final answer to claim; every later retry
// gets it. It reports false when the claim was no longer performing
// (resolved by the Company meanwhile): nothing is changed.
func (s *Store) Performed(ctx context.Context, companyID int64, id, claim string, resp *Response, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE operations SET status = 'performed', response = $4, performed_at = $5,
			updated_at = $5, expires_at = greatest(expires_at, $5), lease_until = NULL
		WHERE company_id = $1 AND id = $2 AND claim = $3 AND status = 'performing'`, companyID, id, claim, resp, now)
	return err == nil && tag.RowsAffected() == 1, err
}

// Release is why a claim ends without the operation performed.
type Release int

// The ways a claim is released.
const (
	// ReleaseRetry: the origin performed nothing and asks for the same
	// request again later; the revision stays approvable.
	ReleaseRetry Release = iota
	// ReleaseNewTerms: the origin proposed new terms; the revision is
	// replaced.
	ReleaseNewTerms
	// ReleaseDeclined: the origin declined; the revision is declined for
	// good and the decline kept.
	ReleaseDeclined
)

// Release returns the operation of claim to proposed, its origin having
// performed nothing, and reports whether this call did (false: the claim
// had already ended). d is the decline, with ReleaseDeclined.
func (s *Store) Release(ctx context.Context, companyID int64, id, claim string, why Release, d *Decline,
	now time.Time) (bool, error) {
	var done bool
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var revision string
		err := tx.QueryRow(ctx, `UPDATE operations SET status = 'proposed', approval = NULL, facts = NULL,
				performing_since = NULL, updated_at = $4, claim = NULL, lease_until = NULL
			WHERE company_id = $1 AND id = $2 AND claim = $3 AND status = 'performing'
			RETURNING revision`, companyID, id, claim, now).Scan(&revision)
		if err != nil {
			return err
		}
		done = true
		switch why {
		case ReleaseNewTerms:
			_, err = tx.Exec(ctx, `UPDATE operation_revisions SET replaced_at = coalesce(replaced_at, $4)
				WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, revision, now)
		case ReleaseDeclined:
			_, err = tx.Exec(ctx, `UPDATE operation_revisions SET declined_at = $4, decline = $5
				WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, revision, now, d)
		}
		return err
	})
	if db.IsNotFound(err) {
		return false, nil
	}
	return done && err == nil, err
}

// DeclineUnclaimed retires revision of operation id for good when the
// approval hook declined an approval of it, and reports whether it did: a
// revision someone has claimed meanwhile (being performed, performed or
// unknown) is not declined, and the decline loses (extension 7). The
// operation's row is locked as Claim locks it.
func (s *Store) DeclineUnclaimed(ctx context.Context, companyID int64, id, revision string, d *Decline,
	now time.Time) (bool, error) {
	var declined bool
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		// The row is written, not only locked, so a claim that checked the
		// revision before this commits finds it changed (ClaimChecked).
		tag, err := tx.Exec(ctx, `UPDATE operations SET updated_at = $3
			WHERE company_id = $1 AND id = $2 AND status = 'proposed'`, companyID, id, now)
		if err != nil || tag.RowsAffected() != 1 {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE operation_revisions SET declined_at = coalesce(declined_at, $4),
				decline = coalesce(decline, $5)
			WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, revision, now, d); err != nil {
			return err
		}
		declined = true
		return nil
	})
	return declined && err == nil, err
}

// GiveUp marks the operation of claim unknown: its settle path could not
// learn whether the origin performed it. It stays so, answered as being
// performed (extension 7), until the Company resolves it. It reports
// whether this call did.
func (s *Store) GiveUp(ctx context.Context, companyID int64, id, claim string, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE operations SET status = 'unknown', updated_at = $4
		WHERE company_id = $1 AND id = $2 AND claim = $3 AND status = 'performing'`, companyID, id, claim, now)
	return err == nil && tag.RowsAffected() == 1, err
}

// Stalled lists claims still performing whose send lease lapsed before
// before: their settle job should have concluded them, so the sweep makes
// sure each has one.
func (s *Store) Stalled(ctx context.Context, before time.Time, limit int) ([]StalledClaim, error) {
	rows, err := s.pool.Query(ctx, `SELECT company_id, id, claim FROM operations
		WHERE status = 'performing' AND lease_until < $1 ORDER BY lease_until LIMIT $2`, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[StalledClaim])
}

// markDue marks up to limit claims still performing whose send lease
// lapsed in the stalledAfter before now, and that are not marked yet, as
// having a settle job (settle_claim), and returns them: SettleDue inserts
// their jobs in tx. Rows another transaction holds are left for the next
// run. The window keeps each run's scan to the claims that lapsed lately;
// older ones are Rescue's.
func (s *Store) markDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]StalledClaim, error) {
	rows, err := tx.Query(ctx, `UPDATE operations o SET settle_claim = o.claim
		FROM (SELECT company_id, id FROM operations
			WHERE status = 'performing' AND lease_until < $1 AND lease_until >= $2
				AND settle_claim IS DISTINCT FROM claim
			ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED) d
		WHERE o.company_id = d.company_id AND o.id = d.id
		RETURNING o.company_id, o.id, o.claim`, now, now.Add(-stalledAfter), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[StalledClaim])
}

// StalledClaim names one claim for its settle job.
type StalledClaim struct {
	CompanyID   int64
	OperationID string
	Claim       string
}

// claimOf returns the claim performing operation id, or "" when none is.
func (s *Store) claimOf(ctx context.Context, companyID int64, id string) (string, error) {
	var claim string
	err := s.pool.QueryRow(ctx, `SELECT claim FROM operations WHERE company_id = $1 AND id = $2
		AND status = 'performing'`, companyID, id).Scan(&claim)
	if db.IsNotFound(err) {
		return "", nil
	}
	return claim, err
}
