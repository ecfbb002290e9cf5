package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// destination is where an operation's request is performed: an API's
// origin, a tool's URL or the website's origin.
type destination struct {
	// audience is the aud of Poppy-Verified: the origin's base URL.
	audience string
	target   *url.URL
	// api and tool name what the call is for in Poppy-Verified.
	api, tool   string
	timeout     time.Duration
	maxResponse int64
}

// errGone: what an operation was proposed for has been removed.
var errGone = errors.New("gateway: the operation's API or tool is no longer registered")

// destination returns where the request of an operation proposed at iface
// for target goes.
func (g *Gateway) destination(ctx context.Context, co *tenant.Company, iface, target string,
	req *operations.Request) (*destination, error) {
	switch iface {
	case operations.InterfaceAPI, operations.InterfaceConversation:
		name := target
		if iface == operations.InterfaceConversation {
			name = req.API
		}
		api, err := g.opts.Store.GetAPI(ctx, co.ID, name)
		if errors.Is(err, ErrNotFound) {
			return nil, errGone
		}
		if err != nil {
			return nil, err
		}
		origin, err := url.Parse(api.Origin)
		if err != nil {
			return nil, err
		}
		return &destination{audience: api.Origin, target: originTarget(origin, req.Path, req.Query), api: api.Name,
			timeout: time.Duration(api.TimeoutSeconds) * time.Second, maxResponse: api.MaxResponseBytes}, nil
	case operations.InterfaceMCP:
		t, err := g.opts.Store.GetTool(ctx, co.ID, target)
		if errors.Is(err, ErrNotFound) {
			return nil, errGone
		}
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(t.URL)
		if err != nil {
			return nil, err
		}
		// As an unapproved call states it in Poppy-Verified (toolPath).
		if u.Path == "" {
			u.Path = "/"
		}
		return &destination{audience: t.URL, target: u, tool: t.Name, timeout: toolTimeout(t),
			maxResponse: MaxToolResponseBytes}, nil
	case operations.InterfaceWeb:
		web := co.Settings.Web
		origin, err := url.Parse(web.Origin)
		if web.Origin == "" || err != nil {
			return nil, errGone
		}
		return &destination{audience: web.Origin, target: originTarget(origin, req.Path, req.Query),
			timeout: websiteTimeout, maxResponse: websiteMaxStoredBytes}, nil
	}
	return nil, fmt.Errorf("gateway: operations at %q are not performed here", iface)
}

// websiteMaxStoredBytes bounds the website's answer to an approved
// request, which is kept for every retry.
const websiteMaxStoredBytes = 10 << 20

// Perform checks approval a of act's request (extension 6, checks 1-3),
// asks the Company's approval hook, and performs the operation at most
// once (extension 7): one conditional UPDATE picks the performer among
// concurrent retries, which sends the stored request to the origin with
// Idempotency-Key {operation_id}.{revision} and the approval in
// Poppy-Verified, and keeps the answer for every later retry. A website's
// approval reached the hook where it was recorded, so it is not asked
// again here.
func (g *Gateway) Perform(ctx context.Context, act *operations.Action, a *operations.Approval) (*operations.Outcome, error) {
	store, co := g.opts.Operations, act.Company
	checked, err := store.Check(ctx, co.ID, act.Owner, act.Interface, act.Target, a, act.Request, g.opts.Now())
	if err != nil {
		return nil, err
	}
	switch checked.Verdict {
	case operations.CannotApprove:
		return &operations.Outcome{Kind: operations.OutcomeUnapproved}, nil
	case operations.NeedsAccount:
		return &operations.Outcome{Kind: operations.OutcomeNeedsAccount}, nil
	case operations.Performed:
		return &operations.Outcome{Kind: operations.OutcomePerformed, Response: checked.Response}, nil
	case operations.Performing:
		return &operations.Outcome{Kind: operations.OutcomePerforming}, nil
	case operations.Stale:
		return &operations.Outcome{Kind: operations.OutcomeStale}, nil
	}
	// The revision's own request is what is performed: the same as
	// act's, by check 3, or a conversation's.
	req := checked.Request
	dest, err := g.destination(ctx, co, act.Interface, act.Target, req)
	if err != nil {
		return nil, err
	}
	if act.Interface == operations.InterfaceConversation {
		// The Company Agent named the request: it must be one the gateway
		// would forward for this Personal Agent (CheckRequest).
		if err := g.CheckRequest(ctx, co, req, act.Facts); err != nil {
			return nil, err
		}
	}
	if act.Interface != operations.InterfaceWeb {
		decline, err := g.askHook(ctx, act, checked.Operation, a)
		if err != nil {
			return nil, err
		}
		if decline != nil {
			return &operations.Outcome{Kind: operations.OutcomeDeclined, Decline: decline}, nil
		}
	}
	won, err := store.Claim(ctx, co.ID, a, act.Facts, g.opts.Now(), func(ctx context.Context, tx pgx.Tx) error {
		at := g.opts.Now().Add(dest.timeout + settleMargin)
		_, err := g.inserter.InsertTx(ctx, tx, SettleArgs{CompanyID: co.ID, OperationID: a.OperationID},
			&river.InsertOpts{ScheduledAt: at})
		return err
	})
	if err != nil {
		return nil, err
	}
	if !won {
		// Another retry won meanwhile: the operation as it stands now.
		checked, err := store.Check(ctx, co.ID, act.Owner, act.Interface, act.Target, a, act.Request, g.opts.Now())
		if err != nil {
			return nil, err
		}
		switch checked.Verdict {
		case operations.Performed:
			return &operations.Outcome{Kind: operations.OutcomePerformed, Response: checked.Response}, nil
		case operations.Performing:
			return &operations.Outcome{Kind: operations.OutcomePerforming}, nil
		case operations.CannotApprove, operations.NeedsAccount:
			return &operations.Outcome{Kind: operations.OutcomeUnapproved}, nil
		}
		// Replaced, declined or expired meanwhile: check 3 fails.
		return &operations.Outcome{Kind: operations.OutcomeStale}, nil
	}
	// The outcome is recorded whatever happens to the request that asked.
	ctx = context.WithoutCancel(ctx)
	resp, err := g.send(ctx, co, dest, act.Facts, a, req)
	if err != nil {
		// Unknown whether it took effect: still performing (extension 7)
		// until the settle job learns the outcome.
		httpx.Logger(ctx).WarnContext(ctx, "operations: approved call did not complete", "interface", act.Interface,
			"target", act.Target, "operation_id", a.OperationID, "err", withoutURL(err))
		return &operations.Outcome{Kind: operations.OutcomePerforming}, nil
	}
	return g.conclude(ctx, act, a, req, resp)
}

// conclude records what the origin answered an approved request: new terms
// (a proposal) and a decline perform nothing and return the operation to
// proposed, the declined revision for good; any other answer is stored as
// the operation's. New terms are proposed for act's owner, for req, when
// a request waits for them (a settle job's does not: req is nil).
func (g *Gateway) conclude(ctx context.Context, act *operations.Action, a *operations.Approval, req *operations.Request,
	resp *operations.Response) (*operations.Outcome, error) {
	store, co, now := g.opts.Operations, act.Company, g.opts.Now()
	switch {
	case isType(resp.ContentType, operations.ProposalType):
		if err := store.Release(ctx, co.ID, a.OperationID, a.Revision, false, now); err != nil {
			return nil, err
		}
		p, err := operations.ParseProposal(resp.Body)
		if err != nil {
			httpx.Logger(ctx).WarnContext(ctx, "operations: unusable proposal", "interface", act.Interface,
				"target", act.Target, "err", err)
			return nil, errUnusableProposal
		}
		if req == nil {
			return &operations.Outcome{Kind: operations.OutcomeNewTerms}, nil
		}
		op, err := store.Propose(ctx, co.ID, act.Owner, act.Interface, act.Target, p, req, a.Revision, now)
		if err != nil {
			return nil, err
		}
		return &operations.Outcome{Kind: operations.OutcomeNewTerms, Operation: op}, nil
	case isType(resp.ContentType, operations.DeclineType):
		if err := store.Release(ctx, co.ID, a.OperationID, a.Revision, true, now); err != nil {
			return nil, err
		}
		return &operations.Outcome{Kind: operations.OutcomeDeclined, Decline: operations.ParseDecline(resp.Body)}, nil
	}
	if err := store.Performed(ctx, co.ID, a.OperationID, resp, now); err != nil {
		return nil, err
	}
	return &operations.Outcome{Kind: operations.OutcomePerformed, Response: resp}, nil
}

// errUnusableProposal: the origin asked for approval in a form the
// platform cannot use.
var errUnusableProposal = httpx.Errorf(CodeOriginUnreachable,
	"the Company's origin asked for approval in a form the platform cannot use")

// send sends an approved request to its destination and reads the whole
// answer. An error means the outcome is unknown.
func (g *Gateway) send(ctx context.Context, co *tenant.Company, d *destination, facts *verified.Facts,
	a *operations.Approval, req *operations.Request) (*operations.Response, error) {
	jwt, err := verified.Sign(ctx, g.opts.Keys, co.ID, verified.Claims{
		Issuer: g.opts.URLs.Identifier(co), Audience: d.audience, Facts: *facts, API: d.api, Tool: d.tool,
		Method: req.Method, Path: d.target.EscapedPath(),
		OperationID: a.OperationID, Revision: a.Revision, Approver: a.Approver,
	}, g.opts.Now())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, req.Method, d.target.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, err
	}
	if req.ContentType != "" {
		out.Header.Set("Content-Type", req.ContentType)
	}
	accept := "application/json"
	if req.Accept != "" {
		accept = req.Accept
	}
	out.Header.Set("Accept", accept)
	if req.Host != "" {
		// A website's request: its origin learns the Company domain, as
		// the website proxy tells it (website.go).
		out.Header.Set("X-Forwarded-Host", req.Host)
		out.Header.Set("X-Forwarded-Proto", "https")
	}
	out.Header.Set(verified.Header, jwt)
	// One key per approved revision (DESIGN.md): an origin that proposed
	// new terms is not stuck replaying its old answer.
	out.Header.Set("Idempotency-Key", a.OperationID+"."+a.Revision)
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 {
		// The origin failed: whether it performed is unknown.
		return nil, errors.New("gateway: origin answered " + strconv.Itoa(resp.StatusCode))
	}
	stored := &operations.Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		Location: resp.Header.Get("Location"), ETag: resp.Header.Get("ETag")}
	body, err := io.ReadAll(io.LimitReader(resp.Body, d.maxResponse+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > d.maxResponse {
		// The origin answered: the outcome is known, its body too large to
		// keep. Its status, Location and ETag say what was done.
		httpx.Logger(ctx).WarnContext(ctx, "operations: answer to an approved call too large to keep; its body is dropped",
			"operation_id", a.OperationID, "limit", d.maxResponse)
		if !isType(stored.ContentType, operations.ProposalType) && !isType(stored.ContentType, operations.DeclineType) {
			stored.ContentType = ""
		}
		return stored, nil
	}
	stored.Body = body
	return stored, nil
}

// withoutURL drops the URL from a request error for logs: a query can
// carry what must not be logged.
func withoutURL(err error) error {
	if u := (*url.Error)(nil); errors.As(err, &u) {
		return u.Err
	}
	return err
}
