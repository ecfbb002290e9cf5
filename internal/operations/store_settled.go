package operations

import (
	"context"
	"time"

	"github.com/poppyhost/poppyhost/internal/db"
)

// RevisionState is what became of one revision of an operation, as State
// reports it.
type RevisionState struct {
	// Status is the revision's: performing (also while its outcome is
	// unknown) or performed when the operation's approval names this
	// revision, else proposed (another revision's approval, or none, says
	// nothing of this one).
	Status string
	// Response is the origin's stored answer once performed.
	Response *Response
	// Declined and Replaced say why a revision was not performed: the
	// origin or the approval hook declined it, or it was replaced (new
	// terms proposed, or another revision proposed meanwhile).
	Declined, Replaced bool
	// Since is when the operation was claimed, while performing.
	Since time.Time
}

// State reports the state of revision of operation id, or nil when the
// Company no longer remembers it. Interfaces that tell someone else the
// outcome of an approval (a conversation's Company Agent) use it to learn
// how the approved revision left performing.
func (s *Store) State(ctx context.Context, companyID int64, id, revision string) (*RevisionState, error) {
	var (
		st                 RevisionState
		approved           bool
		since              *time.Time
		declined, replaced *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT o.status, coalesce(o.approval->>'revision' = r.revision, false), o.response,
			o.performing_since, r.declined_at, r.replaced_at
		FROM operations o JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id
		WHERE o.company_id = $1 AND o.id = $2 AND r.revision = $3`, companyID, id, revision).Scan(
		&st.Status, &approved, &st.Response, &since, &declined, &replaced)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !approved {
		// Another revision's: its status and answer are not this one's.
		st.Status, st.Response, since = "proposed", nil, nil
	}
	if st.Status == stateUnknown {
		// Nobody knows yet: performing, until the Company resolves it
		// (extension 7: never told as a failure).
		st.Status = statePerforming
	}
	if since != nil {
		st.Since = *since
	}
	st.Declined, st.Replaced = declined != nil, replaced != nil
	return &st, nil
}
