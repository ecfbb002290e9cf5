package conversations

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// The statements of the Hub's notifications (hub.go): LISTEN on its own
// connection, and pg_notify, which PostgreSQL delivers when the
// transaction that sends it commits.

// listenTo makes conn listen on channels.
func listenTo(ctx context.Context, conn *pgx.Conn, channels ...string) error {
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// notify sends payload on channel, on q's commit when q is a transaction.
func notify(ctx context.Context, q db.Executor, channel, payload string) error {
	_, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// notifyTx tells every replica, when tx commits, that the conversation has
// new events.
func notifyTx(ctx context.Context, tx pgx.Tx, companyID int64, conversationID string) error {
	return notify(ctx, tx, eventsChannel, hubKey(companyID, conversationID))
}
