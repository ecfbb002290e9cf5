package conversations

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Jobs of operations in conversations: perform an approval a message
// carried, watch an operation whose outcome was not known, and deliver an
// outcome to the Company Agent's webhook (operations_outcome.go).

// PerformArgs is the job that hands the approval of a Personal Agent
// message to the performer (extension 6) and records the outcome for the
// Company Agent. It is inserted with the message.
type PerformArgs struct {
	CompanyID      int64  `json:"company_id"`
	ConversationID string `json:"conversation_id"`
	// MessageID and EventID are the message that carried the approval.
	MessageID string               `json:"message_id"`
	EventID   string               `json:"event_id"`
	Approval  *operations.Approval `json:"approval"`
	// The Session that sent it: its Personal Agent, User and account (0
	// signed out), and the facts verified on its request.
	ClientID  string          `json:"client_id"`
	UserID    string          `json:"user_id"`
	AccountID int64           `json:"account_id"`
	Facts     *verified.Facts `json:"facts"`
}

// Kind names the job in River.
func (PerformArgs) Kind() string { return "conversations_perform_operation" }

// performAttempts bounds retries of an approval the performer could not
// handle (the approval hook not answering, the database failing): each
// retry is safe, since the performer performs at most once. The last
// attempt records an outcome whatever the error.
const performAttempts = 5

// InsertOpts bounds its attempts.
func (PerformArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: performAttempts}
}

// WatchArgs is the job that waits for an operation left performing (its
// outcome unknown; the operations engine's settle job finishes it) and tells the
// Company Agent how it ended.
type WatchArgs struct {
	PerformArgs
}

// Kind names the job in River.
func (WatchArgs) Kind() string { return "conversations_watch_operation" }

// Watching an operation left performing: first after watchFirst, then
// ever less often (backoff), until watchFor after the claim. The settle
// job retries an origin for about six and a half days.
const (
	watchFirst = 5 * time.Second
	watchFor   = 8 * 24 * time.Hour
)

// Backoff of a job that waits: the time waited so far, between
// minBackoff and maxBackoff, so the waits double.
const (
	minBackoff = time.Second
	maxBackoff = 5 * time.Minute
)

// backoff is how long to wait again after waiting for waited.
func backoff(waited time.Duration) time.Duration {
	return min(max(waited, minBackoff), maxBackoff)
}

type performWorker struct {
	river.WorkerDefaults[PerformArgs]
	o *Operations
}

// Timeout leaves room for the approval hook and the slowest origin an API
// may have; an approved call outlives it anyway (the performer records
// its outcome whatever happens to the job).
func (w *performWorker) Timeout(*river.Job[PerformArgs]) time.Duration { return 5 * time.Minute }

// NextRetry retries soon, doubling: the Personal Agent waits for the
// outcome.
func (w *performWorker) NextRetry(job *river.Job[PerformArgs]) time.Time {
	return time.Now().Add(minBackoff << max(job.Attempt-1, 0))
}

func (w *performWorker) Work(ctx context.Context, job *river.Job[PerformArgs]) error {
	return w.o.perform(ctx, job.Args, job.Attempt >= job.MaxAttempts)
}

type watchWorker struct {
	river.WorkerDefaults[WatchArgs]
	o *Operations
}

func (w *watchWorker) Work(ctx context.Context, job *river.Job[WatchArgs]) error {
	return w.o.watch(ctx, job.Args.PerformArgs, job.CreatedAt)
}

type outcomeWorker struct {
	river.WorkerDefaults[OutcomeArgs]
	d *Delivery
}

func (w *outcomeWorker) Work(ctx context.Context, job *river.Job[OutcomeArgs]) error {
	return w.d.deliverOutcome(ctx, job.Args)
}

// perform hands a message's approval to the performer: for a
// conversation, the operation must be the conversation's (check 3), and
// the request performed is the one its proposal named. A request the
// gateway would not forward for the approving Session is not_allowed at
// once; another error is retried, and on the last attempt becomes an
// outcome too.
func (o *Operations) perform(ctx context.Context, a PerformArgs, last bool) error {
	co, err := o.delivery.company(ctx, a.CompanyID)
	if err != nil || co == nil {
		return err
	}
	facts := a.Facts
	if facts == nil {
		facts = &verified.Facts{ClientID: a.ClientID, UserID: a.UserID, Scopes: []string{}}
	}
	out, err := o.Performer.Perform(ctx, &operations.Action{Company: co, Interface: operations.InterfaceConversation,
		Target: a.ConversationID, Owner: operations.Owner{ClientID: a.ClientID, UserID: a.UserID, AccountID: a.AccountID},
		Facts: facts}, a.Approval)
	var he *httpx.Error
	switch {
	case err == nil && out.Kind == operations.OutcomeRetry:
		// The origin performed nothing and asked again later: the job
		// sends the same approval again, as a Personal Agent would.
		if !last {
			return river.JobSnooze(time.Duration(out.RetryAfter) * time.Second)
		}
		return o.giveUp(ctx, a, errors.New("the Company's origin asked for the request again later, too often"))
	case err == nil:
		return o.recordOutcome(ctx, a, outcomeOf(a, out))
	case errors.As(err, &he) && he.Status() < http.StatusInternalServerError:
		// Retrying asks the same of the same API: it stays refused.
		oc := newOutcome(a, OutcomeNotAllowed)
		oc.Description = he.Description
		return o.recordOutcome(ctx, a, oc)
	case !last:
		return err
	}
	return o.giveUp(ctx, a, err)
}

// giveUp records the outcome of an approval whose last attempt failed
// with err: how its operation stands, when that says what became of it,
// else failed_to_check.
func (o *Operations) giveUp(ctx context.Context, a PerformArgs, err error) error {
	httpx.Logger(ctx).WarnContext(ctx, "conversations: approval not performed", "operation_id", a.Approval.OperationID,
		"err", err)
	st, stErr := o.Operations.State(ctx, a.CompanyID, a.Approval.OperationID, a.Approval.Revision)
	if stErr != nil {
		return stErr
	}
	if st != nil && (st.Status == "performing" || st.Status == "performed") {
		return o.recordOutcome(ctx, a, stateOutcome(a, st))
	}
	oc := newOutcome(a, OutcomeFailedToCheck)
	oc.Description = "the approval could not be checked or performed; nothing was performed"
	if he := (*httpx.Error)(nil); errors.As(err, &he) {
		oc.Description = he.Description
	}
	return o.recordOutcome(ctx, a, oc)
}

// watch looks at an operation left performing: still performing, it looks
// again later, ever less often (the job was made at created); once it
// left, the Company Agent is told how.
func (o *Operations) watch(ctx context.Context, a PerformArgs, created time.Time) error {
	st, err := o.Operations.State(ctx, a.CompanyID, a.Approval.OperationID, a.Approval.Revision)
	if err != nil || st == nil {
		return err
	}
	if st.Status == "performing" {
		if o.now().Sub(st.Since) > watchFor {
			// The settle job gave up: performing, as already told.
			return nil
		}
		return river.JobSnooze(backoff(o.now().Sub(created)))
	}
	return o.recordOutcome(ctx, a, stateOutcome(a, st))
}

// stateOutcome is the outcome of approval a as its revision stands.
func stateOutcome(a PerformArgs, st *operations.RevisionState) *OperationOutcome {
	oc := newOutcome(a, "")
	switch {
	case st.Status == "performing":
		oc.Status = OutcomePerforming
	case st.Status == "performed":
		oc.Status, oc.Response = OutcomePerformed, responseOf(st.Response)
	case st.Declined:
		oc.Status = OutcomeDeclined
	case st.Replaced:
		// The settle job proposes nothing: the Company Agent proposes
		// again for the new terms.
		oc.Status = OutcomeNewTerms
	default:
		// Released without being performed, declined or replaced.
		oc.Status = OutcomeStale
	}
	return oc
}
