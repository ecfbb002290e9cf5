package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// call is one verified API call of a Company with operations on.
type call struct {
	co     *tenant.Company
	api    *API
	target *url.URL
	rest   string
	facts  *verified.Facts
	grant  *bearer.Grant
}

// maxProposal bounds an origin's proposal or decline.
const maxProposal = 64 << 10

// retryAfter is the Retry-After of an operation still being performed.
const retryAfter = "5"

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
	// A request that carries an approval uses the extension (extension 2).
	declared := approval != nil || operations.Declared(sess, r.Header.Values(operations.ExtensionsHeader))
	owner := k.owner(sess)
	avoid := ""
	if approval != nil {
		checked, err := g.opts.Operations.Check(ctx, k.co.ID, owner, operations.InterfaceAPI, k.api.Name, approval, req, g.opts.Now())
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		switch checked.Verdict {
		case operations.CannotApprove:
			approval = nil
		case operations.NeedsAccount:
			bearer.WriteError(w, r, &bearer.Challenge{Description: "this operation belongs to an account: sign in to approve it",
				ResourceMetadata: g.opts.Tokens.MetadataURL(k.co, bearer.Resource{})})
			return
		case operations.Performed:
			writeStored(w, checked.Response)
			return
		case operations.Performing:
			writePerforming(w, r)
			return
		case operations.Stale:
			avoid, approval = approval.Revision, nil
		case operations.Approved:
			g.perform(w, r, k, owner, approval, req)
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	jwt, err := g.sign(ctx, k.co, k.api, k.target, r.Method, k.facts, nil)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	g.forward(w, r, k.api, k.target, jwt, func(resp *http.Response) error {
		if !isType(resp.Header.Get("Content-Type"), operations.ProposalType) {
			return nil
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxProposal))
		resp.Body.Close()
		if err != nil {
			return err
		}
		status, answer := g.proposed(ctx, k, owner, declared, raw, req, avoid)
		replaceResponse(resp, status, answer)
		if status == http.StatusForbidden && !declared {
			// At an API, extension_required is a challenge (spec 3.3).
			resp.Header.Set("WWW-Authenticate", `Bearer realm="poppyhost", error="extension_required", extension="operations"`)
		}
		return nil
	})
}

// proposed turns an origin's proposal into the answer to send: the
// operation (403 approval_required), extension_required for a request
// that does not declare the extension (extension 2), or 502 for a
// proposal the platform cannot use.
func (g *Gateway) proposed(ctx context.Context, k *call, owner operations.Owner, declared bool, raw []byte,
	req *operations.Request, avoid string) (int, any) {
	p, err := operations.ParseProposal(raw)
	if err != nil {
		httpx.Logger(ctx).WarnContext(ctx, "gateway: unusable proposal", "api", k.api.Name, "err", err)
		return http.StatusBadGateway, map[string]string{"error": CodeOriginUnreachable,
			"error_description": "the Company's origin asked for approval in a form the platform cannot use"}
	}
	if !declared {
		return http.StatusForbidden, map[string]string{"error": httpx.CodeExtensionRequired, "extension": operations.Name,
			"error_description": "this action needs approval through the operations extension, version 3, which the request does not declare"}
	}
	op, err := g.opts.Operations.Propose(ctx, k.co.ID, owner, operations.InterfaceAPI, k.api.Name, p, req, avoid, g.opts.Now())
	if err != nil {
		httpx.Logger(ctx).ErrorContext(ctx, "gateway: record operation", "api", k.api.Name, "err", err)
		return http.StatusInternalServerError, map[string]string{"error": httpx.CodeInternal}
	}
	return http.StatusForbidden, map[string]any{"error": operations.CodeApprovalRequired, "operation": op}
}

// perform performs an approved operation once: the claim picks one
// performer among concurrent retries, which sends the request to the
// origin with the approval in Poppy-Verified and Idempotency-Key
// {operation_id}.{revision}, and stores the answer.
func (g *Gateway) perform(w http.ResponseWriter, r *http.Request, k *call, owner operations.Owner,
	a *operations.Approval, req *operations.Request) {
	ctx := r.Context()
	store := g.opts.Operations
	won, err := store.Claim(ctx, k.co.ID, a, k.facts, g.opts.Now(), func(ctx context.Context, tx pgx.Tx) error {
		return g.scheduleSettle(ctx, tx, k, a)
	})
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if !won {
		// Another retry won meanwhile: answer as it stands now.
		checked, err := store.Check(ctx, k.co.ID, owner, operations.InterfaceAPI, k.api.Name, a, req, g.opts.Now())
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		if checked.Verdict == operations.Performed {
			writeStored(w, checked.Response)
			return
		}
		writePerforming(w, r)
		return
	}
	// The outcome is recorded whatever happens to this request.
	ctx = context.WithoutCancel(ctx)
	resp, err := g.send(ctx, k, a, req)
	if err != nil {
		// Unknown whether it took effect: still performing (extension 7),
		// until the settle job learns the outcome.
		httpx.Logger(ctx).WarnContext(ctx, "gateway: approved call did not complete", "api", k.api.Name,
			"operation_id", a.OperationID, "err", err)
		writePerforming(w, r)
		return
	}
	outcome, err := g.conclude(ctx, k, a, resp)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	switch outcome {
	case outcomeNewTerms:
		// Nothing was performed: a new revision to approve.
		status, answer := g.proposed(ctx, k, owner, true, resp.Body, req, a.Revision)
		httpx.WriteJSON(w, status, answer)
	case outcomeDeclined:
		httpx.WriteJSON(w, http.StatusForbidden, declineBody(a, operations.ParseDecline(resp.Body)))
	default:
		writeStored(w, resp)
	}
}

// Outcomes of an approved call.
const (
	outcomePerformed = iota
	outcomeNewTerms
	outcomeDeclined
)

// conclude records what the origin answered an approved call: new terms
// (a proposal) and a decline perform nothing and return the operation to
// proposed, the declined revision for good; any other answer is stored as
// the operation's.
func (g *Gateway) conclude(ctx context.Context, k *call, a *operations.Approval, resp *operations.Response) (int, error) {
	store, now := g.opts.Operations, g.opts.Now()
	switch {
	case isType(resp.ContentType, operations.ProposalType):
		return outcomeNewTerms, store.Release(ctx, k.co.ID, a.OperationID, a.Revision, false, now)
	case isType(resp.ContentType, operations.DeclineType):
		return outcomeDeclined, store.Release(ctx, k.co.ID, a.OperationID, a.Revision, true, now)
	}
	return outcomePerformed, store.Performed(ctx, k.co.ID, a.OperationID, resp, now)
}

// declineBody is approval_declined at an API (extension 6).
func declineBody(a *operations.Approval, d *operations.Decline) map[string]any {
	out := map[string]any{"error": operations.CodeApprovalDeclined, "operation_id": a.OperationID, "revision": a.Revision}
	if d.Reason != "" {
		out["reason"] = d.Reason
	}
	if len(d.Alternative) > 0 && string(d.Alternative) != "null" {
		out["alternative"] = d.Alternative
	}
	return out
}

// send sends an approved request to the origin and reads its whole answer.
func (g *Gateway) send(ctx context.Context, k *call, a *operations.Approval, req *operations.Request) (*operations.Response, error) {
	jwt, err := g.sign(ctx, k.co, k.api, k.target, req.Method, k.facts, a)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(k.api.TimeoutSeconds)*time.Second)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, req.Method, k.target.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, err
	}
	if req.ContentType != "" {
		out.Header.Set("Content-Type", req.ContentType)
	}
	out.Header.Set("Accept", "application/json")
	out.Header.Set(verified.Header, jwt)
	// One key per approved revision (DESIGN.md): an origin that proposed
	// new terms is not stuck replaying its old answer.
	out.Header.Set("Idempotency-Key", a.OperationID+"."+a.Revision)
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, k.api.MaxResponseBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > k.api.MaxResponseBytes {
		return nil, errResponseTooLarge
	}
	if resp.StatusCode >= 500 {
		// The origin failed: whether it performed is unknown.
		return nil, errors.New("gateway: origin answered " + strconv.Itoa(resp.StatusCode))
	}
	return &operations.Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		Location: resp.Header.Get("Location"), ETag: resp.Header.Get("ETag"), Body: body}, nil
}

// isType reports whether a Content-Type is the media type want.
func isType(contentType, want string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == want
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

// writeStored answers with the origin's stored answer (extension 7).
func writeStored(w http.ResponseWriter, resp *operations.Response) {
	for name, v := range map[string]string{"Content-Type": resp.ContentType, "Location": resp.Location, "ETag": resp.ETag} {
		if v != "" {
			w.Header().Set(name, v)
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// writePerforming answers a retry of an operation being performed, or
// whose outcome is unknown: never a failure (extension 7).
func writePerforming(w http.ResponseWriter, r *http.Request) {
	// Not a failure (extension 7), so not logged as one.
	w.Header().Set("Retry-After", retryAfter)
	httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": httpx.CodeUnavailable,
		"error_description": "the operation is being performed; send the same request with the same approval again after Retry-After seconds",
		"request_id":        httpx.RequestID(r.Context())})
}
