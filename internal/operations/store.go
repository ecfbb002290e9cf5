package operations

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"mime"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// Interfaces an operation can be proposed at.
const (
	InterfaceAPI          = "api"
	InterfaceMCP          = "mcp"
	InterfaceConversation = "conversation"
	InterfaceWeb          = "web"
)

// Owner is who can approve an operation (extension 3): the Personal Agent
// and User that it was proposed to, and the account when it was proposed
// signed in (0 signed out).
type Owner struct {
	ClientID  string
	UserID    string
	AccountID int64
}

// Request is the origin request a revision performs, and that an
// approved retry must ask for again (extension 6, check 3).
type Request struct {
	// API is the registered API a conversation's request goes to; at the
	// other interfaces the operation's target says where it goes.
	API         string `json:"api,omitempty"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Body        []byte `json:"body,omitempty"`
	// Host and Accept are a website request's: the Company domain it was
	// made on and what the browser accepts, which the website's origin
	// gets again when it is performed. They do not change what it asks.
	Host   string `json:"host,omitempty"`
	Accept string `json:"accept,omitempty"`
}

// Same reports whether r asks for what o asks for: the same method and
// target URI, and content of the same meaning (JSON compared as values, so
// member order and spacing do not count).
func (r *Request) Same(o *Request) bool {
	if r.API != o.API || r.Method != o.Method || r.Path != o.Path || !sameForm(r.Query, o.Query) {
		return false
	}
	if bytes.Equal(r.Body, o.Body) {
		return true
	}
	if isForm(r.ContentType) && isForm(o.ContentType) {
		return sameForm(string(r.Body), string(o.Body))
	}
	var a, b any
	if json.Unmarshal(r.Body, &a) != nil || json.Unmarshal(o.Body, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// isForm reports whether a Content-Type is an HTML form's.
func isForm(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// sameForm compares two application/x-www-form-urlencoded strings (a
// query or a form body) by meaning: the same names and values in the same
// order, however they are percent-encoded ("a+b", "a%20b").
func sameForm(a, b string) bool {
	if a == b {
		return true
	}
	pa, okA := formPairs(a)
	pb, okB := formPairs(b)
	return okA && okB && slices.Equal(pa, pb)
}

func formPairs(s string) ([][2]string, bool) {
	var out [][2]string
	for part := range strings.SplitSeq(s, "&") {
		if part == "" {
			continue
		}
		name, value, _ := strings.Cut(part, "=")
		n, err1 := url.QueryUnescape(name)
		v, err2 := url.QueryUnescape(value)
		if err1 != nil || err2 != nil {
			return nil, false
		}
		out = append(out, [2]string{n, v})
	}
	return out, true
}

// Response is the origin's answer to a performed operation, returned to
// every later retry (extension 7).
type Response struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	// Location and ETag are kept with the body: they say what was made.
	Location string `json:"location,omitempty"`
	ETag     string `json:"etag,omitempty"`
	Body     []byte `json:"body,omitempty"`
}

// Store keeps operations in PostgreSQL, every query for one Company.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// newID is an operation ID or a revision: 26 characters of the 8.2
// alphabet, 130 random bits.
func newID(prefix string) string { return prefix + rand.Text() }

// Propose records an origin's proposal p, answering req of owner at iface
// and target, and returns the operation to send. A proposal for an action
// that is already proposed keeps its operation_id; its revision changes
// only when the terms differ or the revision expired, or when it would be
// avoid, the revision an approval named (extension 6: never answer an
// approval with the revision it names). While the action's operation is
// being performed it returns a *PerformingError.
func (s *Store) Propose(ctx context.Context, companyID int64, owner Owner, iface, target string, p *Proposal,
	req *Request, avoid string, now time.Time) (*Operation, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	op, err := ProposeTx(ctx, tx, companyID, owner, iface, target, p, req, avoid, now)
	if err != nil {
		return nil, err
	}
	return op, tx.Commit(ctx)
}

// ProposeTx is Propose in tx, for a caller that records the operation
// with a change of its own (a conversation's message).
func ProposeTx(ctx context.Context, tx pgx.Tx, companyID int64, owner Owner, iface, target string, p *Proposal,
	req *Request, avoid string, now time.Time) (*Operation, error) {
	// One proposal per action at a time: the advisory lock keeps two
	// first proposals from making two operations.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		lockKey(companyID, owner, iface, target, p.ActionKey)); err != nil {
		return nil, err
	}
	var (
		id, rev    string
		terms      json.RawMessage
		stored     Request
		revExpires time.Time
		retired    bool
	)
	// The row is locked against a concurrent Claim: a revision is never
	// replaced while it is being performed.
	err := tx.QueryRow(ctx, `SELECT o.id, o.revision, r.terms, r.request, r.expires_at,
			r.declined_at IS NOT NULL OR r.replaced_at IS NOT NULL FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id AND r.revision = o.revision
		WHERE o.company_id = $1 AND o.client_id = $2 AND o.user_id = $3 AND o.account_id = $4 AND o.interface = $5
			AND o.target = $6 AND o.action_key = $7 AND o.status = 'proposed'
		FOR UPDATE OF o`,
		companyID, owner.ClientID, owner.UserID, owner.AccountID, iface, target, p.ActionKey).Scan(
		&id, &rev, &terms, &stored, &revExpires, &retired)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if !found {
		// The same action being performed: a second operation for it could
		// be approved and performed twice.
		var busy string
		err := tx.QueryRow(ctx, `SELECT id FROM operations WHERE company_id = $1 AND client_id = $2 AND user_id = $3
				AND account_id = $4 AND interface = $5 AND target = $6 AND action_key = $7 AND status = 'performing'
			LIMIT 1`, companyID, owner.ClientID, owner.UserID, owner.AccountID, iface, target, p.ActionKey).Scan(&busy)
		if err == nil {
			return nil, &PerformingError{OperationID: busy}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	}
	if found && rev != avoid && !retired && now.Before(revExpires) && sameJSON(terms, p.Terms) && stored.Same(req) {
		// The same terms for the same request: the same revision, its
		// summary kept up to date. Another request is another revision,
		// so an approval performs only the request it was given for.
		if _, err := tx.Exec(ctx, `UPDATE operation_revisions SET summary = $4, request = $5
			WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, rev, p.Summary, req); err != nil {
			return nil, err
		}
		return &Operation{OperationID: id, Revision: rev, Summary: p.Summary, Terms: p.Terms, ExpiresAt: revExpires.UTC()}, nil
	}
	expires := now.Add(p.expiry()).Truncate(time.Second)
	newRev := newID("")
	if !found {
		id = newID("op_")
		if _, err := tx.Exec(ctx, `INSERT INTO operations (company_id, id, client_id, user_id, account_id, interface,
				target, action_key, revision, created_at, updated_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)`,
			companyID, id, owner.ClientID, owner.UserID, owner.AccountID, iface, target, p.ActionKey, newRev, now, expires); err != nil {
			return nil, err
		}
	} else {
		if _, err := tx.Exec(ctx, `UPDATE operation_revisions SET replaced_at = $3
			WHERE company_id = $1 AND operation_id = $2 AND replaced_at IS NULL`, companyID, id, now); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `UPDATE operations SET revision = $3, updated_at = $4,
				expires_at = greatest(expires_at, $5)
			WHERE company_id = $1 AND id = $2 AND status = 'proposed'`, companyID, id, newRev, now, expires); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO operation_revisions (company_id, operation_id, revision, terms, summary,
			request, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, companyID, id, newRev, p.Terms, p.Summary, req, now, expires); err != nil {
		return nil, err
	}
	return &Operation{OperationID: id, Revision: newRev, Summary: p.Summary, Terms: p.Terms, ExpiresAt: expires.UTC()}, nil
}

// PerformingError: a proposal for an action whose operation is being
// performed. The request is answered as a retry of that operation would
// be (extension 7), never with a second operation for the same action.
type PerformingError struct{ OperationID string }

func (e *PerformingError) Error() string {
	return "operations: the action's operation " + e.OperationID + " is being performed"
}

// lockKey names one action of one owner for an advisory lock.
func lockKey(companyID int64, o Owner, iface, target, actionKey string) string {
	b, _ := json.Marshal([]any{"operation", companyID, o.ClientID, o.UserID, o.AccountID, iface, target, actionKey})
	return string(b)
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

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
	// Performing: check 2; 503 with Retry-After until it settles.
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
	// Operation is the approved revision, and Request what performs it,
	// with Approved.
	Operation *Operation
	Request   *Request
}

// Check makes the checks of extension 6 for approval a on req, sent by
// owner (AccountID 0 signed out) at iface and target. In a conversation
// req may be nil: the operation's own request is performed.
func (s *Store) Check(ctx context.Context, companyID int64, owner Owner, iface, target string, a *Approval,
	req *Request, now time.Time) (*Checked, error) {
	var (
		client, user, gotIface, gotTarget, status, current string
		account                                            int64
		response                                           *Response
	)
	err := s.pool.QueryRow(ctx, `SELECT client_id, user_id, account_id, interface, target, status, revision, response
		FROM operations WHERE company_id = $1 AND id = $2`, companyID, a.OperationID).Scan(
		&client, &user, &account, &gotIface, &gotTarget, &status, &current, &response)
	if errors.Is(err, pgx.ErrNoRows) {
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
	// Check 2.
	switch status {
	case "performed":
		return &Checked{Verdict: Performed, Response: response}, nil
	case "performing":
		return &Checked{Verdict: Performing}, nil
	}
	// Check 3: the revision is this operation's current one, unexpired,
	// not declined, for the same target and request.
	var (
		stored   Request
		expires  time.Time
		declined *time.Time
		replaced *time.Time
		terms    json.RawMessage
		summary  string
	)
	err = s.pool.QueryRow(ctx, `SELECT request, expires_at, declined_at, replaced_at, terms, summary
		FROM operation_revisions
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, a.OperationID, a.Revision).Scan(
		&stored, &expires, &declined, &replaced, &terms, &summary)
	if errors.Is(err, pgx.ErrNoRows) {
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
	return &Checked{Verdict: Approved, Request: &stored, Operation: &Operation{OperationID: a.OperationID,
		Revision: a.Revision, Summary: summary, Terms: terms, ExpiresAt: expires.UTC()}}, nil
}

// Claim makes the request carrying approval a the operation's one
// performer: one conditional UPDATE, so among concurrent retries one wins.
// It reports whether this one did. The winner's settle is called in the
// same transaction, to schedule the job that finishes the operation should
// this request not (DESIGN.md: jobs are inserted with their change).
func (s *Store) Claim(ctx context.Context, companyID int64, a *Approval, facts *verified.Facts, now time.Time,
	settle func(ctx context.Context, tx pgx.Tx) error) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `UPDATE operations SET status = 'performing', approval = $4, facts = $5,
			performing_since = $6, updated_at = $6
		WHERE company_id = $1 AND id = $2 AND revision = $3 AND status = 'proposed'
			AND EXISTS (SELECT 1 FROM operation_revisions r WHERE r.company_id = $1 AND r.operation_id = $2
				AND r.revision = $3 AND r.declined_at IS NULL AND r.replaced_at IS NULL AND r.expires_at > $6)`,
		companyID, a.OperationID, a.Revision, a, facts, now)
	if err != nil || tag.RowsAffected() != 1 {
		return false, err
	}
	if err := settle(ctx, tx); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// Unsettled is an operation being performed, as its settle job needs it.
type Unsettled struct {
	// Since is when it was claimed.
	Since     time.Time
	Interface string
	Target    string
	Approval  *Approval
	Facts     *verified.Facts
	Request   *Request
}

// Performing returns what the settle job of operation id needs while it is
// being performed, or nil once it settled.
func (s *Store) Performing(ctx context.Context, companyID int64, id string) (*Unsettled, error) {
	u := &Unsettled{Request: &Request{}}
	err := s.pool.QueryRow(ctx, `SELECT o.performing_since, o.interface, o.target, o.approval, o.facts, r.request FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id
			AND r.revision = o.approval->>'revision'
		WHERE o.company_id = $1 AND o.id = $2 AND o.status = 'performing'`, companyID, id).Scan(
		&u.Since, &u.Interface, &u.Target, &u.Approval, &u.Facts, u.Request)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return u, err
}

// Performed stores the origin's answer; every later retry gets it.
func (s *Store) Performed(ctx context.Context, companyID int64, id string, resp *Response, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE operations SET status = 'performed', response = $3, performed_at = $4,
			updated_at = $4, expires_at = greatest(expires_at, $4)
		WHERE company_id = $1 AND id = $2 AND status = 'performing'`, companyID, id, resp, now)
	return err
}

// Release returns a claimed operation to proposed when the origin
// performed nothing: it proposed new terms (the revision is replaced), or
// declined (declined). Either way the approved revision can never be
// approved again.
func (s *Store) Release(ctx context.Context, companyID int64, id, revision string, declined bool, now time.Time) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE operations SET status = 'proposed', approval = NULL, facts = NULL,
			performing_since = NULL, updated_at = $3
		WHERE company_id = $1 AND id = $2 AND status = 'performing'`, companyID, id, now); err != nil {
		return err
	}
	retire := `UPDATE operation_revisions SET replaced_at = coalesce(replaced_at, $4)
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3`
	if declined {
		retire = `UPDATE operation_revisions SET declined_at = $4
			WHERE company_id = $1 AND operation_id = $2 AND revision = $3`
	}
	if _, err := tx.Exec(ctx, retire, companyID, id, revision, now); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Decline retires revision of operation id for good when an approval of
// it was declined before it was performed (the approval hook): nothing is
// recorded of the approval, and the revision is never approved again.
func (s *Store) Decline(ctx context.Context, companyID int64, id, revision string, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE operation_revisions SET declined_at = coalesce(declined_at, $4)
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, revision, now)
	return err
}

// Revision is a revision as the Company API lists it.
type Revision struct {
	Revision   string          `json:"revision"`
	Terms      json.RawMessage `json:"terms"`
	Summary    string          `json:"summary,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	ExpiresAt  time.Time       `json:"expires_at"`
	ReplacedAt *time.Time      `json:"replaced_at,omitempty"`
	DeclinedAt *time.Time      `json:"declined_at,omitempty"`
}

// Record is an operation as the Company API lists it, for audits: who it
// belongs to, its revisions, the approval it was performed under and the
// origin's answer.
type Record struct {
	OperationID string     `json:"operation_id"`
	Interface   string     `json:"interface"`
	Target      string     `json:"target"`
	ActionKey   string     `json:"action_key"`
	Status      string     `json:"status"`
	ClientID    string     `json:"client_id"`
	UserID      string     `json:"user_id"`
	Account     string     `json:"account"`
	Revision    string     `json:"revision"`
	Revisions   []Revision `json:"revisions"`
	Approval    *Approval  `json:"approval,omitempty"`
	Response    *Response  `json:"response,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	PerformedAt *time.Time `json:"performed_at,omitempty"`
	ExpiresAt   time.Time  `json:"expires_at"`
}

// List returns up to limit of the Company's operations, newest first,
// created before the operation after (its id) when after is set.
func (s *Store) List(ctx context.Context, companyID int64, after string, limit int) ([]*Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT o.id, o.interface, o.target, o.action_key, o.status, o.client_id, o.user_id,
			o.account_id, o.revision, o.approval, o.response, o.created_at, o.performed_at, o.expires_at,
			coalesce((SELECT json_agg(json_build_object('revision', r.revision, 'terms', r.terms, 'summary', r.summary,
				'created_at', r.created_at, 'expires_at', r.expires_at, 'replaced_at', r.replaced_at,
				'declined_at', r.declined_at) ORDER BY r.created_at)
				FROM operation_revisions r WHERE r.company_id = o.company_id AND r.operation_id = o.id), '[]')
		FROM operations o
		WHERE o.company_id = $1 AND ($2 = '' OR (o.created_at, o.id) < (SELECT created_at, id FROM operations
			WHERE company_id = $1 AND id = $2))
		ORDER BY o.created_at DESC, o.id DESC LIMIT $3`, companyID, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Record, error) {
		var (
			r       Record
			account int64
		)
		err := row.Scan(&r.OperationID, &r.Interface, &r.Target, &r.ActionKey, &r.Status, &r.ClientID, &r.UserID,
			&account, &r.Revision, &r.Approval, &r.Response, &r.CreatedAt, &r.PerformedAt, &r.ExpiresAt, &r.Revisions)
		if account != 0 {
			r.Account = strconv.FormatInt(account, 10)
		}
		return &r, err
	})
}
