package operations

import (
	"context"

	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Action is a request that carries an approval, as one interface received
// it: what the approval is checked against, and what is performed.
type Action struct {
	Company *tenant.Company
	// Interface is where the request came: InterfaceAPI, InterfaceMCP,
	// InterfaceConversation or InterfaceWeb.
	Interface string
	// Target names what was asked at Interface: an API's or tool's name,
	// a conversation's ID, or the website.
	Target string
	Owner  Owner
	Facts  *verified.Facts
	// Request is what the request asks the origin; in a conversation, the
	// request the proposal named.
	Request *Request
	// Route, when set, is where Request goes as the interface found it
	// for this very request (the API proxy's API); nil asks the Router.
	Route *Route
}

// OutcomeKind says what became of an approval.
type OutcomeKind int

// The outcomes, in the extension's order of responses (6, 7).
const (
	// OutcomeUnapproved: check 1 failed; the request is handled as one
	// without an approval.
	OutcomeUnapproved OutcomeKind = iota
	// OutcomeNeedsAccount: a signed-out Session of the owner approves an
	// account's operation: a challenge for the account.
	OutcomeNeedsAccount
	// OutcomeStale: check 3 failed; the interface proposes anew, never
	// with the revision the approval named.
	OutcomeStale
	// OutcomePerforming: being performed, or its outcome is unknown: 503
	// with Retry-After, or the interface's equivalent, never a failure.
	OutcomePerforming
	// OutcomePerformed: Response is the origin's stored answer.
	OutcomePerformed
	// OutcomeDeclined: the approval hook or the origin declined; nothing
	// was performed and the revision can never be approved again.
	OutcomeDeclined
	// OutcomeNewTerms: the origin answered the approved request with new
	// terms; nothing was performed and Operation is the new revision.
	OutcomeNewTerms
	// OutcomeRetry: the origin performed nothing and asked for the request
	// again later; the revision can still be approved, and the Personal
	// Agent sends the same approval again after RetryAfter seconds
	// (extension 7: a request that failed is sent again).
	OutcomeRetry
)

// Outcome is what became of an approval.
type Outcome struct {
	Kind       OutcomeKind
	Response   *Response
	Decline    *Decline
	Operation  *Operation
	RetryAfter int
}

// Performer checks approvals and performs approved operations at most
// once (extension 6, 7).
type Performer interface {
	Perform(ctx context.Context, act *Action, a *Approval) (*Outcome, error)
}
