package operations

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: every few seconds, giving each
// claim whose send lease lapsed its settle job (SettleDue); every hour,
// forgetting operations past their expires_at (extension 7: remembered at
// least until then, and while they are being performed), then giving each
// claim stalled for longer than stalledAfter a settle job if it has none
// (Rescue).
func (e *Engine) Sweeps() []jobs.Sweep {
	return []jobs.Sweep{{Name: "operations_settle_due", Every: settleDueEvery, Run: e.SettleDue},
		{Name: "operations_sweep", Every: time.Hour,
			Run: func(ctx context.Context, now time.Time) (int64, error) {
				n, err := e.opts.Store.Sweep(ctx, now)
				if err != nil {
					return n, err
				}
				return n, e.Rescue(ctx, now.Add(-stalledAfter))
			}}}
}

// settleDueEvery is how often SettleDue runs: a claim whose request did
// not conclude it is settled within this long after its lease lapses
// (and River's fetch), as when its job was scheduled for the lapse.
const settleDueEvery = 5 * time.Second

// stalledAfter is how long past its send lease a claim may wait for its
// settle job before the sweep makes sure it has one.
const stalledAfter = time.Hour

// SettleDue gives each claim still performing whose send lease lapsed in
// the last stalledAfter, and that has no settle job yet, its settle job,
// and returns how many it gave one. A claim's job is not inserted with the
// claim: nearly every claim is concluded by the request that made it,
// before its lease lapses, and a job inserted with each would cost every
// approved request River's insert and, later, a run that finds nothing to
// do (docs/decisions.md). The job and the mark that the claim has one
// (settle_claim) commit together, sweepBatch claims at a time; a claim
// whose job was lost all the same is Rescue's.
func (e *Engine) SettleDue(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for {
		var n int
		err := db.InTx(ctx, e.opts.Store.pool, func(tx pgx.Tx) error {
			due, err := e.opts.Store.markDue(ctx, tx, now, sweepBatch)
			if err != nil || len(due) == 0 {
				return err
			}
			n = len(due)
			_, err = e.opts.Jobs.InsertManyTx(ctx, tx, settleParams(due))
			return err
		})
		total += int64(n)
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// settleParams are the settle jobs of claims.
func settleParams(claims []StalledClaim) []river.InsertManyParams {
	params := make([]river.InsertManyParams, len(claims))
	for i, c := range claims {
		params[i] = river.InsertManyParams{Args: SettleArgs{CompanyID: c.CompanyID, OperationID: c.OperationID,
			Claim: c.Claim}}
	}
	return params
}

// Rescue gives each claim still performing whose send lease lapsed
// before before a settle job, when it has none (a job is unique per claim,
// so one still queued or running is left alone): however a job was lost,
// each claim keeps one path to an end. It takes the sweepBatch oldest; the
// next sweep takes the rest.
func (e *Engine) Rescue(ctx context.Context, before time.Time) error {
	stalled, err := e.opts.Store.Stalled(ctx, before, sweepBatch)
	if err != nil || len(stalled) == 0 {
		return err
	}
	_, err = e.opts.Jobs.InsertMany(ctx, settleParams(stalled))
	return err
}

// Sweep forgets every operation whose expires_at is before now and that
// is not being performed or unknown, with its revisions, and returns how many. An
// operation's expires_at is the latest of its revisions' and of when it
// was performed, so an approval is remembered as long as it can be sent.
// It deletes in batches (db.DeleteInBatches), so a large backlog never
// holds one long lock.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "operations",
		"expires_at < $1 AND status NOT IN ('performing', 'unknown')", now)
}

// sweepBatch is how many claims one batch of SettleDue, or one Rescue,
// gives a settle job.
const sweepBatch = 1000
