package conversations

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The staff console's reads (internal/console): the inbox of
// conversations waiting for a person. Its changes are the Company API's
// (store_company.go), and its search is CompanyList.

// Why a conversation waits for a person (Waiting.Reason).
const (
	// WaitHandoff: it is queued (spec 8.9), handed off by the Personal
	// Agent or by the Company Agent.
	WaitHandoff = "handoff"
	// WaitUserRequested: the User accepted the Company's user_requested
	// event (spec 8.10) and waits in the Direct Conversation while no
	// person answers it.
	WaitUserRequested = "user_requested"
)

// Waiting is a conversation in the inbox.
type Waiting struct {
	*ConversationView
	// Reason is WaitHandoff or WaitUserRequested.
	Reason string
	// Since is when it started waiting: the handoff, or the Direct
	// Conversation's start.
	Since time.Time
}

// waitingWhere selects the conversations waiting for a person; it is the
// predicate of the index conversations_company_waiting (migration 00037),
// which orders them by waitingSince, so the two are written exactly as
// there.
const (
	waitingWhere = `(status = 'queued' OR (user_requested_event_id IS NOT NULL AND status <> 'closed' AND responder = 'agent'))`
	waitingSince = `coalesce(queued_at, created_at)`
)

// inboxSQL lists a Company's ($1) waiting conversations, at most $2, on
// the index conversations_company_waiting.
const inboxSQL = `SELECT ` + viewColumns + `, ` + waitingSince + ` FROM conversations
	WHERE company_id = $1 AND ` + waitingWhere + `
	ORDER BY ` + waitingSince + `, id LIMIT $2`

// MaxInbox is the most conversations Inbox returns.
const MaxInbox = 100

// Inbox returns the Company's conversations waiting for a person, the
// longest waiting first, at most limit (1 to MaxInbox), and whether more
// are waiting.
func (s *Store) Inbox(ctx context.Context, companyID int64, limit int) ([]*Waiting, bool, error) {
	limit = min(max(limit, 1), MaxInbox)
	rows, err := s.pool.Query(ctx, inboxSQL, companyID, limit+1)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	out := []*Waiting{}
	for rows.Next() {
		w := &Waiting{}
		v, err := scanView(waitingRow{rows, &w.Since})
		if err != nil {
			return nil, false, err
		}
		w.ConversationView, w.Reason = v, WaitUserRequested
		if v.Status == StatusQueued {
			w.Reason = WaitHandoff
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// waitingRow scans viewColumns and then the time the conversation started
// waiting.
type waitingRow struct {
	pgx.Row
	since *time.Time
}

func (r waitingRow) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.since)...) }
