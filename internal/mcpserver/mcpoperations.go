package mcpserver

// Operations at the hosted MCP server (extension 4, 6, 7, "MCP"): a tool
// whose origin answers with a proposal returns the operation as an error
// result; the same call with the approval in
// _meta["personalagentprotocol.org/approval"] performs it at most once.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// operationsOn reports whether the call can use operations: the Company
// offers them and the caller is a Poppy Session (an MCP client without
// one has no Personal Agent and User to own an operation).
func (c *toolCall) operationsOn() bool {
	return c.co.Settings.Operations.Enabled && c.sess != nil
}

func (c *toolCall) owner() operations.Owner {
	o := operations.Owner{ClientID: c.sess.ClientID, UserID: c.sess.UserID}
	if c.grant != nil {
		o.AccountID = c.grant.AccountID
	}
	return o
}

// declare records whether the request declares the extension; the
// origin learns it in Poppy-Verified's extensions, as at an API.
func (c *toolCall) declare(declared bool) {
	c.declared = declared
	if declared && c.sess != nil {
		c.facts.Extensions = operations.WithVersion(c.facts.Extensions)
	}
}

// carriesApproval reports whether any of calls carries an approval, which
// counts as declaring the extension (extension 2).
func carriesApproval(calls []calledTool) bool {
	return slices.ContainsFunc(calls, func(c calledTool) bool { return c.approval != nil })
}

// toolRequest is what a call of a tool asks: its arguments, compared by
// meaning (check 3). The tool's name is the operation's target.
func toolRequest(args []byte) *operations.Request {
	return &operations.Request{Method: http.MethodPost, ContentType: "application/json", Body: args}
}

// approval reads the approval in a call's _meta. Where operations are not
// offered it is a member like any other the server does not know, and is
// ignored.
func (c *toolCall) approval(meta mcp.Meta) (*operations.Approval, *mcp.CallToolResult) {
	raw, ok := meta[operations.MetaApproval]
	if !ok || !c.operationsOn() {
		return nil, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, toolError("the approval in _meta is not valid; nothing was done")
	}
	a, err := operations.ParseApprovalJSON(b)
	if err != nil {
		return nil, toolError("the approval in _meta is not valid (" + err.Error() + "); nothing was done")
	}
	return a, nil
}

// performApproved checks and performs an approved call. It returns the
// call's result, or none with stale set when check 3 failed (the call
// then goes to the origin for a new revision), or none when the approval
// is not this Session's to give (the call is one without approval).
func (c *toolCall) performApproved(ctx context.Context, t *registry.Tool, args []byte,
	a *operations.Approval) (result *mcp.CallToolResult, stale bool, err error) {
	out, err := c.m.opts.Engine.Perform(ctx, &operations.Action{Company: c.co, Interface: operations.InterfaceMCP, Target: t.Name,
		Owner: c.owner(), Facts: c.facts, Request: toolRequest(args)}, a)
	if herr := (*httpx.Error)(nil); errors.As(err, &herr) {
		return toolError(herr.Description), false, nil
	}
	if err != nil {
		return nil, false, err
	}
	switch out.Kind {
	case operations.OutcomeUnapproved:
		return nil, false, nil
	case operations.OutcomeStale:
		return nil, true, nil
	case operations.OutcomeNeedsAccount:
		// serve answers these with a challenge before the SDK sees them.
		return toolError("this operation belongs to an account: sign in to approve it; nothing was done"), false, nil
	case operations.OutcomePerformed:
		return c.result(ctx, t, out.Response), false, nil
	case operations.OutcomePerforming:
		return c.performingResult(), false, nil
	case operations.OutcomeRetry:
		return c.retryResult(out.RetryAfter), false, nil
	case operations.OutcomeDeclined:
		return declinedResult(a, out.Decline), false, nil
	}
	return approvalRequired(out.Operation), false, nil
}

// proposed answers a call whose origin asked for approval (a proposal) or
// declined without one. Without the extension declared no operation is
// returned: an ordinary tool error (extension 2).
func (c *toolCall) proposed(ctx context.Context, t *registry.Tool, args []byte, ans *operations.Response,
	avoid string) *mcp.CallToolResult {
	if httpx.IsMediaType(ans.ContentType, operations.DeclineType) {
		msg := "The Company declined this action; nothing was done."
		if d := operations.ParseDecline(ans.Body); d.Reason != "" {
			msg += " " + d.Reason
		}
		return toolError(msg)
	}
	if c.sess == nil {
		// No Session, no Personal Agent to approve through: the Company's
		// fallback is extension_required as an ordinary tool error (its
		// origin may run its own approval instead of proposing).
		return toolError("Not done: this action needs the User's approval, which this MCP server takes only from " +
			"Personal Agents through the Operations extension, version 3; this client has no Poppy Session. Nothing was done.")
	}
	if !c.operationsOn() || !c.declared {
		return toolError("Not done: this action needs approval through the Operations extension, version 3, " +
			"which this request does not declare.")
	}
	p, err := operations.ParseProposal(ans.Body)
	if err != nil {
		return c.failed(ctx, t, "the Company's origin asked for approval in a form the platform cannot use", err)
	}
	op, err := c.m.opts.Operations.Propose(ctx, c.co.ID, c.owner(), operations.InterfaceMCP, t.Name, p,
		toolRequest(args), avoid, c.m.opts.Now())
	if busy := (*operations.PerformingError)(nil); errors.As(err, &busy) {
		// The action's operation is being performed: no second one.
		return c.performingResult()
	}
	if err != nil {
		return c.failed(ctx, t, "the operation could not be recorded; nothing was done", err)
	}
	return approvalRequired(op)
}

// approvalRequired is an operation as a tool result (extension 4).
func approvalRequired(op *operations.Operation) *mcp.CallToolResult {
	text := "Not done yet. This needs approval of the terms in structuredContent.operation."
	if op.Summary != "" {
		text = "Not done yet. This needs approval: " + op.Summary
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: map[string]any{"operation": op}}
}

// declinedResult is approval_declined as a tool result (extension 6).
func declinedResult(a *operations.Approval, d *operations.Decline) *mcp.CallToolResult {
	text := "Not done: the Company declined the approval."
	if d.Reason != "" {
		text += " " + d.Reason
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: operations.Declined(a, d).Body()}
}

// performingResult marks the request's answer as 503 with Retry-After
// (extension 7: an MCP server answers as an API does while an operation
// is being performed, never as if it failed). The result itself is
// replaced by performingWriter, but in a batch (a call without approval
// there), where it is the call's own answer.
func (c *toolCall) performingResult() *mcp.CallToolResult {
	c.unavailable.Store(true)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "Not done by this call: " +
		"this action's operation is being performed and has not failed. Call again after " + operations.RetryAfter +
		" seconds to learn how it went."}}}
}

// retryResult marks the request's answer as 503 with Retry-After after
// seconds: the origin performed nothing and asked for the call again
// later, with the same approval (extension 7).
func (c *toolCall) retryResult(after int) *mcp.CallToolResult {
	c.retryAfter.Store(int64(after))
	c.unavailable.Store(true)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "Not done yet: " +
		"the Company asks for this call again later. Send the same call with the same approval after " +
		strconv.Itoa(after) + " seconds."}}}
}

// performingWriter answers 503 with Retry-After in place of the SDK's
// answer when a call's operation is being performed, so the Personal
// Agent sends the same request again; a retry gets the stored result.
type performingWriter struct {
	http.ResponseWriter
	r       *http.Request
	call    *toolCall
	written bool
	swallow bool
}

func (p *performingWriter) WriteHeader(code int) {
	if p.written {
		return
	}
	p.written = true
	if code == http.StatusOK && p.call.unavailable.Load() && !p.call.batch {
		p.swallow = true
		if after := p.call.retryAfter.Load(); after > 0 {
			operations.WriteRetry(p.ResponseWriter, p.r, int(after))
		} else {
			operations.WritePerforming(p.ResponseWriter, p.r)
		}
		return
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p *performingWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	if p.swallow {
		return len(b), nil
	}
	return p.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the SDK's writer.
func (p *performingWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// accountChallenge returns a challenge when a signed-out Session sends an
// approval of an operation that belongs to an account of the same
// Personal Agent and User (extension 3); it is an HTTP answer, so it is
// made before the SDK serves the calls.
func (m *Server) accountChallenge(ctx context.Context, co *tenant.Company, sess *sessions.Session, grant *bearer.Grant,
	calls []calledTool) (*bearer.Challenge, error) {
	if grant != nil || sess == nil || !co.Settings.Operations.Enabled {
		return nil, nil
	}
	owner := operations.Owner{ClientID: sess.ClientID, UserID: sess.UserID}
	for _, call := range calls {
		if call.approval == nil {
			continue
		}
		a, err := operations.ParseApprovalJSON(call.approval)
		if err != nil {
			continue
		}
		checked, err := m.opts.Operations.Check(ctx, co.ID, owner, operations.InterfaceMCP, call.name, a,
			&operations.Request{}, m.opts.Now())
		if err != nil {
			return nil, err
		}
		if checked.Verdict == operations.NeedsAccount {
			return &bearer.Challenge{Description: "this operation belongs to an account: sign in to approve it"}, nil
		}
	}
	return nil, nil
}
