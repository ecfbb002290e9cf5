package conversations

import (
	"context"
	"encoding/json"
	"time"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The store of operation outcomes (conversation_operation_outcomes): what
// became of each approval a Personal Agent sent, kept until the Company
// Agent's webhook has it.

// insertOutcome keeps oc, as body, once per operation, revision and
// status in the conversation, and reports whether it is new: an outcome
// already told adds nothing, nor does performing after any other, nor an
// outcome for a conversation that is gone.
func insertOutcome(ctx context.Context, q db.Executor, a PerformArgs, oc *OperationOutcome, body []byte, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO conversation_operation_outcomes (company_id, conversation_id, operation_id,
			revision, status, body, facts, created_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM conversations WHERE company_id = $1 AND id = $2)
			-- Performing says nothing once the outcome was told.
			AND ($5 <> 'performing' OR NOT EXISTS (SELECT 1 FROM conversation_operation_outcomes
				WHERE company_id = $1 AND conversation_id = $2 AND operation_id = $3 AND revision = $4))
		ON CONFLICT DO NOTHING`,
		a.CompanyID, a.ConversationID, oc.OperationID, oc.Revision, oc.Status, body, a.Facts, now)
	return err == nil && tag.RowsAffected() > 0, err
}

// storedOutcome is a recorded outcome with what its delivery needs.
type storedOutcome struct {
	body        json.RawMessage
	facts       *verified.Facts
	createdAt   time.Time
	deliveredAt *time.Time
}

// loadOutcome returns the outcome a names, or nil when it is gone.
func loadOutcome(ctx context.Context, q db.Executor, a OutcomeArgs) (*storedOutcome, error) {
	var o storedOutcome
	err := q.QueryRow(ctx, `SELECT body, facts, created_at, delivered_at FROM conversation_operation_outcomes
		WHERE company_id = $1 AND conversation_id = $2 AND operation_id = $3 AND revision = $4 AND status = $5`,
		a.CompanyID, a.ConversationID, a.OperationID, a.Revision, a.Status).Scan(&o.body, &o.facts, &o.createdAt, &o.deliveredAt)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// markOutcomeDelivered records that the outcome a names was delivered.
func markOutcomeDelivered(ctx context.Context, q db.Executor, a OutcomeArgs, now time.Time) error {
	_, err := q.Exec(ctx, `UPDATE conversation_operation_outcomes SET delivered_at = $6
		WHERE company_id = $1 AND conversation_id = $2 AND operation_id = $3 AND revision = $4 AND status = $5`,
		a.CompanyID, a.ConversationID, a.OperationID, a.Revision, a.Status, now)
	return err
}
