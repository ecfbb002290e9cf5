package operations

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Route is where an operation's request is performed: an API's origin, a
// tool's URL or the website's origin.
type Route struct {
	// Audience is the aud of Poppy-Verified: the origin's base URL.
	Audience string
	URL      *url.URL
	// API and Tool name what the call is for in Poppy-Verified.
	API, Tool string
	// Timeout bounds one send (at most MaxSendTimeout); MaxResponse the
	// answer kept.
	Timeout     time.Duration
	MaxResponse int64
}

// ErrGone: what an operation was proposed for has been removed.
var ErrGone = errors.New("operations: the operation's API, tool or website is no longer registered")

// Router is what the engine needs of the interfaces: where an operation
// proposed at iface for target is performed (ErrGone once removed), and
// whether a conversation's request is one the gateway would forward for
// facts (nil, or an *httpx.Error saying why not).
type Router interface {
	Route(ctx context.Context, co *tenant.Company, iface, target string, req *Request) (*Route, error)
	Allowed(ctx context.Context, co *tenant.Company, req *Request, facts *verified.Facts) error
}

// MaxSendTimeout bounds one send of an approved request; leaseMargin is
// how long a send lease outlasts the send it covers, for clocks of
// replicas that differ a little.
const (
	MaxSendTimeout = 2 * time.Minute
	leaseMargin    = 5 * time.Second
)

// EngineOptions configure an Engine. Every field is required but Logger,
// Registerer and Now.
type EngineOptions struct {
	Store  *Store
	Router Router
	// Origins sends approved requests and approval-hook calls with
	// Poppy-Verified (origin.Caller, the one way to reach an origin).
	Origins Sender
	// Jobs inserts settle jobs (the platform's River client): the sweeps
	// do, for claims whose send lease lapsed (SettleDue, Rescue);
	// Companies finds a settle job's Company.
	Jobs      Inserter
	Companies interface {
		GetByID(ctx context.Context, id int64) (*tenant.Company, error)
	}
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Engine performs approved operations at most once, for every interface
// (extension 6, 7): check → approval hook → claim → send → conclude, and
// the settle job that concludes a claim whose outcome was not known.
type Engine struct {
	opts    EngineOptions
	metrics *metrics
}

// Sender sends req for co with Poppy-Verified made of claims, its issuer
// the Company's identifier, and returns the answer unread
// (origin.Caller.Send).
type Sender interface {
	Send(ctx context.Context, co *tenant.Company, claims verified.Claims, req *http.Request) (*http.Response, error)
}

// Inserter inserts River jobs: the platform's River client, which works
// the settle job (AddWorkers).
type Inserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
	InsertMany(ctx context.Context, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// NewEngine returns an Engine.
func NewEngine(opts EngineOptions) (*Engine, error) {
	if opts.Store == nil || opts.Router == nil || opts.Origins == nil || opts.Jobs == nil ||
		opts.Companies == nil {
		return nil, errors.New("operations: the engine needs Store, Router, Origins, Jobs and Companies")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Engine{opts: opts, metrics: m}, nil
}

// Store returns the engine's store.
func (e *Engine) Store() *Store { return e.opts.Store }

// Perform checks approval a of act's request (extension 6, checks 1-3),
// asks the Company's approval hook, and performs the operation at most
// once (extension 7): a claim picks one performer among concurrent
// retries, which sends the revision's own request to the origin with
// Idempotency-Key {operation_id}.{revision} and the approval and its terms
// in Poppy-Verified, and concludes the operation from the answer
// (Classify). A website's approval reached the hook where it was
// recorded, so it is not asked again here.
func (e *Engine) Perform(ctx context.Context, act *Action, a *Approval) (*Outcome, error) {
	e.metrics.approvals.inc(act.Interface)
	sent, err := e.claimAtOnce(ctx, act, a)
	if err != nil {
		return nil, err
	}
	if sent == nil {
		var out *Outcome
		if sent, out, err = e.checkThenClaim(ctx, act, a); sent == nil {
			return out, err
		}
	}
	// The outcome is recorded whatever happens to the request that asked.
	ctx = context.WithoutCancel(ctx)
	resp, err := e.send(ctx, sent)
	if err != nil {
		// Unknown whether it took effect: still performing (extension 7)
		// until the settle job learns the outcome.
		e.opts.Logger.WarnContext(ctx, "operations: approved call did not complete", "interface", act.Interface,
			"operation_id", a.OperationID, "err", withoutURL(err))
		e.metrics.outcome(OutcomePerforming)
		return &Outcome{Kind: OutcomePerforming}, nil
	}
	return e.conclude(ctx, sent, resp, true)
}

// claimAtOnce claims the operation of approval a with its checks in one
// statement (Store.ClaimChecked) when nothing has to be asked between the
// checks and the claim: no approval hook, and not a conversation's
// request, which the Router must allow first. It returns nil when it did
// not claim, for whatever reason: checkThenClaim then makes the checks one
// by one and says why, as it always did.
func (e *Engine) claimAtOnce(ctx context.Context, act *Action, a *Approval) (*sending, error) {
	co := act.Company
	if act.Interface == InterfaceConversation || co.Settings.Operations.ApprovalHook != "" || act.Request == nil {
		return nil, nil
	}
	route := act.Route
	if route != nil {
		route = bounded(*route)
	} else {
		var err error
		if route, err = e.route(ctx, co, act.Interface, act.Target, act.Request); err != nil {
			return nil, nil
		}
	}
	lease := route.Timeout + leaseMargin
	checked, claim, err := e.opts.Store.ClaimChecked(ctx, co.ID, act.Owner, act.Interface, act.Target, a, act.Request,
		act.Facts, lease, e.opts.Now(), func(ctx context.Context, c *Checked) error {
			if !c.Request.sameTarget(act.Request) {
				// The revision's own request is what is performed; routed
				// afresh, under the lease already taken.
				again, err := e.route(ctx, co, act.Interface, act.Target, c.Request)
				if err != nil {
					return err
				}
				if again.Timeout != route.Timeout {
					return errRouteChanged
				}
				route = again
			}
			return nil
		})
	if errors.Is(err, errRouteChanged) || errors.Is(err, ErrGone) {
		return nil, nil
	}
	if err != nil || claim == nil {
		return nil, err
	}
	return &sending{co: co, iface: act.Interface, target: act.Target, owner: act.Owner, route: route,
		facts: act.Facts, approval: a, claim: claim.ID, actionKey: checked.ActionKey, req: checked.Request,
		terms: checked.Operation.Terms}, nil
}

// errRouteChanged: the route of a claim made at once changed under it;
// the claim is undone and made the long way.
var errRouteChanged = errors.New("operations: the route changed while claiming")

// checkThenClaim makes the checks of approval a one by one (Store.Check),
// asks the approval hook between them and the claim, and claims the
// operation (Store.Claim). It returns what to send, or the outcome (or
// error) when nothing is to be sent.
func (e *Engine) checkThenClaim(ctx context.Context, act *Action, a *Approval) (*sending, *Outcome, error) {
	store, co := e.opts.Store, act.Company
	checked, err := store.Check(ctx, co.ID, act.Owner, act.Interface, act.Target, a, act.Request, e.opts.Now())
	if err != nil {
		return nil, nil, err
	}
	if out := verdictOutcome(checked); out != nil {
		return nil, out, nil
	}
	// The revision's own request is what is performed: the same as act's,
	// by check 3, or a conversation's.
	req := checked.Request
	route, err := e.route(ctx, co, act.Interface, act.Target, req)
	if errors.Is(err, ErrGone) {
		// Removed since it was proposed, before anything was claimed: a
		// refusal, not a failure of ours.
		return nil, nil, errGoneRefusal
	}
	if err != nil {
		return nil, nil, err
	}
	if act.Interface == InterfaceConversation {
		// The Company Agent named the request: it must be one the gateway
		// would forward for this Personal Agent.
		if err := e.opts.Router.Allowed(ctx, co, req, act.Facts); err != nil {
			return nil, nil, err
		}
	}
	if act.Interface != InterfaceWeb {
		decline, err := e.AskHook(ctx, act, checked.Operation, a)
		if errors.Is(err, ErrClaimed) {
			out, err := e.current(ctx, act, a)
			return nil, out, err
		}
		if errors.Is(err, ErrHook) {
			// Another request may have claimed the operation while the
			// hook failed: it is answered as it stands, never as if it
			// failed (extension 7).
			if out, cerr := e.current(ctx, act, a); cerr == nil &&
				(out.Kind == OutcomePerforming || out.Kind == OutcomePerformed) {
				return nil, out, nil
			}
		}
		if err != nil {
			return nil, nil, err
		}
		if decline != nil {
			e.metrics.outcome(OutcomeDeclined)
			return nil, &Outcome{Kind: OutcomeDeclined, Decline: decline}, nil
		}
	}
	lease := route.Timeout + leaseMargin
	claim, err := store.Claim(ctx, co.ID, a, act.Facts, lease, e.opts.Now())
	if err != nil {
		return nil, nil, err
	}
	if claim == nil {
		// Another retry won meanwhile: the operation as it stands now.
		out, err := e.current(ctx, act, a)
		return nil, out, err
	}
	return &sending{co: co, iface: act.Interface, target: act.Target, owner: act.Owner, route: route,
		facts: act.Facts, approval: a, claim: claim.ID, actionKey: checked.ActionKey, req: req,
		terms: checked.Operation.Terms}, nil, nil
}

// verdictOutcome is the outcome of a check that does not let the request
// claim the operation, or nil for one that does.
func verdictOutcome(c *Checked) *Outcome {
	switch c.Verdict {
	case CannotApprove:
		return &Outcome{Kind: OutcomeUnapproved}
	case NeedsAccount:
		return &Outcome{Kind: OutcomeNeedsAccount}
	case Performed:
		return &Outcome{Kind: OutcomePerformed, Response: c.Response}
	case Performing:
		return &Outcome{Kind: OutcomePerforming}
	case Stale:
		return &Outcome{Kind: OutcomeStale}
	}
	return nil
}

// current answers approval a as its operation stands now, after another
// request claimed it or ended its claim: performed, performing, or check 3
// failing for a revision replaced, declined or expired meanwhile.
func (e *Engine) current(ctx context.Context, act *Action, a *Approval) (*Outcome, error) {
	checked, err := e.opts.Store.Check(ctx, act.Company.ID, act.Owner, act.Interface, act.Target, a, act.Request,
		e.opts.Now())
	if err != nil {
		return nil, err
	}
	if out := verdictOutcome(checked); out != nil {
		if out.Kind == OutcomeNeedsAccount {
			out.Kind = OutcomeUnapproved
		}
		return out, nil
	}
	// Approvable again: a claim released for a retry. The Personal Agent
	// sends the same approval again (extension 7).
	return &Outcome{Kind: OutcomeRetry, RetryAfter: defaultRetryAfter}, nil
}

// route returns where a request goes, its timeout bounded.
func (e *Engine) route(ctx context.Context, co *tenant.Company, iface, target string, req *Request) (*Route, error) {
	r, err := e.opts.Router.Route(ctx, co, iface, target, req)
	if err != nil {
		return nil, err
	}
	return bounded(*r), nil
}

// bounded returns r with its timeout within MaxSendTimeout.
func bounded(r Route) *Route {
	if r.Timeout <= 0 || r.Timeout > MaxSendTimeout {
		r.Timeout = MaxSendTimeout
	}
	return &r
}

// sending is one send of a claim, and what concluding it needs.
type sending struct {
	co        *tenant.Company
	iface     string
	target    string
	owner     Owner
	route     *Route
	facts     *verified.Facts
	approval  *Approval
	claim     string
	actionKey string
	req       *Request
	terms     []byte
}

// conclude records what the origin answered a send, as Classify says,
// and returns the outcome. New terms are proposed for the owner when a
// request waits for them (wait); a settle job's proposes nothing, and the
// next request gets them. A database error while recording a final answer
// leaves the outcome unknown (performing), never a failure: the settle job
// sends the same request again with the same key.
func (e *Engine) conclude(ctx context.Context, s *sending, resp *Response, wait bool) (*Outcome, error) {
	store, co, a, now := e.opts.Store, s.co, s.approval, e.opts.Now()
	log := e.opts.Logger.With("interface", s.iface, "operation_id", a.OperationID)
	class := Classify(resp)
	switch class {
	case ClassUnknown:
		log.WarnContext(ctx, "operations: the origin's answer does not say whether it performed", "status", resp.Status)
		e.metrics.outcome(OutcomePerforming)
		return &Outcome{Kind: OutcomePerforming}, nil
	case ClassPerformed:
		ok, err := store.Performed(ctx, co.ID, a.OperationID, s.claim, resp, now)
		if err != nil {
			log.ErrorContext(ctx, "operations: the origin's answer could not be stored; the settle job asks again",
				"err", err)
			e.metrics.outcome(OutcomePerforming)
			return &Outcome{Kind: OutcomePerforming}, nil
		}
		if !ok {
			act := &Action{Company: co, Interface: s.iface, Target: s.target, Owner: s.owner, Request: s.req}
			return e.current(ctx, act, a)
		}
		e.metrics.outcome(OutcomePerformed)
		return &Outcome{Kind: OutcomePerformed, Response: resp}, nil
	}
	var (
		why     = ReleaseRetry
		decline *Decline
		p       *Proposal
	)
	switch class {
	case ClassNewTerms:
		why = ReleaseNewTerms
		var err error
		if p, err = ParseProposal(resp.Body); err != nil {
			log.WarnContext(ctx, "operations: unusable proposal", "err", err)
		}
	case ClassDeclined:
		why, decline = ReleaseDeclined, ParseDecline(resp.Body)
	}
	released, err := store.Release(ctx, co.ID, a.OperationID, s.claim, why, decline, now)
	if err != nil {
		log.ErrorContext(ctx, "operations: a claim the origin did not perform could not be released", "err", err)
		e.metrics.outcome(OutcomePerforming)
		return &Outcome{Kind: OutcomePerforming}, nil
	}
	if !released {
		act := &Action{Company: co, Interface: s.iface, Target: s.target, Owner: s.owner, Request: s.req}
		return e.current(ctx, act, a)
	}
	switch class {
	case ClassDeclined:
		e.metrics.outcome(OutcomeDeclined)
		e.metrics.declines[declinedByOrigin].Inc()
		return &Outcome{Kind: OutcomeDeclined, Decline: decline}, nil
	case ClassRetry:
		e.metrics.outcome(OutcomeRetry)
		return &Outcome{Kind: OutcomeRetry, RetryAfter: retryAfterOf(resp)}, nil
	}
	e.metrics.outcome(OutcomeNewTerms)
	if p == nil {
		return nil, errUnusableProposal
	}
	if !wait {
		return &Outcome{Kind: OutcomeNewTerms}, nil
	}
	op, err := store.Propose(ctx, co.ID, s.owner, s.iface, s.target, p, s.req, a.Revision, now)
	if err != nil {
		return nil, err
	}
	return &Outcome{Kind: OutcomeNewTerms, Operation: op}, nil
}

// errGoneRefusal answers an approval of an operation whose API, tool or
// website was removed since it was proposed.
var errGoneRefusal = httpx.Errorf(httpx.CodeNotFound,
	"what this operation was proposed at is no longer offered; nothing was performed")

// errUnusableProposal: the origin asked for approval in a form the
// platform cannot use.
var errUnusableProposal = httpx.Errorf(httpx.CodeOriginUnreachable,
	"the Company's origin asked for approval in a form the platform cannot use")

// Class is what an origin's answer to an approved request says of the
// operation (docs/operations-extension.md, "What an answer means").
type Class int

// The classes.
const (
	// ClassPerformed: a final answer; the operation is performed (or
	// refused for good) and the answer kept for every retry.
	ClassPerformed Class = iota
	// ClassRetry: definitely not performed, and the same request may be
	// sent again later (408, 425, 429): the claim is released and the
	// revision stays approvable.
	ClassRetry
	// ClassUnknown: whether it performed is not known (5xx, and 409, the
	// Idempotency-Key draft's answer while a request with the same key is
	// in flight): still performing; the settle job asks again.
	ClassUnknown
	// ClassNewTerms: a proposal; nothing performed, the revision replaced.
	ClassNewTerms
	// ClassDeclined: a decline; nothing performed, the revision declined.
	ClassDeclined
)

// Classify says what an origin's answer to an approved request means.
func Classify(resp *Response) Class {
	switch {
	case httpx.IsMediaType(resp.ContentType, ProposalType):
		return ClassNewTerms
	case httpx.IsMediaType(resp.ContentType, DeclineType):
		return ClassDeclined
	}
	switch resp.Status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return ClassRetry
	case http.StatusConflict:
		return ClassUnknown
	}
	if resp.Status >= 500 || resp.Status < 200 {
		return ClassUnknown
	}
	return ClassPerformed
}

// defaultRetryAfter is the Retry-After of a retry the origin gave no time
// for, in seconds; maxRetryAfter bounds one it gave.
const (
	defaultRetryAfter = 5
	maxRetryAfter     = 300
)

// retryAfterOf reads the origin's Retry-After in seconds, bounded.
func retryAfterOf(resp *Response) int {
	n, err := strconv.Atoi(resp.RetryAfter)
	if err != nil || n < 1 {
		return defaultRetryAfter
	}
	return min(n, maxRetryAfter)
}

// send sends an approved request to its route and reads the whole answer
// (or as much as is kept). An error means the outcome is unknown. The send
// never outlives its lease: its timeout is the route's, and the lease
// lasts leaseMargin longer.
func (e *Engine) send(ctx context.Context, s *sending) (*Response, error) {
	a, d, req := s.approval, s.route, s.req
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, req.Method, d.URL.String(), bytes.NewReader(req.Body))
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
		// the website proxy tells it.
		out.Header.Set("X-Forwarded-Host", req.Host)
		out.Header.Set("X-Forwarded-Proto", "https")
	}
	// One key per approved revision (DESIGN.md): an origin that proposed
	// new terms is not stuck replaying its old answer.
	out.Header.Set("Idempotency-Key", a.OperationID+"."+a.Revision)
	resp, err := e.opts.Origins.Send(ctx, s.co, verified.Claims{
		Audience: d.Audience, Facts: *s.facts, API: d.API, Tool: d.Tool,
		Method: req.Method, Path: d.URL.EscapedPath(),
		OperationID: a.OperationID, Revision: a.Revision, Approver: a.Approver,
		ActionKey: s.actionKey, Terms: s.terms,
	}, out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	stored := &Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		Location: resp.Header.Get("Location"), ETag: resp.Header.Get("ETag")}
	if Classify(stored) != ClassPerformed {
		// Kept only to be read: a proposal or decline, or a retry's time.
		stored.RetryAfter = resp.Header.Get("Retry-After")
		stored.Body, err = io.ReadAll(io.LimitReader(resp.Body, MaxProposalBytes))
		return stored, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, d.MaxResponse+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > d.MaxResponse {
		// The origin answered: the outcome is known, its body too large to
		// keep. Its status, Location and ETag say what was done.
		e.opts.Logger.WarnContext(ctx, "operations: answer to an approved call too large to keep; its body is dropped",
			"operation_id", a.OperationID, "limit", d.MaxResponse)
		stored.ContentType = ""
		return stored, nil
	}
	stored.Body = body
	return stored, nil
}

// MaxProposalBytes bounds an origin's proposal, decline or other answer
// that is read but not kept.
const MaxProposalBytes = 64 << 10

// withoutURL drops the URL from a request error for logs: a query can
// carry what must not be logged.
func withoutURL(err error) error {
	if u := (*url.Error)(nil); errors.As(err, &u) {
		return u.Err
	}
	return err
}
