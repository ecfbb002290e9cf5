package operations

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Recorded approvals of website operations (extension 6, "Websites"): an
// approval sent to {issuer}/poppy/operations performs nothing; it is
// recorded, and the browser's next request for exactly the approved
// revision, in a Session that can approve it, uses it up.

// EndpointPath is the extension's endpoint under {issuer} (extension 2,
// DESIGN.md), where Personal Agents get a website's operations and send
// their approvals.
const EndpointPath = "/poppy/operations"

// MaxRef bounds a reference in Poppy-Operation (extension 4).
const MaxRef = 2048

// Ref is the reference of a revision of a website operation:
// {operation_id}.{revision}. Neither contains a dot.
func Ref(operationID, revision string) string { return operationID + "." + revision }

// ParseRef splits a reference made by Ref, and reports whether it is one.
func ParseRef(ref string) (operationID, revision string, ok bool) {
	if len(ref) > MaxRef {
		return "", "", false
	}
	operationID, revision, ok = strings.Cut(ref, ".")
	return operationID, revision, ok && sessions.ValidID(operationID) && sessions.ValidID(revision)
}

// Status values of a website operation. A WebOperation's Status is
// proposed, performing or performed; a lookup answers with approved for a
// proposed one whose approval waits, or its Status (extension 6, "Looking
// up an approved operation").
const (
	StatusProposed   = "proposed"
	StatusApproved   = "approved"
	StatusPerforming = "performing"
	StatusPerformed  = "performed"
)

// WebOperation is what {issuer}/poppy/operations knows of an operation.
type WebOperation struct {
	Owner     Owner
	Interface string
	// Status is StatusProposed, StatusPerforming or StatusPerformed.
	Status string
	// Current is the current revision; Retired when it was declined or
	// replaced, which leaves none to approve.
	Current *Operation
	Retired bool
	// Approved: Current has a recorded approval not used up.
	Approved bool
}

// Lookup returns operation id of the Company with its current revision,
// or nil when the Company has none by that id.
func (s *Store) Lookup(ctx context.Context, companyID int64, id string) (*WebOperation, error) {
	w := &WebOperation{Current: &Operation{OperationID: id}}
	err := s.pool.QueryRow(ctx, `SELECT o.client_id, o.user_id, o.account_id, o.interface, o.status, o.revision,
			r.terms, r.summary, r.expires_at, r.declined_at IS NOT NULL OR r.replaced_at IS NOT NULL,
			EXISTS (SELECT 1 FROM operation_approvals a WHERE a.company_id = o.company_id
				AND a.operation_id = o.id AND a.revision = o.revision AND a.used_at IS NULL)
		FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id AND r.revision = o.revision
		WHERE o.company_id = $1 AND o.id = $2`, companyID, id).Scan(
		&w.Owner.ClientID, &w.Owner.UserID, &w.Owner.AccountID, &w.Interface, &w.Status, &w.Current.Revision,
		&w.Current.Terms, &w.Current.Summary, &w.Current.ExpiresAt, &w.Retired, &w.Approved)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w.Current.ExpiresAt = w.Current.ExpiresAt.UTC()
	return w, nil
}

// RevisionOf reports whether revision is one the Company returned for
// operation id, and, when it was declined, the decline (empty when the
// decline said nothing), so a lookup of its reference reports it.
func (s *Store) RevisionOf(ctx context.Context, companyID int64, id, revision string) (known bool, declined *Decline,
	err error) {
	var (
		at *time.Time
		d  *Decline
	)
	err = s.pool.QueryRow(ctx, `SELECT declined_at, decline FROM operation_revisions
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, revision).Scan(&at, &d)
	if db.IsNotFound(err) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	if at != nil && d == nil {
		d = &Decline{}
	}
	return true, d, nil
}

// Record records approval a of a website operation's current revision,
// sent with facts. It reports false, recording nothing, when the revision
// is no longer current, is retired, has expired or the operation is no
// longer proposed. A revision approved already keeps its approval until it
// is used up; one used up by a request that performed nothing (the
// operation is still proposed, the revision current) is recorded anew.
func (s *Store) Record(ctx context.Context, companyID int64, a *Approval, facts *verified.Facts, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO operation_approvals (company_id, operation_id, revision, approval, facts, recorded_at)
		SELECT o.company_id, o.id, o.revision, $4, $5, $6 FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id AND r.revision = o.revision
		WHERE o.company_id = $1 AND o.id = $2 AND o.revision = $3 AND o.status = 'proposed' AND o.interface = 'web'
			AND r.declined_at IS NULL AND r.replaced_at IS NULL AND r.expires_at > $6
		ON CONFLICT (company_id, operation_id, revision) DO UPDATE SET approval = excluded.approval,
			facts = excluded.facts, recorded_at = excluded.recorded_at, used_at = NULL
		WHERE operation_approvals.used_at IS NOT NULL`,
		companyID, a.OperationID, a.Revision, a, facts, now)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Nothing inserted: either the revision cannot be approved, or its
	// approval is recorded already and not used up.
	var waiting bool
	err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM operation_approvals a
		JOIN operations o ON o.company_id = a.company_id AND o.id = a.operation_id AND o.revision = a.revision
		JOIN operation_revisions r ON r.company_id = a.company_id AND r.operation_id = a.operation_id
			AND r.revision = a.revision
		WHERE a.company_id = $1 AND a.operation_id = $2 AND a.revision = $3 AND a.used_at IS NULL
			AND o.status = 'proposed' AND o.interface = 'web' AND r.declined_at IS NULL AND r.replaced_at IS NULL
			AND r.expires_at > $4)`,
		companyID, a.OperationID, a.Revision, now).Scan(&waiting)
	return waiting, err
}

// Find returns the recorded approvals not used up that owner can apply to
// req at the website, first recorded first: approvals of owner's proposed
// website operations whose current, unexpired, unretired revision performs
// req (extension 6: the request as if it carried the approval, check 3).
func (s *Store) Find(ctx context.Context, companyID int64, owner Owner, req *Request, now time.Time) ([]*Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.approval, r.request FROM operation_approvals a
		JOIN operations o ON o.company_id = a.company_id AND o.id = a.operation_id AND o.revision = a.revision
		JOIN operation_revisions r ON r.company_id = a.company_id AND r.operation_id = a.operation_id
			AND r.revision = a.revision
		WHERE a.company_id = $1 AND a.used_at IS NULL AND o.client_id = $2 AND o.user_id = $3 AND o.account_id = $4
			AND o.interface = 'web' AND o.status = 'proposed' AND r.declined_at IS NULL AND r.replaced_at IS NULL
			AND r.expires_at > $5 AND r.request->>'method' = $6 AND r.request->>'path' = $7
		ORDER BY a.recorded_at, a.operation_id LIMIT 100`,
		companyID, owner.ClientID, owner.UserID, owner.AccountID, now, req.Method, req.Path)
	if err != nil {
		return nil, err
	}
	type row struct {
		approval Approval
		request  Request
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*row, error) {
		var x row
		err := r.Scan(&x.approval, &x.request)
		return &x, err
	})
	if err != nil {
		return nil, err
	}
	var found []*Approval
	for _, x := range all {
		if x.request.Same(req) {
			found = append(found, &x.approval)
		}
	}
	return found, nil
}

// UseUp marks approval a used at now, by one conditional UPDATE, and
// reports whether this call did: among concurrent requests one uses it.
func (s *Store) UseUp(ctx context.Context, companyID int64, a *Approval, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE operation_approvals SET used_at = $4
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3 AND used_at IS NULL`,
		companyID, a.OperationID, a.Revision, now)
	return err == nil && tag.RowsAffected() == 1, err
}

// GiveBack undoes UseUp(a, usedAt) for a request that performed nothing
// with a (its checks failed, or an error): the approval applies to the
// next request again. It changes nothing once another use or a new
// recording replaced that use.
func (s *Store) GiveBack(ctx context.Context, companyID int64, a *Approval, usedAt time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE operation_approvals SET used_at = NULL
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3 AND used_at = $4`,
		companyID, a.OperationID, a.Revision, usedAt)
	return err
}
