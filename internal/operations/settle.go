package operations

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// SettleArgs is the job that concludes one claim of an operation whose
// outcome is not known yet (extension 7). It is inserted with the claim,
// for when the claim's first send lease lapses; while the claim is still
// performing it takes the send lease (waiting for any send in flight to
// end) and sends the same request with the same Idempotency-Key until the
// origin's answer says what happened. A claim that concluded first leaves
// it nothing to do. When its attempts run out, or what the operation was
// proposed for is gone, the operation becomes unknown for the Company to
// resolve: a claim is never left performing with no path to an end.
type SettleArgs struct {
	CompanyID   int64  `json:"company_id"`
	OperationID string `json:"operation_id"`
	// Claim is the claim to conclude; jobs queued before claims had IDs
	// have none, and conclude whichever claim is performing.
	Claim string `json:"claim,omitempty"`
}

// Kind names the job in River: the name it had when the gateway owned it,
// which queued rows carry.
func (SettleArgs) Kind() string { return "gateway_settle_operation" }

// settleAttempts and River's backoff ask an origin for about six and a
// half days (attempt⁴ seconds apart).
const settleAttempts = 20

// InsertOpts keeps one live settle job per claim.
func (SettleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: settleAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable,
		rivertype.JobStateScheduled,
	}}}
}

type settleWorker struct {
	river.WorkerDefaults[SettleArgs]
	e *Engine
}

// Timeout outlasts the longest send: River never cuts a send short, and
// the lease, not the job, says when another send may start.
func (w *settleWorker) Timeout(*river.Job[SettleArgs]) time.Duration {
	return MaxSendTimeout + leaseMargin + 30*time.Second
}

func (w *settleWorker) Work(ctx context.Context, job *river.Job[SettleArgs]) error {
	return w.e.Settle(ctx, job.Args, job.Attempt >= job.MaxAttempts)
}

// AddWorkers registers the settle job's worker.
func (e *Engine) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &settleWorker{e: e})
}

// Settle concludes one claim, or returns an error for River to retry.
// last says this is the job's last attempt: a claim still unconcluded
// then becomes unknown.
func (e *Engine) Settle(ctx context.Context, args SettleArgs, last bool) error {
	store, now := e.opts.Store, e.opts.Now()
	claim := args.Claim
	if claim == "" {
		var err error
		if claim, err = store.claimOf(ctx, args.CompanyID, args.OperationID); err != nil || claim == "" {
			return err
		}
	}
	u, err := store.Performing(ctx, args.CompanyID, args.OperationID, claim)
	if err != nil || u == nil {
		return err
	}
	log := e.opts.Logger.With("company_id", args.CompanyID, "operation_id", args.OperationID)
	co, err := e.opts.Companies.GetByID(ctx, args.CompanyID)
	if errors.Is(err, tenant.ErrNotFound) {
		// Deleted with its operations.
		return nil
	}
	if err != nil {
		return err
	}
	route, err := e.route(ctx, co, u.Interface, u.Target, u.Request)
	if errors.Is(err, ErrGone) {
		// What it was proposed for was removed and cannot be asked.
		return e.giveUp(ctx, args, claim, "its API, tool or website is no longer registered")
	}
	if err != nil {
		return e.failed(ctx, args, claim, last, err)
	}
	ok, until, err := store.Lease(ctx, args.CompanyID, args.OperationID, claim, route.Timeout+leaseMargin, now)
	if err != nil {
		return e.failed(ctx, args, claim, last, err)
	}
	if !ok {
		if until.IsZero() {
			return nil // concluded meanwhile
		}
		// A send may still be in flight: never a second one with the same
		// key until its lease lapses.
		return river.JobSnooze(max(until.Sub(now), time.Second))
	}
	s := &sending{co: co, iface: u.Interface, target: u.Target, route: route, facts: u.Facts, approval: u.Approval,
		claim: claim, actionKey: u.ActionKey, req: u.Request, terms: u.Terms}
	e.metrics.settles.Inc()
	resp, err := e.send(ctx, s)
	if err != nil {
		return e.failed(ctx, args, claim, last, withoutURL(err))
	}
	out, err := e.conclude(ctx, s, resp, false)
	if err != nil {
		log.WarnContext(ctx, "operations: settle concluded with an error", "err", err)
		return nil
	}
	if out.Kind == OutcomePerforming {
		return e.failed(ctx, args, claim, last, errors.New("the origin's answer does not say whether it performed"))
	}
	return nil
}

// failed ends an attempt of a settle job that learned nothing: River
// retries it, and after the last attempt the operation becomes unknown.
func (e *Engine) failed(ctx context.Context, args SettleArgs, claim string, last bool, err error) error {
	if !last {
		return err
	}
	return e.giveUp(ctx, args, claim, err.Error())
}

// giveUp marks a claim's operation unknown, with a log line and a metric
// an alert can use: the Company resolves it (Resolve).
func (e *Engine) giveUp(ctx context.Context, args SettleArgs, claim, why string) error {
	ok, err := e.opts.Store.GiveUp(ctx, args.CompanyID, args.OperationID, claim, e.opts.Now())
	if err != nil || !ok {
		return err
	}
	e.metrics.unknown.Inc()
	e.opts.Logger.ErrorContext(ctx, "operations: outcome unknown; the Company must resolve the operation",
		"company_id", args.CompanyID, "operation_id", args.OperationID, "why", why)
	return nil
}
