package website

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Operations on the Company's website (extension 4 and 6, "Websites";
// 8.2). A browser joined to a Session whose join declared the extension is
// handled as that Session: when the website's origin answers its request
// with a proposal, the platform makes it an operation and answers 403 with
// Poppy-Operation (sid, ref) and a waiting page; the Personal Agent gets
// the operation and records its approval at {issuer}/poppy/operations
// (serveOperations); the browser's next request for exactly the
// approved revision uses the approval up and performs it at most once.

// WebTarget is the target of every website operation: a Company has one
// website.
const WebTarget = "web"

// OperationHeader carries the reference of a website operation.
const OperationHeader = "Poppy-Operation"

// webMaxOperationBody bounds the request body of a request that can
// become an operation: it is kept with the operation. A larger one goes to
// the website all the same, but cannot become an operation.
const webMaxOperationBody = 1 << 20

// webOperationsOn reports whether the Company's website uses operations.
func webOperationsOn(c *tenant.Company) bool {
	return c.Settings.Operations.Enabled && c.Settings.Operations.Web
}

// webRequest is a browser's request that may become, or perform, a
// website operation.
type webRequest struct {
	ws    *browserjoin.WebSession
	owner operations.Owner
	req   *operations.Request
	// avoid is the revision of an approval that failed check 3: a new
	// proposal never gets it back (extension 6).
	avoid string
}

// webOperation starts the handling of a browser request as its Session's
// (extension 6): it buffers the body, and performs the request when a
// recorded approval applies. It reports done when it answered; otherwise
// the request goes to the origin with the returned webRequest, nil for a
// request that cannot become an operation (no web session, a join that
// did not declare the extension, or a body over webMaxOperationBody).
func (s *Proxy) webOperation(w http.ResponseWriter, r *http.Request, c *tenant.Company,
	ws *browserjoin.WebSession) (*webRequest, bool) {
	if ws == nil || !webOperationsOn(c) || ws.Extensions[operations.Name] != operations.Version {
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, webMaxOperationBody+1))
	if err != nil {
		s.page(w, r, http.StatusBadRequest, httpx.CodeInvalidRequest, websitePage{Title: "Not sent",
			Message: "What was sent could not be read. Try again."})
		return nil, true
	}
	if len(body) > webMaxOperationBody {
		// An upload: it reaches the website whole, as from any browser.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	wr := &webRequest{ws: ws, owner: operations.Owner{ClientID: ws.ClientID, UserID: ws.UserID, AccountID: ws.AccountID},
		req: &operations.Request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			ContentType: r.Header.Get("Content-Type"), Body: body,
			Host: forwardedHost(r.Host), Accept: r.Header.Get("Accept")}}
	return wr, s.useApproval(w, r, c, wr)
}

// useApproval performs wr with the first recorded approval that applies
// to it, and reports whether it answered. Each request uses up at most
// one approval; one that another request used meanwhile is passed over.
// An approval that no longer passes the checks leaves the request to be
// handled as one without approval.
func (s *Proxy) useApproval(w http.ResponseWriter, r *http.Request, c *tenant.Company, wr *webRequest) bool {
	ctx, store := r.Context(), s.opts.Operations
	found, err := store.Find(ctx, c.ID, wr.owner, wr.req, s.opts.Now())
	if err != nil {
		httpx.WriteError(w, r, err)
		return true
	}
	for _, a := range found {
		used := s.opts.Now()
		won, err := store.UseUp(ctx, c.ID, a, used)
		if err != nil {
			httpx.WriteError(w, r, err)
			return true
		}
		if !won {
			continue
		}
		out, err := s.opts.Engine.Perform(ctx, &operations.Action{Company: c, Interface: operations.InterfaceWeb,
			Target: WebTarget, Owner: wr.owner, Facts: wr.ws.Facts(), Request: wr.req}, a)
		if err != nil || out.Kind == operations.OutcomeUnapproved || out.Kind == operations.OutcomeNeedsAccount ||
			out.Kind == operations.OutcomeStale || out.Kind == operations.OutcomeRetry {
			// Nothing performed with it: the approval applies to the
			// next request that matches.
			if gerr := store.GiveBack(context.WithoutCancel(ctx), c.ID, a, used); gerr != nil {
				httpx.Logger(ctx).ErrorContext(ctx, "website: give back an approval", slog.Any("err", gerr))
			}
		}
		if err != nil {
			httpx.WriteError(w, r, err)
			return true
		}
		switch out.Kind {
		case operations.OutcomePerformed:
			operations.WriteStored(w, out.Response)
		case operations.OutcomePerforming:
			s.performing(w, r)
		case operations.OutcomeRetry:
			// Nothing performed; the approval still applies.
			w.Header().Set("Retry-After", strconv.Itoa(out.RetryAfter))
			s.page(w, r, http.StatusServiceUnavailable, httpx.CodeUnavailable, websitePage{Title: "Not done yet",
				Message: "The website asks for this again in a moment. Nothing has been done yet: try again."})
		case operations.OutcomeDeclined:
			s.declined(w, r, out.Decline)
		case operations.OutcomeNewTerms:
			s.waiting(w, r, c, wr, out.Operation)
		default:
			// Unapproved, NeedsAccount or Stale: handled as a request
			// without approval, whose new revision is never the one the
			// approval named.
			wr.avoid = a.Revision
			return false
		}
		return true
	}
	return false
}

// declined answers a request whose approved operation the website's
// origin declined when it was to perform it: nothing was done, and the
// browser is told why. The Personal Agent does not learn of it: a website
// that declines through the approval hook, where the approval is
// recorded, tells it (extension 6, "Declining an approval").
func (s *Proxy) declined(w http.ResponseWriter, r *http.Request, d *operations.Decline) {
	msg := "The website declined this action. Nothing was done."
	if d != nil && d.Reason != "" {
		msg += " The website says: " + d.Reason
	}
	s.page(w, r, http.StatusForbidden, operations.CodeApprovalDeclined, websitePage{Title: "Not done", Message: msg})
}

// performing answers a request whose operation is being performed, or
// whose outcome is not known yet: never a failure (extension 7).
func (s *Proxy) performing(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", operations.RetryAfter)
	s.page(w, r, http.StatusServiceUnavailable, httpx.CodeUnavailable, websitePage{Title: "In progress",
		Message: "This action is being done. Try again in a few seconds to see how it went."})
}

// proposal replaces the origin's answer resp, a proposal, with the answer
// the browser gets: the operation's reference and a waiting page for a
// request handled as its Session (wr), or a refusal the Personal Agent
// cannot approve otherwise. The proposal itself never reaches the browser.
func (s *Proxy) proposal(r *http.Request, c *tenant.Company, wr *webRequest, resp *http.Response) error {
	defer resp.Body.Close()
	body, ok, err := decodedBody(resp)
	if err != nil {
		return err
	}
	var raw []byte
	if ok {
		if raw, err = io.ReadAll(io.LimitReader(body, operations.MaxProposalBytes)); err != nil {
			return err
		}
	}
	out := &captured{header: http.Header{}}
	if err := s.propose(out, r, c, wr, raw); err != nil {
		return err
	}
	out.into(resp)
	return nil
}

// decodedBody is resp's body without its Content-Encoding, gzip or
// deflate; ok is false for another encoding, which the platform cannot
// read.
func decodedBody(resp *http.Response) (body io.Reader, ok bool, err error) {
	switch strings.ToLower(strings.TrimSpace(strings.Join(resp.Header.Values("Content-Encoding"), ","))) {
	case "", "identity":
		return resp.Body, true, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		return zr, err == nil, err
	case "deflate":
		zr, err := zlib.NewReader(resp.Body)
		return zr, err == nil, err
	}
	return nil, false, nil
}

// propose writes the answer to a request whose origin proposed raw.
func (s *Proxy) propose(w http.ResponseWriter, r *http.Request, c *tenant.Company, wr *webRequest, raw []byte) error {
	ctx := r.Context()
	if wr == nil {
		// No Session to send the operation to: the Company's own
		// approval flow is the website's business (extension 2).
		s.page(w, r, http.StatusForbidden, operations.CodeApprovalRequired, websitePage{Title: "Approval needed",
			Message: "This action needs an approval this website cannot ask for here. Nothing was done."})
		return nil
	}
	p, err := operations.ParseProposal(raw)
	if err != nil {
		httpx.Logger(ctx).WarnContext(ctx, "website: unusable proposal", slog.Any("err", err))
		s.page(w, r, http.StatusBadGateway, origin.CodeUnreachable, websitePage{Title: "This page is not available",
			Message: "The website asked for approval in a form that cannot be used. Nothing was done."})
		return nil
	}
	op, err := s.opts.Operations.Propose(ctx, c.ID, wr.owner, operations.InterfaceWeb, WebTarget, p, wr.req,
		wr.avoid, s.opts.Now())
	if busy := (*operations.PerformingError)(nil); errors.As(err, &busy) {
		s.performing(w, r)
		return nil
	}
	if err != nil {
		return err
	}
	s.waiting(w, r, c, wr, op)
	return nil
}

// waiting answers a request that returned operation op (extension 4,
// "Websites"): 403 with Poppy-Operation, and approval_required for a
// script, or a page that waits with a Continue control that repeats the
// request. It never carries the operation.
func (s *Proxy) waiting(w http.ResponseWriter, r *http.Request, c *tenant.Company, wr *webRequest,
	op *operations.Operation) {
	d := httpsfv.NewDictionary()
	d.Add("sid", httpsfv.NewItem(wr.ws.SID))
	d.Add("ref", httpsfv.NewItem(operations.Ref(op.OperationID, op.Revision)))
	v, err := httpsfv.Marshal(d)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	h := w.Header()
	h.Set(OperationHeader, v)
	if fromScript(r) {
		h.Set("Cache-Control", "no-store")
		httpx.WriteError(w, r, &httpx.Error{Code: operations.CodeApprovalRequired})
		return
	}
	again := &continueControl{Action: "https://" + r.Host + r.URL.RequestURI(), Method: http.MethodPost}
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		again.Link = true
	case r.Method == http.MethodPost && httpx.IsMediaType(wr.req.ContentType, httpx.FormType):
		if again.Fields, err = formFields(string(wr.req.Body)); err != nil {
			again.Method = ""
		}
	default:
		again.Method = ""
	}
	s.page(w, r, http.StatusForbidden, operations.CodeApprovalRequired, websitePage{Title: "Waiting for approval",
		Message: "This action on " + c.Settings.Organization.Name +
			" is waiting for your approval in your personal agent. Nothing has been done yet.",
		Continue: again})
}

// formField is a field of a submitted form.
type formField struct{ Name, Value string }

// formFields decodes an application/x-www-form-urlencoded body, keeping
// the fields in their order.
func formFields(body string) ([]formField, error) {
	var fields []formField
	for part := range strings.SplitSeq(body, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return nil, err
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, err
		}
		fields = append(fields, formField{name, value})
	}
	return fields, nil
}

// continueControl is how the page of a request waiting for approval
// repeats it.
type continueControl struct {
	// Action is the request's URL, on the Company's domain.
	Action string
	// Link: Continue is a link to Action (a GET). Otherwise, with Method,
	// a form that submits Fields again; without, the request cannot be
	// repeated from the page.
	Link   bool
	Method string
	Fields []formField
}

// fromScript reports whether a request is a script's, which gets JSON and
// not a page: one that asks for JSON and not HTML, or a fetch or
// XMLHttpRequest (Sec-Fetch-Dest: empty, X-Requested-With), whatever it
// accepts.
func fromScript(r *http.Request) bool {
	if strings.EqualFold(r.Header.Get("Sec-Fetch-Dest"), "empty") ||
		strings.EqualFold(r.Header.Get("X-Requested-With"), "XMLHttpRequest") {
		return true
	}
	accept := strings.ToLower(strings.Join(r.Header.Values("Accept"), ","))
	return strings.Contains(accept, "json") && !strings.Contains(accept, "text/html")
}

// captured is an answer written in full before it is sent: how the
// origin's answer is replaced by one of ours.
type captured struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captured) Header() http.Header { return c.header }

func (c *captured) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *captured) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(b)
}

// into makes resp the captured answer. The cookies resp sets still
// reach the browser, such as the deletion of the Session cookie when the
// website ended the web session.
func (c *captured) into(resp *http.Response) {
	cookies := resp.Header.Values("Set-Cookie")
	resp.StatusCode = c.status
	resp.Status = strconv.Itoa(c.status) + " " + http.StatusText(c.status)
	resp.Header = c.header
	for _, line := range cookies {
		resp.Header.Add("Set-Cookie", line)
	}
	resp.Header.Set("Content-Length", strconv.Itoa(c.body.Len()))
	resp.ContentLength = int64(c.body.Len())
	resp.Body = io.NopCloser(bytes.NewReader(c.body.Bytes()))
}
