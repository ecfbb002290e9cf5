package operations

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
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
// target URI, and content of the same meaning: JSON compared exactly by
// meaning (SameJSON: member order and spacing do not count, every digit of
// a number does), forms by their decoded fields.
func (r *Request) Same(o *Request) bool {
	if r.API != o.API || r.Method != o.Method || r.Path != o.Path || !sameForm(r.Query, o.Query) {
		return false
	}
	if bytes.Equal(r.Body, o.Body) {
		return true
	}
	if httpx.IsMediaType(r.ContentType, httpx.FormType) && httpx.IsMediaType(o.ContentType, httpx.FormType) {
		return sameForm(string(r.Body), string(o.Body))
	}
	return SameJSON(r.Body, o.Body)
}

// sameTarget reports whether r and o go to the same URL of the same API:
// routed alike.
func (r *Request) sameTarget(o *Request) bool {
	return r.API == o.API && r.Path == o.Path && r.Query == o.Query
}

// Exact returns an error for a JSON body that is ambiguous: one that
// names a member twice, whose meaning depends on who reads it
// (ErrDuplicateMember). It is refused before anything is recorded or
// sent; any other body is compared as it is.
func (r *Request) Exact() error {
	if !httpx.IsJSON(r.ContentType) {
		return nil
	}
	if _, err := Canonical(r.Body); errors.Is(err, ErrDuplicateMember) {
		return err
	}
	return nil
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
	// RetryAfter is the origin's Retry-After of an answer that asks for
	// the same request again later; never kept.
	RetryAfter string `json:"-"`
}

// Store keeps operations in PostgreSQL, every query for one Company.
type Store struct {
	pool      *pgxpool.Pool
	reg       prometheus.Registerer
	proposals *byInterface
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opts ...StoreOption) *Store {
	s := &Store{pool: pool}
	for _, o := range opts {
		o(s)
	}
	s.proposals = newProposals(s.reg)
	return s
}

// newID is an operation ID or a revision: 26 characters of the 8.2
// alphabet, 130 random bits.
func newID(prefix string) string { return prefix + rand.Text() }

// Propose records an origin's proposal p, answering req of owner at iface
// and target, and returns the operation to send. A proposal for an action
// that is already proposed keeps its operation_id; its revision changes
// only when the terms differ or the revision expired, or when it would be
// avoid, the revision an approval named (extension 6: never answer an
// approval with the revision it names). While the action's operation is
// being performed, or its outcome is unknown, it returns a
// *PerformingError.
func (s *Store) Propose(ctx context.Context, companyID int64, owner Owner, iface, target string, p *Proposal,
	req *Request, avoid string, now time.Time) (*Operation, error) {
	var op *Operation
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		op, err = proposeTx(ctx, tx, companyID, owner, iface, target, p, req, avoid, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.proposals.inc(iface)
	return op, nil
}

// ProposeTx is Propose in tx, for a caller that records the operation
// with a change of its own (a conversation's message); the proposal is
// counted when tx has it, whether or not tx commits.
func (s *Store) ProposeTx(ctx context.Context, tx pgx.Tx, companyID int64, owner Owner, iface, target string, p *Proposal,
	req *Request, avoid string, now time.Time) (*Operation, error) {
	op, err := proposeTx(ctx, tx, companyID, owner, iface, target, p, req, avoid, now)
	if err == nil {
		s.proposals.inc(iface)
	}
	return op, err
}

// proposeTx is ProposeTx, uncounted.
func proposeTx(ctx context.Context, tx pgx.Tx, companyID int64, owner Owner, iface, target string, p *Proposal,
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
	if err != nil && !db.IsNotFound(err) {
		return nil, err
	}
	if !found {
		// The same action being performed, or its outcome unknown: a
		// second operation for it could be approved and performed twice,
		// and would stand in the way of the Company's resolution.
		var busy string
		err := tx.QueryRow(ctx, `SELECT id FROM operations WHERE company_id = $1 AND client_id = $2 AND user_id = $3
				AND account_id = $4 AND interface = $5 AND target = $6 AND action_key = $7
				AND status IN ('performing', 'unknown')
			LIMIT 1`, companyID, owner.ClientID, owner.UserID, owner.AccountID, iface, target, p.ActionKey).Scan(&busy)
		if err == nil {
			return nil, &PerformingError{OperationID: busy}
		}
		if !db.IsNotFound(err) {
			return nil, err
		}
	}
	if found && rev != avoid && !retired && now.Before(revExpires) && SameJSON(terms, p.Terms) && stored.Same(req) {
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
// performed, or whose outcome is unknown. The request is answered as a
// retry of that operation would be (extension 7), never with a second
// operation for the same action.
type PerformingError struct{ OperationID string }

func (e *PerformingError) Error() string {
	return "operations: the action's operation " + e.OperationID + " is being performed"
}

// lockKey names one action of one owner for an advisory lock.
func lockKey(companyID int64, o Owner, iface, target, actionKey string) string {
	b, _ := json.Marshal([]any{"operation", companyID, o.ClientID, o.UserID, o.AccountID, iface, target, actionKey})
	return string(b)
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
	// Decline is what declined it, when the origin or the approval hook
	// did.
	Decline *Decline `json:"decline,omitempty"`
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
	// Resolution is how the Company resolved an unknown outcome.
	Resolution *Resolution `json:"resolution,omitempty"`
}

// recordColumns is the select list of a Record, from operations o.
const recordColumns = `o.id, o.interface, o.target, o.action_key, o.status, o.client_id, o.user_id,
	o.account_id, o.revision, o.approval, o.response, o.created_at, o.performed_at, o.expires_at, o.resolution,
	coalesce((SELECT json_agg(json_build_object('revision', r.revision, 'terms', r.terms, 'summary', r.summary,
		'created_at', r.created_at, 'expires_at', r.expires_at, 'replaced_at', r.replaced_at,
		'declined_at', r.declined_at, 'decline', r.decline) ORDER BY r.created_at)
		FROM operation_revisions r WHERE r.company_id = o.company_id AND r.operation_id = o.id), '[]')`

func scanRecord(row pgx.CollectableRow) (*Record, error) {
	var (
		r       Record
		account int64
	)
	err := row.Scan(&r.OperationID, &r.Interface, &r.Target, &r.ActionKey, &r.Status, &r.ClientID, &r.UserID,
		&account, &r.Revision, &r.Approval, &r.Response, &r.CreatedAt, &r.PerformedAt, &r.ExpiresAt, &r.Resolution,
		&r.Revisions)
	if account != 0 {
		r.Account = strconv.FormatInt(account, 10)
	}
	return &r, err
}

// List returns up to limit of the Company's operations, newest first,
// created before the operation after (its id) when after is set.
func (s *Store) List(ctx context.Context, companyID int64, after string, limit int) ([]*Record, error) {
	return s.Search(ctx, companyID, Filter{}, after, limit)
}

// ErrNotFound: the Company has no operation by that ID.
var ErrNotFound = errors.New("operations: no such operation")

// Get returns the Company's operation id with every revision's terms.
func (s *Store) Get(ctx context.Context, companyID int64, id string) (*Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+recordColumns+` FROM operations o
		WHERE o.company_id = $1 AND o.id = $2`, companyID, id)
	if err != nil {
		return nil, err
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRecord)
	if db.IsNotFound(err) {
		return nil, ErrNotFound
	}
	return r, err
}
