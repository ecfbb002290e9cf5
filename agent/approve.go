package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// maxPerformingWait caps how long the agent waits between retries of an
// approval the Company is still performing.
const maxPerformingWait = 10 * time.Second

// failedWait is the first wait before sending an approval again after a
// 5xx or transport error; it doubles up to maxPerformingWait.
const failedWait = 500 * time.Millisecond

// maxAttempts caps the requests sent for one action.
const maxAttempts = 30

// ErrUncertain is returned when a Company answers the retry of an
// approval with an operation to approve after the first attempt's outcome
// was unknown (extension 7): it may have been performed, so the agent
// neither asks nor approves, and the caller must find out another way
// (for example by looking at the order).
var ErrUncertain = errors.New("agent: the approved request may have been performed, yet the Company asks for a new approval: check another way (for example the order) before approving anything")

// answer is how a Company answered one attempt of an action.
type answer struct {
	op         *Operation    // approval_required
	declined   *Declined     // approval_declined
	performing time.Duration // 503: retry the same approval after this
	// failed is a 5xx or transport error: with an approval sent, its
	// outcome is unknown and the same approval is sent again.
	failed error
	done   bool   // performed, or answered without operations
	reply  string // the Company's answer in a conversation
}

// OperationResult is the end of an action that may need approval.
type OperationResult struct {
	// Response is the last answer (API, website endpoint).
	Response *Response
	// Reply is the text of the Company's answer to the approval in a
	// conversation: what it says happened, not a promise that it did.
	Reply string
	// Operation is the last revision returned, if any.
	Operation *Operation
	// Approval is the approval that was sent last, if any.
	Approval *Approval
	// Attempts counts the requests sent.
	Attempts int
}

// approveLoop runs the extension's client side over one interface: send,
// on an operation ask the Approver and send again with the approval, on
// 503, 5xx or a transport error retry the same approval, on a decline
// stop and never resend it, on a new revision ask again (never on the
// same instruction), unless an earlier attempt's outcome is unknown.
func (s *Session) approveLoop(ctx context.Context, iface string, expected map[string]any, approver Approver,
	attempt func(ctx context.Context, approval *Approval) (answer, error)) (*OperationResult, error) {
	res := &OperationResult{}
	var approval *Approval
	uncertain := false
	backoff := failedWait
	for res.Attempts < maxAttempts {
		res.Attempts++
		ans, err := attempt(ctx, approval)
		if err != nil {
			return res, err
		}
		switch {
		case ans.done:
			res.Reply = ans.reply
			return res, nil
		case ans.declined != nil:
			s.agent.Recorder.Note("The Company declined the approval of %s: not performed; the approval is not sent again", ans.declined.OperationID)
			return res, ans.declined
		case ans.failed != nil && approval == nil:
			return res, nil // no approval involved: the answer as it is
		case ans.performing > 0 || ans.failed != nil:
			if approval == nil {
				return res, errors.New("agent: 503 to a request without an approval")
			}
			uncertain = true
			wait := min(ans.performing, maxPerformingWait)
			if ans.failed != nil {
				wait, backoff = backoff, min(2*backoff, maxPerformingWait)
				s.agent.Recorder.Note("The approved request failed (%v): its outcome is unknown, retry with the same approval in %v (extension 7)", ans.failed, wait)
			} else {
				s.agent.Recorder.Note("Still being performed: retry with the same approval in %v (extension 7)", wait)
			}
			if err := sleep(ctx, wait); err != nil {
				return res, err
			}
		case ans.op != nil:
			if err := ans.op.valid(s.agent.opts.Now()); err != nil {
				return res, err
			}
			if approval != nil && ans.op.OperationID == approval.OperationID && ans.op.Revision == approval.Revision {
				return res, fmt.Errorf("agent: the Company answered the approval with the revision it names (%s)", approval.Revision)
			}
			res.Operation = ans.op
			if uncertain {
				s.agent.Recorder.Note("Operation %s revision %s after an unknown outcome: not asked, not approved (extension 7)", ans.op.OperationID, ans.op.Revision)
				return res, ErrUncertain
			}
			ask := newAsk(s.Company, iface, ans.op, expected, approval != nil, s.agent.opts.Now())
			s.agent.Recorder.Note("Operation %s revision %s needs approval (%s): %s", ans.op.OperationID, ans.op.Revision, iface, ans.op.Summary)
			next, err := approver.Approve(ctx, ask)
			if err != nil {
				return res, err
			}
			if next == nil {
				s.agent.Recorder.Note("Not approved: the action was not performed")
				return res, ErrNotApproved
			}
			s.agent.Recorder.Note("Approved by the %s: sending the approval through the same interface", next.Approver)
			approval = next
			res.Approval = next
		default:
			return res, errors.New("agent: an answer the agent does not understand")
		}
	}
	return res, errors.New("agent: too many attempts")
}

// Call sends an API request (spec 7) and handles operations: a 403
// approval_required is decided by approver and sent again with
// Poppy-Approval; expected lists the terms the request asked for. A nil
// approver sends the request once and returns its answer as is.
func (s *Session) Call(ctx context.Context, r Request, expected map[string]any, approver Approver) (*OperationResult, error) {
	if approver == nil {
		resp, err := s.Do(ctx, r)
		return &OperationResult{Response: resp, Attempts: 1}, err
	}
	var last *Response
	res, err := s.approveLoop(ctx, "api", expected, approver, func(ctx context.Context, ap *Approval) (answer, error) {
		req := r
		req.Header = r.Header.Clone()
		if ap != nil {
			h, err := ap.Header()
			if err != nil {
				return answer{}, err
			}
			if req.Header == nil {
				req.Header = http.Header{}
			}
			req.Header.Set("Poppy-Approval", h)
			// An Idempotency-Key of the first request doesn't carry over.
			req.Header.Del("Idempotency-Key")
		}
		resp, err := s.Do(ctx, req)
		if err != nil {
			return failedAttempt(ap, err)
		}
		last = resp
		return classifyHTTP(resp)
	})
	if res != nil {
		res.Response = last
	}
	return res, err
}

// failedAttempt is a transport error: with an approval sent, its outcome
// is unknown (extension 7); without one, it is the caller's error.
func failedAttempt(ap *Approval, err error) (answer, error) {
	if ap == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return answer{}, err
	}
	return answer{failed: err}, nil
}

// classifyHTTP reads an API or endpoint answer (extension 4, 6, 7): only
// 2xx and 4xx answers are an outcome.
func classifyHTTP(resp *Response) (answer, error) {
	switch {
	case resp.Status == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		return answer{performing: max(retryAfter(resp.Header, time.Second), 100*time.Millisecond)}, nil
	case resp.Status >= 500:
		return answer{failed: fmt.Errorf("the Company answered %d", resp.Status)}, nil
	case resp.Status == http.StatusForbidden && resp.Error() == "approval_required":
		var body struct {
			Operation *Operation `json:"operation"`
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil || body.Operation == nil {
			return answer{done: true}, nil // a website's answer without the operation
		}
		return answer{op: body.Operation}, nil
	case resp.Status == http.StatusForbidden && resp.Error() == "approval_declined":
		d := &Declined{}
		if err := json.Unmarshal(resp.Body, d); err != nil {
			return answer{}, err
		}
		return answer{declined: d}, nil
	}
	return answer{done: true}, nil
}
