package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// call is one verified API call of a Company with operations on.
type call struct {
	co     *tenant.Company
	api    *registry.API
	target *url.URL
	rest   string
	facts  *verified.Facts
	grant  *bearer.Grant
}

func (k *call) owner(sess *sessions.Session) operations.Owner {
	o := operations.Owner{ClientID: sess.ClientID, UserID: sess.UserID}
	if k.grant != nil {
		o.AccountID = k.grant.AccountID
	}
	return o
}

// serveOperations serves a call at an API of a Company with the
// Operations extension on (extension 4, 6, 7): a call with an approval is
// checked and performed at most once; a call without one is forwarded, and
// an origin's proposal becomes approval_required.
func (g *Gateway) serveOperations(w http.ResponseWriter, r *http.Request, k *call) {
	ctx := r.Context()
	sess := sessions.FromContext(ctx)
	approval, err := operations.ParseApprovalHeader(r.Header.Values(operations.ApprovalHeader))
	if err != nil {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "%s", err.Error()))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRequestTooLarge, "the body is larger than this API's %d bytes", k.api.MaxRequestBytes))
		return
	}
	req := &operations.Request{Method: r.Method, Path: k.rest, Query: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Body: body}
	if err := req.Exact(); err != nil {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "the body is ambiguous, nothing was done: %v", err))
		return
	}
	// A request that carries an approval uses the extension (extension 2).
	declared := approval != nil || operations.Declared(sess, r.Header.Values(operations.ExtensionsHeader))
	if declared {
		// The origin learns the request declares the extension, however it
		// declared it: without it, approval is the Company's own business.
		k.facts.Extensions = operations.WithVersion(k.facts.Extensions)
	}
	owner := k.owner(sess)
	avoid := ""
	if approval != nil {
		out, err := g.engine.Perform(ctx, &operations.Action{Company: k.co, Interface: operations.InterfaceAPI,
			Target: k.api.Name, Owner: owner, Facts: k.facts, Request: req, Route: origin.APIRoute(k.api, k.target)}, approval)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		switch out.Kind {
		case operations.OutcomeUnapproved:
			approval = nil
		case operations.OutcomeNeedsAccount:
			bearer.WriteError(w, r, &bearer.Challenge{Description: "this operation belongs to an account: sign in to approve it",
				ResourceMetadata: g.opts.Tokens.MetadataURL(k.co, bearer.Resource{})})
			return
		case operations.OutcomeStale:
			avoid, approval = approval.Revision, nil
		default:
			writeOutcome(w, r, approval, out)
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	jwt, err := g.sign(ctx, k.co, k.api, k.target, r.Method, k.facts)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	g.opts.Origins.Forward(w, r, k.api, k.target, jwt, func(resp *http.Response) error {
		if !httpx.IsMediaType(resp.Header.Get("Content-Type"), operations.ProposalType) {
			return nil
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, operations.MaxProposalBytes))
		resp.Body.Close()
		if err != nil {
			return err
		}
		status, answer := g.proposed(ctx, k, owner, declared, raw, req, avoid)
		replaceResponse(resp, status, answer)
		if status == http.StatusServiceUnavailable {
			resp.Header.Set("Retry-After", operations.RetryAfter)
		}
		if status == http.StatusForbidden && !declared {
			// At an API, extension_required is a challenge (spec 3.3).
			resp.Header.Set("WWW-Authenticate", `Bearer realm="poppyhost", error="extension_required", extension="operations"`)
		}
		return nil
	})
}

// proposed turns an origin's proposal into the answer to send: the
// operation (403 approval_required), extension_required for a request
// that does not declare the extension (extension 2), 502 for a proposal
// the platform cannot use, or 503 when the database cannot record it.
func (g *Gateway) proposed(ctx context.Context, k *call, owner operations.Owner, declared bool, raw []byte,
	req *operations.Request, avoid string) (int, any) {
	p, err := operations.ParseProposal(raw)
	if err != nil {
		httpx.Logger(ctx).WarnContext(ctx, "gateway: unusable proposal", "api", k.api.Name, "err", err)
		return http.StatusBadGateway, map[string]string{"error": origin.CodeUnreachable,
			"error_description": "the Company's origin asked for approval in a form the platform cannot use"}
	}
	if !declared {
		e := operations.ExtensionRequired("this action needs approval through the operations extension, version 3, which the request does not declare")
		return e.Status(), e.Body()
	}
	op, err := g.opts.Operations.Propose(ctx, k.co.ID, owner, operations.InterfaceAPI, k.api.Name, p, req, avoid, g.opts.Now())
	if busy := (*operations.PerformingError)(nil); errors.As(err, &busy) {
		return http.StatusServiceUnavailable, operations.PerformingBody(ctx)
	}
	if err != nil {
		// With the database down, unavailable (with Retry-After), as
		// every other answer is then: nothing was recorded.
		httpx.Logger(ctx).ErrorContext(ctx, "gateway: record operation", "api", k.api.Name, "err", err)
		e := httpx.AsError(err)
		return e.Status(), e.Body()
	}
	e := operations.ApprovalRequired(op)
	return e.Status(), e.Body()
}

// writeOutcome answers an approval at an API with what became of it:
// the stored answer, 503 while performing, approval_declined, or the
// new revision the origin proposed.
func writeOutcome(w http.ResponseWriter, r *http.Request, a *operations.Approval, out *operations.Outcome) {
	switch out.Kind {
	case operations.OutcomePerformed:
		operations.WriteStored(w, out.Response)
	case operations.OutcomePerforming:
		operations.WritePerforming(w, r)
	case operations.OutcomeRetry:
		operations.WriteRetry(w, r, out.RetryAfter)
	case operations.OutcomeDeclined:
		httpx.WriteError(w, r, operations.Declined(a, out.Decline))
	case operations.OutcomeNewTerms:
		httpx.WriteError(w, r, operations.ApprovalRequired(out.Operation))
	}
}

// replaceResponse makes resp a JSON answer of status.
func replaceResponse(resp *http.Response, status int, v any) {
	raw, _ := json.Marshal(v)
	resp.StatusCode = status
	resp.Status = strconv.Itoa(status) + " " + http.StatusText(status)
	for name := range resp.Header {
		delete(resp.Header, name)
	}
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Cache-Control", "no-store")
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	resp.Header.Set("Content-Length", strconv.Itoa(len(raw)))
}
