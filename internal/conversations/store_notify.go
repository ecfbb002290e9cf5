package conversations

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/notify"
)

// notifyTx tells every replica, when tx commits, that the conversation has
// new events (Hub).
func notifyTx(ctx context.Context, tx pgx.Tx, companyID int64, conversationID string) error {
	return notify.Send(ctx, tx, eventsChannel, hubKey(companyID, conversationID))
}
