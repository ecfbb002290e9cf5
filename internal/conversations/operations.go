package conversations

import (
	"context"

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

// OperationStore is what conversations need of operations.Store beyond
// operations.ProposeTx.
type OperationStore interface {
	State(ctx context.Context, companyID int64, id, revision string) (*operations.RevisionState, error)
}

// OperationsOptions turn operations on in conversations.
type OperationsOptions struct {
	CheckRequest CheckRequest
	Operations   OperationStore
	// Performer checks approvals and performs them (the operations engine).
	Performer operations.Performer
}

// opsWiring is the Store's part of operations: set once at start.
type opsWiring struct {
	OperationsOptions
	delivery *Delivery
}

// EnableOperations turns operations on for the Store's conversations,
// with their jobs in workers; delivery inserts the jobs and posts the
// outcomes to the Company Agent's webhook. Call it before serving.
func EnableOperations(workers *river.Workers, s *Store, d *Delivery, o OperationsOptions) {
	s.ops = &opsWiring{OperationsOptions: o, delivery: d}
	addOperationJobs(workers, s)
}
