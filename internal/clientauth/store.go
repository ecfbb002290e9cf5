package clientauth

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
)

// PGReplays is the ReplayStore on PostgreSQL (table client_assertion_jtis),
// shared by every replica.
//
// Rows are keyed by (issuer, client_id, jti), not by Company: Use is given
// the issuer, and the issuer is safe to key by because it stands for exactly
// one Company for good. It is {PUBLIC_URL}/t/{slug} (tenant.URLs.Issuer),
// and a slug is never reused, even after its Company is deleted
// (retired_slugs, spec 3.2), so one Company's jti never blocks, nor is
// blocked by, another's. A deleted Company's rows simply wait for the sweep.
type PGReplays struct {
	pool *pgxpool.Pool
}

// NewPGReplays returns a PGReplays on pool.
func NewPGReplays(pool *pgxpool.Pool) *PGReplays { return &PGReplays{pool: pool} }

var _ ReplayStore = (*PGReplays)(nil)

// Use records jti for clientID at issuer until exp. It reports true only to
// the first caller, however many race: the primary key decides. A row is
// refused until the sweep removes it, even just past exp, which is stricter
// than needed and never lets a jti through twice.
//
// In a context from Defer, the first Use records nothing: it keeps the jti
// in the Deferred, for the caller to record, and reports it fresh.
func (s *PGReplays) Use(ctx context.Context, issuer, clientID, jti string, exp time.Time) (bool, error) {
	if d, ok := ctx.Value(deferredKey{}).(*Deferred); ok && d.store == nil {
		*d = Deferred{store: s, args: []any{issuer, clientID, jti, exp}}
		return true, nil
	}
	tag, err := s.pool.Exec(ctx, useSQL, issuer, clientID, jti, exp)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// useSQL records jti $3 of client $2 at issuer $1 until $4, unless it was.
const useSQL = `INSERT INTO client_assertion_jtis (issuer, client_id, jti, expires_at)
	VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`

type deferredKey struct{}

// Deferred is the jti of an assertion that Verify accepted in a context
// from Defer and that is not recorded yet: the request's first read
// records it in its own round trip (Queue), or the caller does (Record),
// before the request changes anything.
type Deferred struct {
	// store is the PGReplays that kept the jti; nil while none did.
	store *PGReplays
	// args are useSQL's.
	args []any
	// sent says that Queue or Record sent the insert.
	sent bool
}

// Defer returns a context in which the first jti a PGReplays accepts is
// kept in the returned Deferred rather than recorded.
func Defer(ctx context.Context) (context.Context, *Deferred) {
	d := &Deferred{}
	return context.WithValue(ctx, deferredKey{}, d), d
}

// DeferredFrom is the Deferred of a context from Defer, or nil.
func DeferredFrom(ctx context.Context) *Deferred {
	d, _ := ctx.Value(deferredKey{}).(*Deferred)
	return d
}

// Queue queues the kept jti's insert in b, first, unless it was sent or
// none was kept, and reports whether it did. The batch then fails with
// Replayed's *Error when the jti was used before; as a batch runs in one
// implicit transaction, what b queues after it sees the jti recorded.
func (d *Deferred) Queue(b *pgx.Batch) bool {
	if d == nil || d.store == nil || d.sent {
		return false
	}
	d.sent = true
	b.Queue(useSQL, d.args...).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return Replayed()
		}
		return nil
	})
	return true
}

// Record records the kept jti unless it was sent or none was kept: an
// *Error, Replayed's or a server_error, when it cannot be.
func (d *Deferred) Record(ctx context.Context) error {
	if d == nil || d.store == nil || d.sent {
		return nil
	}
	d.sent = true
	tag, err := d.store.pool.Exec(ctx, useSQL, d.args...)
	if err != nil {
		return replayStoreError(err)
	}
	if tag.RowsAffected() == 0 {
		return Replayed()
	}
	return nil
}

// Sweep deletes the records whose exp is before now, and says how many.
func (s *PGReplays) Sweep(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "client_assertion_jtis", "expires_at < $1", now)
}
