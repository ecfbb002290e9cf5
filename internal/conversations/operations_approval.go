package conversations

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// takeApproval reads the approval a Personal Agent message carries in
// extensions.operations.approval (extension 6). The content is dropped,
// as that of an extension the Company does not list, when the Company
// has operations off or the Session does not declare version 3
// (extension 2); a message left with no content is then invalid_request
// (emptyAfterDrop). A malformed approval, one without approver for one, is
// invalid_request, before anything is stored. The message's text never
// approves anything; the content stays in the message as sent.
func (s *Store) takeApproval(ctx context.Context, o Owner, m *Message) (*operations.Approval, error) {
	raw, ok := m.Extensions[operations.Name]
	if !ok {
		return nil, nil
	}
	co := tenant.FromContext(ctx)
	if s.ops == nil || co == nil || !co.Settings.Operations.Enabled || o.Verified == nil ||
		o.Verified.Extensions[operations.Name] != operations.Version {
		delete(m.Extensions, operations.Name)
		if len(m.Extensions) == 0 {
			m.Extensions = nil
		}
		return nil, emptyAfterDrop(m, []string{operations.Name})
	}
	var content struct {
		Approval json.RawMessage `json:"approval"`
	}
	if err := httpx.Unmarshal(raw, &content, httpx.DecodeOptions{}); err != nil {
		return nil, invalid("message.extensions.operations must be a JSON object (spec 8.4)")
	}
	if !present(content.Approval) {
		return nil, nil
	}
	a, err := operations.ParseApprovalJSON(content.Approval)
	if err != nil {
		return nil, invalid("message.extensions.operations.approval: %v (extension 6)", err)
	}
	return a, nil
}

// schedulePerform inserts, in the transaction that stores the message, the
// job that hands approval a to the performer and tells the Company Agent
// the outcome: a crash loses nothing, and a retried message, which stores
// nothing, schedules nothing. seq is the message's event.
func (s *Store) schedulePerform(ctx context.Context, tx pgx.Tx, c *Conversation, o Owner, messageID string, seq int64,
	a *operations.Approval) error {
	if a == nil {
		return nil
	}
	args := PerformArgs{CompanyID: c.CompanyID, ConversationID: c.ID, MessageID: messageID, EventID: eventID(seq),
		Approval: a, ClientID: o.ClientID, UserID: o.UserID, AccountID: o.AccountID, Facts: o.Verified}
	_, err := s.ops.jobs.InsertTx(ctx, tx, args, nil)
	return err
}

// declareOperations adds version 3 of the Operations extension to the
// verified facts of a request that declares it (extension 2), in client
// metadata or in the Poppy-Extensions header: the conversation then
// remembers it as declared by the Personal Agent.
func declareOperations(f *verified.Facts, declared bool) {
	if f != nil && declared {
		f.Extensions = operations.WithVersion(f.Extensions)
	}
}
