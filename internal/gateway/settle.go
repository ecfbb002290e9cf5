package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
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

// settleAttempts and River's backoff retry an origin for about six and a half days (attempt⁴ seconds apart).
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
	co, err := g.opts.Companies.GetByID(ctx, a.CompanyID)
	if errors.Is(err, tenant.ErrNotFound) {
		// Deleted with its operations.
		return nil
	}
	if err != nil {
		return err
	}
	dest, err := g.destination(ctx, co, u.Interface, u.Target, u.Request)
	if errors.Is(err, errGone) {
		// What it was proposed for was removed meanwhile and cannot be
		// asked; the operation stays performing, never reported as failed.
		return river.JobCancel(fmt.Errorf("gateway: settle %s: %w", a.OperationID, err))
	}
	if err != nil {
		return err
	}
	// A call claimed after this job was scheduled may still be waiting
	// for the origin: give it its time first.
	if wait := u.Since.Add(dest.timeout + settleMargin).Sub(g.opts.Now()); wait > 0 {
		return river.JobSnooze(wait)
	}
	resp, err := g.send(ctx, co, dest, u.Facts, u.Approval, u.Request)
	if err != nil {
		return fmt.Errorf("gateway: settle %s: %w", a.OperationID, withoutURL(err))
	}
	// No one waits for new terms: the next request gets them.
	_, err = g.conclude(ctx, &operations.Action{Company: co, Interface: u.Interface, Target: u.Target}, u.Approval, nil, resp)
	return err
}
