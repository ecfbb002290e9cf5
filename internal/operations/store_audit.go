package operations

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Statuses an operation can have, as the Company API lists them.
var Statuses = []string{StatusProposed, StatusPerforming, stateUnknown, StatusPerformed}

// StatusUnknown is the status of an operation whose outcome its settle
// job could not learn, until the Company resolves it (ResolveUnknown).
const StatusUnknown = stateUnknown

// Interfaces are the interfaces an operation can be proposed at.
var Interfaces = []string{InterfaceAPI, InterfaceMCP, InterfaceConversation, InterfaceWeb}

// Filter narrows a Company's operations for an audit; its zero value
// keeps every one. Each set field must match.
type Filter struct {
	// Status and Interface are one of Statuses and Interfaces.
	Status, Interface string
	// ClientID is the Personal Agent's, Target the API, tool or website
	// it was proposed for; both exact.
	ClientID, Target string
	// Since and Until bound when the operation was created: Since
	// included, Until excluded.
	Since, Until time.Time
}

// where returns the conditions of f on operations o after the Company's,
// with their arguments numbered from $n.
func (f *Filter) where(n int) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		b.WriteString(" AND ")
		b.WriteString(strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(n+len(args)-1)))
	}
	if f.Status != "" {
		add("o.status = $?", f.Status)
	}
	if f.Interface != "" {
		add("o.interface = $?", f.Interface)
	}
	if f.ClientID != "" {
		add("o.client_id = $?", f.ClientID)
	}
	if f.Target != "" {
		add("o.target = $?", f.Target)
	}
	if !f.Since.IsZero() {
		add("o.created_at >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		add("o.created_at < $?", f.Until)
	}
	return b.String(), args
}

// Search returns up to limit of the Company's operations that f keeps,
// newest first, created before the operation after (its id) when after is
// set: a page of an audit, the next one after its last operation. List is
// Search with every operation kept.
func (s *Store) Search(ctx context.Context, companyID int64, f Filter, after string, limit int) ([]*Record, error) {
	cond, args := f.where(4)
	rows, err := s.pool.Query(ctx, `SELECT `+recordColumns+` FROM operations o
		WHERE o.company_id = $1 AND ($2 = '' OR (o.created_at, o.id) < (SELECT created_at, id FROM operations
			WHERE company_id = $1 AND id = $2))`+cond+`
		ORDER BY o.created_at DESC, o.id DESC LIMIT $3`, append([]any{companyID, after, limit}, args...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRecord)
}

// exportPage is how many operations Each reads at a time.
const exportPage = 200

// Each calls fn with every operation of the Company that f keeps, newest
// first, until fn returns an error, which Each returns. It reads them a
// page at a time (Search), so a long export holds no statement open while
// fn writes to a slow reader, and memory stays one page.
func (s *Store) Each(ctx context.Context, companyID int64, f Filter, fn func(*Record) error) error {
	after := ""
	for {
		page, err := s.Search(ctx, companyID, f, after, exportPage)
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(page) < exportPage {
			return nil
		}
		after = page[len(page)-1].OperationID
	}
}

// ApprovalEntry is one approval an operation received, for an audit: the
// approval as the Personal Agent sent it (approver, approved_at,
// input_type, reference), and when the platform received it.
type ApprovalEntry struct {
	Approval
	// ReceivedAt is when it was claimed to be performed, or recorded at
	// {issuer}/poppy/operations for a website's operation.
	ReceivedAt time.Time
	// Recorded: a website's approval, recorded until a browser request
	// for its revision uses it (UsedAt).
	Recorded bool
	UsedAt   *time.Time
}

// ApprovedTime is when the Personal Agent says it was approved, or nil when
// it did not say.
func (a *ApprovalEntry) ApprovedTime() *time.Time {
	if a.ApprovedAt == 0 {
		return nil
	}
	t := time.Unix(a.ApprovedAt, 0).UTC()
	return &t
}

// Approvals returns the approvals operation id of the Company received,
// oldest first: a website's recorded approvals, and the approval being
// performed or performed (for a website's, the recorded one again, as
// the browser request that used it was claimed). An approval whose claim was released (retry,
// decline, an unknown outcome resolved as not performed) is not kept.
// An id the Company has no operation by has none.
func (s *Store) Approvals(ctx context.Context, companyID int64, id string) ([]ApprovalEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT approval, recorded_at, true, used_at FROM operation_approvals
			WHERE company_id = $1 AND operation_id = $2
		UNION ALL
		SELECT approval, performing_since, false, NULL FROM operations
			WHERE company_id = $1 AND id = $2 AND approval IS NOT NULL AND performing_since IS NOT NULL
		ORDER BY 2`, companyID, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ApprovalEntry, error) {
		var e ApprovalEntry
		err := row.Scan(&e.Approval, &e.ReceivedAt, &e.Recorded, &e.UsedAt)
		return e, err
	})
}
