package sessions

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/poppyhost/poppyhost/internal/db"
)

// A Session JWT's jti is recorded once, in session_jtis, and a second use
// is refused (spec 5.3, "Replayed JWTs"). Require records it in its own
// statement, which commits on its own: for a route that writes anyway,
// such as a conversation message, that is a second commit per request.
// Such a route opts in with DeferReplay: Require then only checks that the
// jti is unused (in the round trip that reads the Session, with no write),
// and the route records it in its own transaction (Replay.Queue), whose
// commit then stands for both. Two requests with one JWT at once both pass
// Require's check; their inserts of the jti meet in session_jtis' primary
// key, where the second waits for the first's transaction: if it commits,
// the second finds the jti used and its transaction rolls back with
// nothing of it stored. Settle records the jti of a request that ended
// without committing it, so that its replays are refused as before.

// errReplayed is the answer to a Session JWT whose jti was already used.
func errReplayed() error {
	return fail("the Session JWT's jti was already used; sign a new JWT for every request")
}

type deferKey struct{}

// DeferReplay is middleware for a route that records its Session JWT's
// jti itself, in the transaction of its write (ReplayFrom, Replay.Queue),
// and calls Settle before answering; it runs before Require, which
// records the jti when the route returns without having done so.
func DeferReplay(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), deferKey{}, true)))
	})
}

// deferred says whether the request's route records its jti itself.
func deferred(ctx context.Context) bool {
	d, _ := ctx.Value(deferKey{}).(bool)
	return d
}

// Replay is a verified Session JWT's jti that its request has yet to
// record (DeferReplay).
type Replay struct {
	store     *Store
	metrics   *metrics
	companyID int64
	clientID  string
	jti       string
	until     time.Time
	// settled: the jti is recorded, or the request was refused as a
	// replay.
	settled bool
}

// ReplayFrom returns the request's jti still to record, or nil: none when
// Require recorded it (the route did not defer it), or it is settled.
func ReplayFrom(ctx context.Context) *Replay {
	sess := FromContext(ctx)
	if sess == nil || sess.replay == nil || sess.replay.settled {
		return nil
	}
	return sess.replay
}

const insertJTISQL = `INSERT INTO session_jtis (company_id, client_id, jti, expires_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT DO NOTHING`

// Queue adds the jti's insert to b, a batch sent in the route's
// transaction, first of the batch so that a replay waits there for the
// transaction that used the jti: b's Close then returns the replay error
// (invalid_session) when the jti was used, and the transaction must roll
// back. Once the transaction commits, the route calls Committed.
func (p *Replay) Queue(b *pgx.Batch) {
	b.Queue(insertJTISQL, p.companyID, p.clientID, p.jti, p.until).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return p.Refuse()
		}
		return nil
	})
}

// ReplayInsert is the jti's insert for a route that records it in a
// statement of its own (a data-modifying CTE), its values ($first to
// $first+3) those of Replay.Values. It has no ON CONFLICT: a used jti
// fails the statement, and so its transaction, with the error that
// Replayed recognises; a replay of a transaction not yet committed waits
// for it there.
func ReplayInsert(first int) string {
	return fmt.Sprintf(`INSERT INTO session_jtis (company_id, client_id, jti, expires_at) VALUES ($%d, $%d, $%d, $%d)`,
		first, first+1, first+2, first+3)
}

// Values are the values of ReplayInsert's parameters.
func (p *Replay) Values() []any { return []any{p.companyID, p.clientID, p.jti, p.until} }

// Replayed says whether err is ReplayInsert's failure on a jti already
// used.
func Replayed(err error) bool { return db.IsConflict(err, "session_jtis_pkey") }

// Refuse settles the request as a replay, its jti found used, and returns
// its error (invalid_session).
func (p *Replay) Refuse() error {
	p.settled = true
	return p.refused()
}

// Committed records that the transaction with the jti's insert (Queue,
// ReplayInsert) committed.
func (p *Replay) Committed() { p.settled = true }

// settleTimeout bounds Settle's insert, which outlives the request.
const settleTimeout = 5 * time.Second

// Settle records the jti of the request in ctx on its own if its route
// did not (an error ended the request before its transaction committed),
// and returns the replay error if the jti was used: the route answers with
// it instead of its own error, as Require would have. It does nothing for
// a request without a deferred jti, or one settled.
func Settle(ctx context.Context) error {
	p := ReplayFrom(ctx)
	if p == nil {
		return nil
	}
	p.settled = true
	// Recorded even when the client has gone: the request may have ended
	// for that, and its JWT must not be usable again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	fresh, err := p.store.insertJTI(ctx, p.companyID, p.clientID, p.jti, p.until)
	if err != nil {
		return err
	}
	if !fresh {
		return p.refused()
	}
	return nil
}

// refused counts a replay refused after the Session check, which counted
// the request as verified, and returns its error.
func (p *Replay) refused() error {
	p.metrics.replays.Inc()
	p.metrics.refused[reasonInvalid].Inc()
	return errReplayed()
}
