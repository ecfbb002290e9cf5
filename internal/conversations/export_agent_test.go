package conversations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
)

// TestEvent is a Company-side event for the Personal Agent tests, added
// through the store until they use the Company API.
type TestEvent struct {
	Type string
	Body map[string]any
}

// AppendTestEvents adds events to a conversation as the Company side
// would, moving it to status and responder ("" keeps them), and returns
// the ID of the last event added.
func AppendTestEvents(ctx context.Context, pool *pgxpool.Pool, companyID int64, id, status, responder string, events ...TestEvent) (string, error) {
	s := NewStore(pool, StoreOptions{})
	var last string
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		c, err := get(ctx, tx, companyID, id, true)
		if err != nil {
			return err
		}
		if c == nil {
			return fmt.Errorf("no conversation %q", id)
		}
		if status == "" {
			status = c.Status
		}
		if responder == "" {
			responder = c.Responder
		}
		add := make([]newEvent, len(events))
		for i, e := range events {
			add[i] = newEvent{Type: e.Type, Body: e.Body}
		}
		if err := s.appendEvents(ctx, tx, c, status, responder, add...); err != nil {
			return err
		}
		last = eventID(c.LastSeq)
		return nil
	})
	return last, err
}

// WaitCap is the cap on wait.
const WaitCap = defaultWaitCap

// Carried is the events the notifications of news carried.
func (n News) Carried() []Event { return n.carried }

// InboxSQL is Inbox's query.
const InboxSQL = inboxSQL
