package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/poppyhost/poppyhost/internal/operations"
)

// SettleArgs is the job that finishes an approved operation whose outcome
// is unknown (extension 7): it is scheduled with every claim, for after
// the call's timeout, and while the operation is still performing it sends
// the same request with the same Idempotency-Key until the origin answers.
// A call that finished first leaves it nothing to do.
type SettleArgs struct {
	CompanyID   int64  `json:"company_id"`
	OperationID string `json:"operation_id"`
}

// Kind names the job in River.
func (SettleArgs) Kind() string { return "gateway_settle_operation" }

// settleAttempts and River's backoff retry an origin for about two days.
const settleAttempts = 20

// InsertOpts keeps one settle per operation waiting.
func (SettleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: settleAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable,
		rivertype.JobStateScheduled,
	}}}
}

// settleMargin is how long after an approved call's timeout its settle
// job looks at it.
const settleMargin = 5 * time.Second

// scheduleSettle inserts the operation's settle job in tx.
func (g *Gateway) scheduleSettle(ctx context.Context, tx pgx.Tx, k *call, a *operations.Approval) error {
	at := g.opts.Now().Add(time.Duration(k.api.TimeoutSeconds)*time.Second + settleMargin)
	_, err := g.inserter.InsertTx(ctx, tx, SettleArgs{CompanyID: k.co.ID, OperationID: a.OperationID},
		&river.InsertOpts{ScheduledAt: at})
	return err
}

type settleWorker struct {
	river.WorkerDefaults[SettleArgs]
	g *Gateway
}

func (w *settleWorker) Work(ctx context.Context, job *river.Job[SettleArgs]) error {
	return w.g.settle(ctx, job.Args)
}

// AddJobs registers the settle job's worker.
func AddJobs(workers *river.Workers, g *Gateway) {
	river.AddWorker(workers, &settleWorker{g: g})
}

// settle finishes one operation, or returns an error for River to retry.
func (g *Gateway) settle(ctx context.Context, a SettleArgs) error {
	u, err := g.opts.Operations.Performing(ctx, a.CompanyID, a.OperationID)
	if err != nil || u == nil {
		return err
	}
	var slug string
	if err := g.opts.Pool.QueryRow(ctx, `SELECT slug FROM companies WHERE id = $1`, a.CompanyID).Scan(&slug); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}
	co, err := g.opts.Companies.Get(ctx, slug)
	if err != nil {
		return err
	}
	api, err := g.opts.Store.GetAPI(ctx, co.ID, u.Target)
	if err != nil {
		// An API removed meanwhile cannot be asked; the operation stays
		// performing, never reported as failed.
		return river.JobCancel(fmt.Errorf("gateway: settle %s: %w", a.OperationID, err))
	}
	// A call claimed after this job was scheduled may still be waiting
	// for the origin: give it its time first.
	if wait := u.Since.Add(time.Duration(api.TimeoutSeconds)*time.Second + settleMargin).Sub(g.opts.Now()); wait > 0 {
		return river.JobSnooze(wait)
	}
	origin, err := url.Parse(api.Origin)
	if err != nil {
		return river.JobCancel(err)
	}
	k := &call{co: co, api: api, target: originTarget(origin, u.Request.Path, u.Request.Query), rest: u.Request.Path,
		facts: u.Facts}
	resp, err := g.send(ctx, k, u.Approval, u.Request)
	if err != nil {
		return fmt.Errorf("gateway: settle %s: %w", a.OperationID, err)
	}
	_, err = g.conclude(ctx, k, u.Approval, resp)
	return err
}
