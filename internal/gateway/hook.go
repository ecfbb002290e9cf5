package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// hookTimeout bounds a call of the Company's approval hook.
const hookTimeout = 10 * time.Second

// errHook: the approval hook did not say yes or no. Nothing was recorded,
// so the Personal Agent can send the same approval again.
var errHook = httpx.Errorf(CodeOriginUnreachable,
	"the Company could not check the approval just now; nothing was performed: send the same approval again later")

// askHook asks the Company's approval hook, when it has one, about an
// approval that passed the checks, before anything is recorded or
// performed (DESIGN.md): 204 goes ahead (nil), a decline body declines
// and retires the revision for good. Any other answer is an error and
// records nothing.
func (g *Gateway) askHook(ctx context.Context, act *operations.Action, op *operations.Operation,
	a *operations.Approval) (*operations.Decline, error) {
	co := act.Company
	hook := co.Settings.Operations.ApprovalHook
	if hook == "" {
		return nil, nil
	}
	jwt, err := verified.Sign(ctx, g.opts.Keys, co.ID, verified.Claims{
		Issuer: g.opts.URLs.Identifier(co), Audience: hook, Facts: *act.Facts, Method: http.MethodPost,
		OperationID: a.OperationID, Revision: a.Revision, Approver: a.Approver,
	}, g.opts.Now())
	if err != nil {
		return nil, err
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
	req.Header.Set(verified.Header, jwt)
	resp, err := g.transport.RoundTrip(req)
	if err != nil {
		// The hook's URL may carry a secret: only its host is logged.
		httpx.Logger(ctx).WarnContext(ctx, "operations: approval hook unreachable", "operation_id", a.OperationID,
			"host", req.URL.Host, "err", withoutURL(err))
		return nil, errHook
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxProposal))
	switch {
	case err != nil:
		httpx.Logger(ctx).WarnContext(ctx, "operations: approval hook answer unreadable", "operation_id", a.OperationID, "err", err)
		return nil, errHook
	case resp.StatusCode == http.StatusNoContent:
		return nil, nil
	case isType(resp.Header.Get("Content-Type"), operations.DeclineType):
		if err := g.opts.Operations.Decline(ctx, co.ID, a.OperationID, a.Revision, g.opts.Now()); err != nil {
			return nil, err
		}
		return operations.ParseDecline(raw), nil
	}
	httpx.Logger(ctx).WarnContext(ctx, "operations: approval hook answered neither 204 nor a decline",
		"operation_id", a.OperationID, "status", fmt.Sprint(resp.StatusCode))
	return nil, errHook
}
