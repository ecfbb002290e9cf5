package notify

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// listen makes conn listen on channels.
func listen(ctx context.Context, conn *pgx.Conn, channels []string) error {
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// Send sends payload on channel, when q commits if q is a transaction.
// PostgreSQL bounds a payload to under 8000 bytes.
func Send(ctx context.Context, q db.Executor, channel, payload string) error {
	_, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}
