package operations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// hookTimeout bounds a call of the Company's approval hook.
const hookTimeout = 10 * time.Second

// ErrHook: the approval hook did not say yes or no. Nothing was recorded,
// so the Personal Agent can send the same approval again.
var ErrHook = httpx.Errorf(httpx.CodeOriginUnreachable,
	"the Company could not check the approval just now; nothing was performed: send the same approval again later")

// ErrClaimed: the approval hook declined, but another request had claimed
// the operation meanwhile; the decline is void, and the approval is
// answered as the operation stands (extension 7).
var ErrClaimed = errors.New("operations: the operation was claimed before the decline")

// AskHook asks the Company's approval hook, when it has one, about an
// approval that passed the checks, before anything is recorded or
// performed (DESIGN.md): 204 goes ahead (nil), a decline body declines
// and retires the revision for good, when nobody has claimed it
// (ErrClaimed otherwise). Any other answer is ErrHook and records nothing.
func (e *Engine) AskHook(ctx context.Context, act *Action, op *Operation, a *Approval) (*Decline, error) {
	co := act.Company
	hook := co.Settings.Operations.ApprovalHook
	if hook == "" {
		return nil, nil
	}
	body, err := json.Marshal(map[string]any{"interface": act.Interface, "target": act.Target,
		"operation": op, "approval": a})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	log := e.opts.Logger.With("operation_id", a.OperationID)
	resp, err := e.opts.Origins.Send(ctx, co, verified.Claims{
		Audience: hook, Facts: *act.Facts, Method: http.MethodPost,
		OperationID: a.OperationID, Revision: a.Revision, Approver: a.Approver, Terms: op.Terms,
	}, req)
	if err != nil {
		// The hook's URL may carry a secret: only its host is logged.
		log.WarnContext(ctx, "operations: approval hook unreachable", "host", req.URL.Host, "err", withoutURL(err))
		return nil, ErrHook
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxProposalBytes))
	switch {
	case err != nil:
		log.WarnContext(ctx, "operations: approval hook answer unreadable", "err", err)
		return nil, ErrHook
	case resp.StatusCode == http.StatusNoContent:
		return nil, nil
	case httpx.IsMediaType(resp.Header.Get("Content-Type"), DeclineType):
		d := ParseDecline(raw)
		ok, err := e.opts.Store.DeclineUnclaimed(context.WithoutCancel(ctx), co.ID, a.OperationID, a.Revision, d,
			e.opts.Now())
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, ErrClaimed
		}
		e.metrics.declines[declinedByHook].Inc()
		return d, nil
	}
	log.WarnContext(ctx, "operations: approval hook answered neither 204 nor a decline",
		"status", fmt.Sprint(resp.StatusCode))
	return nil, ErrHook
}
