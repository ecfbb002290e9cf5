package website

import (
	"errors"
	"net/http"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// OperationsPath is operations.EndpointPath, where the Personal Agent
// approves website operations under {issuer} (Public).
const OperationsPath = operations.EndpointPath

// maxRefBody bounds a request to OperationsPath: {"ref"} and little more.
const maxRefBody = 8 << 10

// serveOperations serves POST {issuer}/poppy/operations (extension 4
// and 6, "Websites") after the Session and token checks, for a Company
// whose website uses operations. Without Poppy-Approval it answers for
// the body's ref: its status once approved, the operation to approve, a
// challenge for the account, or invalid_request; a request that does not
// declare the extension gets extension_required (extension 2). With one
// it makes checks 1 to 3, asks the approval hook, and records the
// approval (204); nothing is performed until the browser asks again.
func (s *Proxy) serveOperations(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	co := tenant.FromContext(ctx)
	var body struct {
		Ref string `json:"ref"`
	}
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxRefBody}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	a, err := operations.ParseApprovalHeader(r.Header.Values(operations.ApprovalHeader))
	if err != nil {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "%s", err.Error()))
		return
	}
	sess := sessions.FromContext(ctx)
	if a == nil && !operations.Declared(sess, r.Header.Values(operations.ExtensionsHeader)) {
		// An approval declares the extension; without one, no operation
		// goes to a request that does not (extension 2).
		w.Header().Set("Cache-Control", "no-store")
		httpx.WriteError(w, r, operations.ExtensionRequired(
			"this endpoint answers only requests that declare the operations extension, version 3"))
		return
	}
	id, rev, ok := operations.ParseRef(body.Ref)
	if !ok {
		writeUnusableRef(w, r)
		return
	}
	grant := bearer.FromContext(ctx)
	owner := operations.Owner{ClientID: sess.ClientID, UserID: sess.UserID}
	if grant != nil {
		owner.AccountID = grant.AccountID
	}
	if a != nil {
		act := &operations.Action{Company: co, Interface: operations.InterfaceWeb, Target: WebTarget, Owner: owner,
			Facts: origin.Facts(sess, grant)}
		if s.approveWeb(w, r, act, id, rev, a) {
			return
		}
	}
	s.answerRef(w, r, co, owner, id, rev)
}

// approveWeb makes the checks of extension 6 for approval a sent with ref
// {id}.{rev}, and records it. It reports false when the request is to be
// answered as one without an approval: check 1 or 3 failed.
func (s *Proxy) approveWeb(w http.ResponseWriter, r *http.Request, act *operations.Action, id, rev string,
	a *operations.Approval) bool {
	ctx, store, co, now := r.Context(), s.opts.Operations, act.Company, s.opts.Now()
	op, err := store.Lookup(ctx, co.ID, a.OperationID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return true
	}
	// An unknown operation fails check 3.
	if op == nil {
		return false
	}
	// Check 1.
	if ok, challenge := approvable(op, act.Owner); !ok {
		if challenge {
			s.challenge(w, r, co)
		}
		return challenge
	}
	// Check 2.
	if op.Status != operations.StatusProposed {
		writeWebStatus(w, a.OperationID, webStatus(op.Status))
		return true
	}
	// Check 3: the ref's operation and a revision it was returned with;
	// the approval names its current, unexpired revision.
	known, _, err := store.RevisionOf(ctx, co.ID, id, rev)
	if err != nil {
		httpx.WriteError(w, r, err)
		return true
	}
	if !known || a.OperationID != id || a.Revision != op.Current.Revision || op.Retired || !now.Before(op.Current.ExpiresAt) {
		return false
	}
	if op.Approved {
		// The same revision approved again: recorded already.
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	decline, err := s.opts.Engine.AskHook(ctx, act, op.Current, a)
	if errors.Is(err, operations.ErrClaimed) {
		// Claimed meanwhile: the lookup says how it stands.
		return false
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return true
	}
	if decline != nil {
		// Nothing recorded; askHook retired the revision.
		httpx.WriteError(w, r, operations.Declined(a, decline))
		return true
	}
	recorded, err := store.Record(ctx, co.ID, a, act.Facts, now)
	if err != nil {
		httpx.WriteError(w, r, err)
		return true
	}
	if !recorded {
		// Replaced, expired or claimed meanwhile.
		return false
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// approvable says whether owner can approve website operation op
// (extension 3, "Who can approve it"), and when not, whether it is a
// signed-out Session of the same Personal Agent and User, which gets a
// challenge for the account's operation.
func approvable(op *operations.WebOperation, owner operations.Owner) (ok, challenge bool) {
	if op.Interface != operations.InterfaceWeb || op.Owner.ClientID != owner.ClientID || op.Owner.UserID != owner.UserID {
		return false, false
	}
	if op.Owner.AccountID == owner.AccountID {
		return true, false
	}
	return false, owner.AccountID == 0
}

// challenge asks a signed-out Session to sign in to the account an
// operation belongs to (extension 3).
func (s *Proxy) challenge(w http.ResponseWriter, r *http.Request, co *tenant.Company) {
	bearer.WriteError(w, r, &bearer.Challenge{Description: "this operation belongs to an account: sign in to approve it",
		ResourceMetadata: s.opts.Tokens.MetadataURL(co, bearer.Resource{})})
}

// answerRef answers for ref {id}.{rev} without an approval (extension 4
// and 6): the operation's status once approved, the current revision to
// approve, a challenge for the account, or invalid_request for a ref the
// Session cannot use.
func (s *Proxy) answerRef(w http.ResponseWriter, r *http.Request, co *tenant.Company, owner operations.Owner,
	id, rev string) {
	ctx, store := r.Context(), s.opts.Operations
	op, err := store.Lookup(ctx, co.ID, id)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if op == nil {
		writeUnusableRef(w, r)
		return
	}
	if ok, challenge := approvable(op, owner); !ok {
		if challenge {
			s.challenge(w, r, co)
		} else {
			writeUnusableRef(w, r)
		}
		return
	}
	known, declined, err := store.RevisionOf(ctx, co.ID, id, rev)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	switch {
	case !known:
		writeUnusableRef(w, r)
	case op.Status != operations.StatusProposed:
		writeWebStatus(w, id, webStatus(op.Status))
	case declined != nil:
		// Declined where it was recorded or when the browser's request was
		// to perform it: the Personal Agent learns so (extension 6), and
		// does not send that approval again.
		w.Header().Set("Cache-Control", "no-store")
		httpx.WriteError(w, r, operations.Declined(&operations.Approval{OperationID: id, Revision: rev}, declined))
	case op.Retired || !s.opts.Now().Before(op.Current.ExpiresAt):
		writeUnusableRef(w, r)
	case op.Approved:
		writeWebStatus(w, id, operations.StatusApproved)
	default:
		w.Header().Set("Cache-Control", "no-store")
		httpx.WriteError(w, r, operations.ApprovalRequired(op.Current))
	}
}

// webStatus is the lookup status of an operation's state: an unknown
// outcome is performing (extension 6: "or doesn't yet know whether it
// took effect").
func webStatus(state string) string {
	if state == operations.StatusPerformed {
		return state
	}
	return operations.StatusPerforming
}

// writeWebStatus is the lookup answer of an approved operation.
func writeWebStatus(w http.ResponseWriter, id, status string) {
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"operation_id": id, "status": status})
}

// writeUnusableRef answers a ref the Session cannot use: not returned by
// the Company, expired, or one it cannot approve (extension 4).
func writeUnusableRef(w http.ResponseWriter, r *http.Request) {
	httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest,
		"the ref is not one this Session can use; have the browser make the request again for a new one"))
}
