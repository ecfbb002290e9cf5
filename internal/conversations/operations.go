package conversations

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Operations in conversations (extension 4, 6 and 7 "Conversations";
// DESIGN.md, "Company Agent"): the Company Agent proposes an operation in a
// message through the Company API, the platform sends the Personal Agent
// the operation, a Personal Agent message's approval is performed at most
// once by the operations engine, and the outcome goes to the
// Company Agent's webhook. docs/operations-extension.md, "Conversations".

// CheckRequest reports whether req, the request a Company Agent's proposal
// names, is one the gateway would forward: nil, or an *httpx.Error saying
// what is wrong (or another error when it cannot tell).
type CheckRequest func(ctx context.Context, co *tenant.Company, req *operations.Request) error

// OperationStore is what conversations need of operations.Store.
type OperationStore interface {
	State(ctx context.Context, companyID int64, id, revision string) (*operations.RevisionState, error)
	ProposeTx(ctx context.Context, tx pgx.Tx, companyID int64, owner operations.Owner, iface, target string,
		p *operations.Proposal, req *operations.Request, avoid string, now time.Time) (*operations.Operation, error)
}

// OperationsOptions turn operations on in conversations.
type OperationsOptions struct {
	CheckRequest CheckRequest
	Operations   OperationStore
	// Performer checks approvals and performs them (the operations engine).
	Performer operations.Performer
}

// Operations carries operations in a Store's conversations
// (StoreOptions.Operations; nil leaves them off): it checks a proposal's
// request, inserts the job that performs an approval in the transaction
// that stores its message, and runs the jobs that perform approvals,
// watch operations left performing and deliver their outcomes.
type Operations struct {
	OperationsOptions
	delivery *Delivery
	pool     *pgxpool.Pool
	jobs     Inserter
	now      func() time.Time
}

// NewOperations returns operations support for conversations. delivery
// posts the outcomes to the Company Agent's webhook; its pool, job
// inserter and clock are the operations' too.
func NewOperations(o OperationsOptions, delivery *Delivery) *Operations {
	return &Operations{OperationsOptions: o, delivery: delivery, pool: delivery.opts.Pool,
		jobs: delivery.opts.Jobs, now: delivery.opts.Now}
}

// AddWorkers registers the workers of the operations' jobs.
func (o *Operations) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &performWorker{o: o})
	river.AddWorker(workers, &watchWorker{o: o})
	river.AddWorker(workers, &outcomeWorker{d: o.delivery})
}
