package operations_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The engine harness runs the operations engine through many randomized
// schedules against real PostgreSQL, a fake origin and approval hook
// (harness_fakes_test.go), a fake clock and a fake River (it runs the
// settle jobs the engine's sweeps queued), and checks after each schedule
// that the engine kept its promises (extension 3, 6, 7):
//
//	(a) the origin performed each operation at most once, and never had
//	    two sends of one operation in flight at once;
//	(b) what it was sent is exactly the approved revision's request and
//	    terms (Poppy-Verified terms, action_key, body, by Canonical);
//	(c) every outcome the Personal Agent got was true when given;
//	(d) nothing is left performing once the settle jobs ran out, and an
//	    operation is unknown only when its settle path really failed;
//	(e) nothing is lost across restarts or forgotten too early.
//
// Each schedule's choices come from its seed; real goroutines race where
// a schedule runs calls concurrently, so interleavings add coverage while
// the invariants hold whatever they are. A failure prints the seed and
// the schedule's steps; -ops.seed=N runs only that schedule again.
//
// The origin is naive: it performs every request it does not refuse, and
// counts performances per operation. It keeps one promise of the origin
// contract (docs/operations-extension.md), which the settle path relies
// on: the same Idempotency-Key again, after it performed and its answer
// was lost (5xx, reset, timeout), gets that answer rather than a second
// performance. Anything else sent again is performed again, and (a) fails.
var (
	opsSeed      = flag.Uint64("ops.seed", 0, "TestEngineSchedules: run only the schedule of this seed")
	opsSchedules = flag.Int("ops.schedules", 400, "TestEngineSchedules: how many schedules to run (seeds 1..N)")
	opsTrace     = flag.Bool("ops.trace", false, "TestEngineSchedules: log every schedule's steps, failing or not")
)

// sendTimeout is every route's send timeout, in the fake clock's time: a
// send that started at t has ended by t+sendTimeout (advance makes it so).
const sendTimeout = 30 * time.Second

// harnessWorkers run schedules side by side, each on its own database.
const harnessWorkers = 3

// TestEngineSchedules runs the engine harness: seeds 1..-ops.schedules
// (400: about 12 s on two cores shared with other work, load 12), or the
// one -ops.seed; -ops.trace logs the steps of passing schedules too.
func TestEngineSchedules(t *testing.T) {
	t.Parallel()
	var seeds []uint64
	if *opsSeed != 0 {
		seeds = []uint64{*opsSeed}
	} else {
		for i := 1; i <= *opsSchedules; i++ {
			seeds = append(seeds, uint64(i))
		}
	}
	start := time.Now()
	feed := make(chan uint64)
	var (
		mu       sync.Mutex
		failures []string
		stats    harnessStats
		wg       sync.WaitGroup
		stop     atomic.Bool
	)
	for i := range min(harnessWorkers, len(seeds)) {
		w := newWorld(t, i)
		wg.Go(func() {
			for seed := range feed {
				if stop.Load() {
					continue
				}
				s, err := w.run(seed)
				if err == nil && s != nil && *opsTrace {
					t.Logf("seed %d:\n%s", seed, s.traceText())
				}
				mu.Lock()
				stats.add(s)
				if err != nil {
					failures = append(failures, err.Error())
					stop.Store(len(failures) >= 3)
				}
				mu.Unlock()
			}
		})
	}
	for _, seed := range seeds {
		feed <- seed
	}
	close(feed)
	wg.Wait()
	t.Logf("%d schedules in %s: %s", stats.schedules, time.Since(start).Round(time.Millisecond), stats)
	for _, f := range failures {
		t.Error(f)
	}
}

// harnessStats say what the schedules exercised.
type harnessStats struct {
	schedules, steps, sends, performs, replays, settles int
	outcomes                                            map[string]int
}

func (h *harnessStats) add(s *schedule) {
	if s == nil {
		return
	}
	h.schedules++
	h.steps += s.steps
	s.mu.Lock()
	defer s.mu.Unlock()
	h.sends += len(s.sends)
	for _, e := range s.sends {
		if e.performed {
			h.performs++
		}
		if e.replay {
			h.replays++
		}
	}
	if h.outcomes == nil {
		h.outcomes = map[string]int{}
	}
	for _, c := range s.calls {
		if c.kind == "settle" {
			h.settles++
			continue
		}
		h.outcomes[c.result()]++
	}
}

func (h harnessStats) String() string {
	keys := make([]string, 0, len(h.outcomes))
	for k := range h.outcomes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, h.outcomes[k])
	}
	return fmt.Sprintf("%d steps, %d sends (%d performed, %d idempotent replays), %d settle runs; outcomes:%s",
		h.steps, h.sends, h.performs, h.replays, h.settles, b.String())
}

// world is one worker's database, Company and clock, reused schedule
// after schedule.
type world struct {
	pool      *pgxpool.Pool
	jobs      operations.Inserter
	store     *operations.Store
	companyID int64
	clock     *fakeClock
	cur       atomic.Pointer[schedule]
}

func newWorld(t *testing.T, i int) *world {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	w := &world{pool: pool, jobs: testdb.Inserter(t, pool), store: operations.NewStore(pool), clock: &fakeClock{}}
	if err := pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ($1, '{}') RETURNING id`,
		fmt.Sprintf("harness-%d", i)).Scan(&w.companyID); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) newEngine() (*operations.Engine, error) {
	return operations.NewEngine(operations.EngineOptions{Store: w.store, Router: fakeRouter{w},
		Origins: fakeOrigins{w}, Jobs: w.jobs, Companies: fakeCompanies{w}, Now: w.clock.Now})
}

// start begins the schedule of seed on a clean database.
func (w *world) start(seed uint64) (*schedule, error) {
	ctx := context.Background()
	for _, table := range []string{"operation_approvals", "operation_revisions", "operations", "river_job"} {
		if _, err := w.pool.Exec(ctx, `DELETE FROM `+table); err != nil {
			return nil, err
		}
	}
	w.clock.set(time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC))
	s := newSchedule(w, seed)
	w.cur.Store(s)
	eng, err := w.newEngine()
	if err != nil {
		return nil, err
	}
	s.eng = eng
	return s, nil
}

// run runs the schedule of seed on a clean database.
func (w *world) run(seed uint64) (*schedule, error) {
	ctx := context.Background()
	s, err := w.start(seed)
	if err != nil {
		return nil, err
	}
	// A schedule that hangs is a failure, not a stuck test: every wait
	// of the fakes also ends when abort closes.
	watchdog := time.AfterFunc(30*time.Second, func() {
		s.violate("watchdog: the schedule did not end within 30 s (a call waits for ever)")
		close(s.abort)
	})
	s.play(ctx)
	watchdog.Stop()
	if v := s.report(); v != "" {
		return s, fmt.Errorf("engine harness, seed %d (reproduce: go test ./internal/operations -run TestEngineSchedules -ops.seed=%d -v):\n%s",
			seed, seed, v)
	}
	return s, nil
}

// Terms by meaning: the texts of one group mean the same, two groups
// differ. Groups 0 and 1 differ only in the last digit of an integer
// beyond float64's exact range; texts in a group differ in member order,
// spacing and how a number is written.
var termGroups = [][]string{
	{`{"order_id":"o1","amount":9007199254740993}`, `{"amount": 9007199254740993, "order_id": "o1"}`,
		`{"order_id":"o1","amount":9007199254740993.0}`},
	{`{"order_id":"o1","amount":9007199254740992}`, `{"amount":9007199254740992,"order_id":"o1"}`},
	{`{"order_id":"o1","amount":15,"size":"L"}`, `{"size":"L","amount":1.5e1,"order_id":"o1"}`},
	{`{"order_id":"o1","items":[1,2]}`, `{"items":[1,2],"order_id":"o1"}`},
	{`{"order_id":"o1","items":[2,1]}`},
}

// action is one action a schedule's origin proposes operations for.
type action struct {
	key, iface, target, path string
}

var harnessActions = []*action{
	{key: "exchange o1", iface: operations.InterfaceAPI, target: "orders-api", path: "/orders/o1/exchange"},
	{key: "refund o1", iface: operations.InterfaceMCP, target: "refund-tool", path: "/tools/refund"},
}

// revInfo is what the Personal Agent was shown of a revision: the terms
// (by group) and the request it was proposed for. More than one group
// under one revision is a violation in itself.
type revInfo struct {
	op, rev   string
	act       *action
	groups    map[int]bool
	reqGroups map[int]bool
	expires   time.Time
}

// held is a revision the Personal Agent can approve.
type held struct {
	op, rev  string
	act      *action
	reqGroup int
}

// opTruth is what the origin knows of an operation.
type opTruth struct {
	act   *action
	owner operations.Owner
	// performs are the sends that performed it (more than one is (a));
	// answer is what the origin answered, or would have, when it did;
	// lost: that answer never reached the engine.
	performs []*send
	answer   *operations.Response
	lost     bool
	// truth are the final answers the origin gave: what performing it
	// answered, and refusals for good (400, 422).
	truth    []*operations.Response
	inflight int
}

// send is one request the origin received.
type send struct {
	call                *call
	key, op, rev        string
	method, path        string
	claims              *verified.Claims
	body                []byte
	start, end          int64 // sequence numbers
	startAt             time.Time
	performed, replay   bool
	learned             bool // the answer said what happened (not 409, 5xx, lost)
	deadline, done      chan struct{}
	expireOnce, endOnce sync.Once
}

// expire ends the send as its deadline would.
func (e *send) expire() { e.expireOnce.Do(func() { close(e.deadline) }) }

// Origin answers.
type originKind int

const (
	oOK          originKind = iota // performs: 200 or 201
	oRefuse                        // 400 or 422, for good; nothing performed
	oRetry                         // 408, 425 or 429; nothing performed
	oConflict                      // 409; nothing performed by this request
	o5xxDone                       // performs, then answers 5xx
	o5xx                           // 5xx; nothing performed
	oResetDone                     // performs, then the connection is lost
	oReset                         // connection lost; nothing performed
	oTimeoutDone                   // performs; no answer before the deadline
	oTimeout                       // no answer before the deadline; nothing performed
	oPropose                       // new terms
	oDecline                       // a decline
	oBadProposal                   // a proposal the platform cannot use
)

var originNames = []string{"ok", "refuse", "retry", "conflict", "5xx-done", "5xx", "reset-done", "reset",
	"timeout-done", "timeout", "propose", "decline", "bad-proposal"}

func (k originKind) String() string { return originNames[k] }

func (k originKind) performs() bool {
	return k == oOK || k == o5xxDone || k == oResetDone || k == oTimeoutDone
}

// failure: the answer does not say what happened.
func (k originKind) failure() bool {
	switch k {
	case oConflict, o5xxDone, o5xx, oResetDone, oReset, oTimeoutDone, oTimeout:
		return true
	}
	return false
}

type originPlan struct {
	kind   originKind
	status int
	group  int // the terms proposed, with oPropose
	// wait, when set, holds the answer until it closes (a slow origin);
	// the send's deadline can come first.
	wait <-chan struct{}
}

func (p originPlan) String() string {
	s := p.kind.String()
	if p.status != 0 {
		s += "(" + strconv.Itoa(p.status) + ")"
	}
	if p.kind == oPropose {
		s += fmt.Sprintf("(g%d)", p.group)
	}
	if p.wait != nil {
		s += "+slow"
	}
	return s
}

// Approval hook answers.
type hookKind int

const (
	h204 hookKind = iota
	hDecline
	hError
	hReset
)

var hookNames = []string{"204", "decline", "500", "reset"}

type hookPlan struct {
	kind hookKind
	// wait holds the answer until one of them closes.
	wait []<-chan struct{}
}

func (p hookPlan) String() string {
	if len(p.wait) > 0 {
		return hookNames[p.kind] + "+after"
	}
	return hookNames[p.kind]
}

// session is a Session a request comes in: its owner (who may or may
// not be the operation's) and its sid.
type session struct {
	owner operations.Owner
	sid   string
}

// call is one call of the engine: a Perform or a settle run.
type call struct {
	id   int
	kind string // perform or settle
	sess session
	// canApprove and needsAccount: check 1, as the harness sees it.
	canApprove, needsAccount bool
	approval                 *operations.Approval
	held                     *held
	reqSame                  bool // the request asks what the revision's does
	hook                     hookPlan
	origin                   originPlan
	hookUsed, originUsed     bool
	entered, hookEntered     chan struct{}
	returned                 chan struct{}
	enterOnce, hookOnce      sync.Once
	// start, end and lb: when it began and returned, and the last answer
	// it got from the hook or origin, before which it decided nothing.
	start, end, lb int64
	out            *operations.Outcome
	err            error
	dropped        bool // its process died: nobody got the outcome
	// A settle run's.
	claim                string
	last, gone, learned  bool
	settleErr            error
	proposedGroup        int
	proposedGroupPresent bool
}

func (c *call) result() string {
	switch {
	case c.kind == "settle":
		if c.settleErr != nil {
			return "error"
		}
		return "nil"
	case c.err != nil:
		return "error"
	case c.out == nil:
		return "none"
	}
	return outcomeNames[c.out.Kind]
}

var outcomeNames = map[operations.OutcomeKind]string{
	operations.OutcomeUnapproved: "unapproved", operations.OutcomeNeedsAccount: "needs-account",
	operations.OutcomeStale: "stale", operations.OutcomePerforming: "performing",
	operations.OutcomePerformed: "performed", operations.OutcomeDeclined: "declined",
	operations.OutcomeNewTerms: "new-terms", operations.OutcomeRetry: "retry",
}

// schedule is one seeded run.
type schedule struct {
	w     *world
	seed  uint64
	rng   *rand.Rand
	co    *tenant.Company
	owner operations.Owner
	acts  []*action
	hook  bool
	eng   *operations.Engine
	steps int
	abort chan struct{}
	seq   atomic.Int64

	mu         sync.Mutex // guards what follows, which goroutines of calls share
	trace      []string
	violations []string
	revs       map[string]*revInfo // by operation_id.revision
	ops        map[string]*opTruth
	approved   map[string]bool // revisions an approval of the owner named
	sends      []*send
	inflight   []*send
	calls      []*call
	helds      []*held
	gone       map[string]bool
	forgotten  map[string]int64 // operations the sweep forgot, when
}

func newSchedule(w *world, seed uint64) *schedule {
	s := &schedule{w: w, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), abort: make(chan struct{}),
		revs: map[string]*revInfo{}, ops: map[string]*opTruth{}, approved: map[string]bool{},
		gone: map[string]bool{}, forgotten: map[string]int64{}}
	s.hook = s.rng.IntN(3) > 0
	co := &tenant.Company{ID: w.companyID, Slug: "harness"}
	co.Settings.Organization.Domain = "shop.test"
	co.Settings.Operations.Enabled = true
	if s.hook {
		co.Settings.Operations.ApprovalHook = hookURL
	}
	s.co = co
	s.owner = operations.Owner{ClientID: "https://pa.test/client", UserID: "usr_1"}
	if s.rng.IntN(2) == 0 {
		s.owner.AccountID = 42
	}
	s.acts = harnessActions[:1+s.rng.IntN(len(harnessActions))]
	return s
}

func (s *schedule) next() int64 { return s.seq.Add(1) }

func (s *schedule) now() time.Time { return s.w.clock.Now() }

func (s *schedule) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace = append(s.trace, fmt.Sprintf("[%d +%s] ", s.seq.Load(), s.now().Sub(time.Date(2026, 10, 8, 19, 0, 0, 0,
		time.UTC)))+fmt.Sprintf(format, args...))
}

func (s *schedule) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violateLocked(format, args...)
}

func (s *schedule) violateLocked(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *schedule) report() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("VIOLATIONS:\n")
	for i, v := range s.violations {
		if i == 10 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(s.violations)-10)
			break
		}
		b.WriteString("  " + v + "\n")
	}
	b.WriteString(s.traceLocked())
	return b.String()
}

func (s *schedule) traceText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traceLocked()
}

func (s *schedule) traceLocked() string {
	var b strings.Builder
	fmt.Fprintf(&b, "SCHEDULE (hook %v, owner account %d):\n", s.hook, s.owner.AccountID)
	for _, line := range s.trace {
		b.WriteString("  " + line + "\n")
	}
	return b.String()
}

// play runs the schedule: random steps, then the settle jobs to their
// end, then the checks.
func (s *schedule) play(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.violate("harness panic: %v", r)
		}
	}()
	for _, a := range s.acts {
		s.stepPropose(ctx, a)
	}
	n := 10 + s.rng.IntN(20)
	type step struct {
		weight int
		run    func(context.Context)
	}
	steps := []step{
		{18, func(ctx context.Context) { s.stepPropose(ctx, s.acts[s.rng.IntN(len(s.acts))]) }},
		{22, s.stepPerform},
		{6, s.stepProposeRace},
		{10, s.stepRace},
		{12, s.stepSettle},
		{8, s.stepSettleDuringSend},
		{8, s.stepSettleDue},
		{10, s.stepAdvance},
		{4, s.stepSweep},
		{4, s.stepResolve},
		{4, func(context.Context) { s.restart() }},
		{5, s.stepCrash},
		{2, s.stepGone},
	}
	if s.hook {
		steps = append(steps, step{10, s.stepHookRace})
	}
	total := 0
	for _, st := range steps {
		total += st.weight
	}
	for range n {
		if s.aborted() {
			return
		}
		s.steps++
		r := s.rng.IntN(total)
		for _, st := range steps {
			if r < st.weight {
				st.run(ctx)
				break
			}
			r -= st.weight
		}
	}
	s.drain(ctx)
	s.finalRetries(ctx)
	s.checkOutcomes()
	s.checkStored(ctx)
}

func (s *schedule) aborted() bool {
	select {
	case <-s.abort:
		return true
	default:
		return false
	}
}

// fail records an error of the harness or the database: a violation too,
// since the schedule can not go on.
func (s *schedule) fail(what string, err error) {
	s.violate("%s: %v", what, err)
}

// restart is a process restart: a new Engine over the same database.
// Whatever an old engine's calls still do is nobody's answer.
func (s *schedule) restart() {
	eng, err := s.w.newEngine()
	if err != nil {
		s.fail("restart", err)
		return
	}
	s.eng = eng
	s.logf("restart")
}

// advance moves the clock by d. A send in flight ends by its deadline
// (sendTimeout): one whose deadline comes first times out before the
// clock passes it, as it would in real time.
func (s *schedule) advance(d time.Duration) {
	target := s.now().Add(d)
	s.mu.Lock()
	var due []*send
	for _, e := range s.inflight {
		if !e.startAt.Add(sendTimeout).After(target) {
			due = append(due, e)
		}
	}
	s.mu.Unlock()
	for _, e := range due {
		e.expire()
		select {
		case <-e.done:
		case <-s.abort:
		}
	}
	s.w.clock.set(target)
}

// --- choices

func (s *schedule) pickGroup() int {
	if s.rng.IntN(10) < 6 {
		return s.rng.IntN(2)
	}
	return s.rng.IntN(len(termGroups))
}

func (s *schedule) text(group int) string {
	g := termGroups[group]
	return g[s.rng.IntN(len(g))]
}

func (s *schedule) request(a *action, group int) *operations.Request {
	return &operations.Request{Method: http.MethodPost, Path: a.path, ContentType: "application/json",
		Body: []byte(s.text(group))}
}

func (s *schedule) randomOrigin() originPlan {
	weights := []int{30, 6, 10, 5, 6, 6, 6, 5, 4, 3, 10, 6, 2}
	return s.originOf(weights)
}

func (s *schedule) originOf(weights []int) originPlan {
	total := 0
	for _, w := range weights {
		total += w
	}
	r, k := s.rng.IntN(total), 0
	for ; r >= weights[k]; k++ {
		r -= weights[k]
	}
	p := originPlan{kind: originKind(k)}
	pick := func(statuses ...int) int { return statuses[s.rng.IntN(len(statuses))] }
	switch p.kind {
	case oOK:
		p.status = pick(200, 201)
	case oRefuse:
		p.status = pick(400, 422)
	case oRetry:
		p.status = pick(408, 425, 429)
	case oConflict:
		p.status = 409
	case o5xxDone, o5xx:
		p.status = pick(500, 502, 503, 504)
	case oPropose:
		p.group = s.pickGroup()
	}
	return p
}

func (s *schedule) randomHook() hookPlan {
	r := s.rng.IntN(100)
	switch {
	case r < 70:
		return hookPlan{kind: h204}
	case r < 85:
		return hookPlan{kind: hDecline}
	case r < 94:
		return hookPlan{kind: hError}
	}
	return hookPlan{kind: hReset}
}

// session picks a Session: mostly the owner's, sometimes one that cannot
// approve (another User, another Personal Agent, another account, or
// signed out for an account's operation).
func (s *schedule) session() session {
	o := s.owner
	sid := "sid_" + strconv.Itoa(1+s.rng.IntN(3))
	r := s.rng.IntN(100)
	switch {
	case r < 80:
	case r < 88:
		if o.AccountID != 0 {
			o.AccountID = 0 // signed out: a challenge for the account
		} else {
			o.AccountID = 42
		}
	case r < 92:
		o.AccountID = 43
	case r < 96:
		o.UserID = "usr_2"
	default:
		o.ClientID = "https://other-pa.test/client"
	}
	return session{owner: o, sid: sid}
}

func (s *schedule) ownerSession() session {
	return session{owner: s.owner, sid: "sid_" + strconv.Itoa(1+s.rng.IntN(3))}
}

func (s *schedule) facts(x session) *verified.Facts {
	f := &verified.Facts{ClientID: x.owner.ClientID, SID: x.sid, UserID: x.owner.UserID, Scopes: []string{}}
	if x.owner.AccountID != 0 {
		f.Account = strconv.FormatInt(x.owner.AccountID, 10)
	}
	return f
}

// pickHeld picks a revision the Personal Agent holds, mostly the latest
// of an action, sometimes an older one.
func (s *schedule) pickHeld() *held {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.helds) == 0 {
		return nil
	}
	if s.rng.IntN(10) < 7 {
		return s.helds[len(s.helds)-1]
	}
	return s.helds[s.rng.IntN(len(s.helds))]
}

// --- calls

func (s *schedule) newCall(kind string) *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &call{id: len(s.calls) + 1, kind: kind, entered: make(chan struct{}), hookEntered: make(chan struct{}),
		returned: make(chan struct{})}
	s.calls = append(s.calls, c)
	return c
}

// performCall prepares a Perform of h's approval in sess, with the
// revision's request (reqSame) or another.
func (s *schedule) performCall(h *held, sess session, reqSame bool) (*call, *operations.Action) {
	c := s.newCall("perform")
	c.sess, c.held, c.reqSame = sess, h, reqSame
	s.mu.Lock()
	o, op := sess.owner, s.ops[h.op]
	s.mu.Unlock()
	c.canApprove = o == op.owner
	c.needsAccount = o.ClientID == op.owner.ClientID && o.UserID == op.owner.UserID && op.owner.AccountID != 0 &&
		o.AccountID == 0
	approver := operations.ApproverUser
	if s.rng.IntN(3) == 0 {
		approver = operations.ApproverAgent
	}
	c.approval = &operations.Approval{OperationID: h.op, Revision: h.rev, Approver: approver}
	group := h.reqGroup
	if !reqSame {
		for group == h.reqGroup {
			group = s.rng.IntN(len(termGroups))
		}
	}
	c.hook = s.randomHook()
	c.origin = s.randomOrigin()
	if c.canApprove {
		s.mu.Lock()
		s.approved[h.op+"."+h.rev] = true
		s.mu.Unlock()
	}
	return c, &operations.Action{Company: s.co, Interface: h.act.iface, Target: h.act.target, Owner: o,
		Facts: s.facts(sess), Request: s.request(h.act, group)}
}

// perform runs c with eng and records its outcome.
func (s *schedule) perform(ctx context.Context, eng *operations.Engine, c *call, act *operations.Action) {
	defer close(c.returned)
	c.start = s.next()
	out, err := eng.Perform(context.WithValue(ctx, callKey{}, c), act, c.approval)
	c.end = s.next()
	s.mu.Lock()
	c.out, c.err = out, err
	s.mu.Unlock()
	if err == nil && out.Kind == operations.OutcomeNewTerms && out.Operation != nil && !c.dropped {
		s.mu.Lock()
		if c.proposedGroupPresent {
			s.recordRev(out.Operation, c.held.act, c.proposedGroup, c.held.reqGroup, c.approval.Revision)
		} else {
			s.violateLocked("call %d: new terms %s the origin never proposed", c.id, out.Operation.Revision)
		}
		s.mu.Unlock()
	}
}

func (s *schedule) describe(c *call) string {
	d := fmt.Sprintf("call %d %s %s.%s sess=%s/%d/%s", c.id, c.kind, short(c.approval.OperationID),
		short(c.approval.Revision), c.sess.owner.UserID, c.sess.owner.AccountID, c.sess.sid)
	if !c.reqSame {
		d += " other-request"
	}
	if s.hook {
		d += " hook=" + c.hook.String()
	}
	d += " origin=" + c.origin.String() + " -> " + c.result()
	if c.err != nil {
		d += " (" + c.err.Error() + ")"
	}
	if c.out != nil && c.out.Response != nil {
		d += fmt.Sprintf(" [%d %s]", c.out.Response.Status, c.out.Response.Body)
	}
	if c.dropped {
		d += " (dropped)"
	}
	return d
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// recordRev records that the Personal Agent was shown op with terms of
// group for a request of reqGroup. Called with s.mu held.
func (s *schedule) recordRev(op *operations.Operation, a *action, group, reqGroup int, avoid string) {
	key := op.OperationID + "." + op.Revision
	if avoid != "" && op.Revision == avoid {
		s.violateLocked("revision %s returned for an approval naming it (extension 6)", key)
	}
	got, err := operations.Canonical(op.Terms)
	if want, _ := operations.Canonical([]byte(termGroups[group][0])); err != nil || string(got) != string(want) {
		s.violateLocked("revision %s: returned terms %s, proposed %s", key, op.Terms, termGroups[group][0])
	}
	ri := s.revs[key]
	if ri == nil {
		ri = &revInfo{op: op.OperationID, rev: op.Revision, act: a, groups: map[int]bool{}, reqGroups: map[int]bool{},
			expires: op.ExpiresAt}
		s.revs[key] = ri
	}
	ri.groups[group] = true
	ri.reqGroups[reqGroup] = true
	if len(ri.groups) > 1 {
		s.violateLocked("(b) revision %s stands for two sets of terms: groups %v (extension 3)", key, keysOf(ri.groups))
	}
	if len(ri.reqGroups) > 1 {
		s.violateLocked("(b) revision %s stands for two requests: groups %v (check 3)", key, keysOf(ri.reqGroups))
	}
	if s.ops[op.OperationID] == nil {
		s.ops[op.OperationID] = &opTruth{act: a, owner: s.owner}
	}
	s.helds = append(s.helds, &held{op: op.OperationID, rev: op.Revision, act: a, reqGroup: reqGroup})
}

func keysOf(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// --- the fake origin and approval hook

// origin is the Company's origin: naive, it performs every request it
// does not refuse, except that it keeps the contract the engine relies on
// (docs/operations-extension.md): a key it performed whose answer was
// lost gets that answer again rather than a second performance.
func (s *schedule) origin(req *http.Request, c *call) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	key := req.Header.Get("Idempotency-Key")
	opID, rev, _ := strings.Cut(key, ".")
	e := &send{call: c, key: key, op: opID, rev: rev, method: req.Method, path: req.URL.Path, body: body,
		startAt: s.now(), deadline: make(chan struct{}), done: make(chan struct{})}
	claims, err := claimsOf(req.Header.Get(verified.Header))
	s.mu.Lock()
	e.start = s.next()
	if err != nil {
		s.violateLocked("(b) send %s: Poppy-Verified unreadable: %v", key, err)
	}
	e.claims = claims
	plan := originPlan{kind: oOK, status: http.StatusOK} // nobody planned it: performed
	if c != nil && !c.originUsed {
		plan, c.originUsed = c.origin, true
	}
	t := s.ops[opID]
	if t == nil {
		t = &opTruth{}
		s.ops[opID] = t
		s.violateLocked("(b) send %s of an operation the harness never saw", key)
	}
	t.inflight++
	if t.inflight > 1 {
		s.violateLocked("(a) %d sends of %s in flight at once (%s)", t.inflight, short(opID), s.inflightOf(opID, e))
	}
	s.inflight = append(s.inflight, e)
	s.sends = append(s.sends, e)
	s.checkSend(e)
	prev := t.performs
	switch {
	case len(prev) > 0 && prev[len(prev)-1].key == key && t.lost && isDone(prev[len(prev)-1].done):
		// The contract: the same key again after a lost answer.
		e.replay = true
		if !plan.kind.failure() {
			plan = originPlan{kind: oOK, status: t.answer.Status, wait: plan.wait}
		}
	case plan.kind.performs():
		e.performed = true
		t.performs = append(t.performs, e)
		status := plan.status
		if plan.kind != oOK {
			status = http.StatusCreated
		}
		t.answer = &operations.Response{Status: status, ContentType: "application/json",
			Body: fmt.Appendf(nil, `{"done":%q,"n":%d}`, key, len(t.performs))}
		t.truth = append(t.truth, t.answer)
		t.lost = true
		if len(t.performs) > 1 {
			s.violateLocked("(a) operation %s performed %d times (keys %s)", short(opID), len(t.performs),
				strings.Join(sendKeys(t.performs), ", "))
		}
	}
	if c != nil && plan.kind == oPropose {
		c.proposedGroup, c.proposedGroupPresent = plan.group, true
	}
	performAnswer := t.answer
	s.mu.Unlock()
	if c != nil {
		c.enterOnce.Do(func() { close(c.entered) })
	}

	timedOut := plan.kind == oTimeout || plan.kind == oTimeoutDone
	if plan.wait != nil && !timedOut {
		select {
		case <-plan.wait:
		case <-e.deadline:
			timedOut = true
		case <-s.abort:
			timedOut = true
		case <-req.Context().Done():
			timedOut = true
		}
	}
	var (
		resp      *http.Response
		rerr      error
		delivered *operations.Response // a final answer the engine got
	)
	switch {
	case timedOut:
		rerr = context.DeadlineExceeded
	case plan.kind == oReset || plan.kind == oResetDone:
		rerr = errReset
	case plan.kind == oOK:
		delivered = performAnswer
		resp = answer(req, delivered.Status, delivered.ContentType, delivered.Body, "Location", "/exchanges/"+opID)
		e.learned = true
	case plan.kind == oRefuse:
		delivered = &operations.Response{Status: plan.status, ContentType: "application/json",
			Body: []byte(`{"error":"invalid_request"}`)}
		resp = answer(req, delivered.Status, delivered.ContentType, delivered.Body)
		e.learned = true
	case plan.kind == oRetry:
		resp = answer(req, plan.status, "application/json", []byte(`{"error":"busy"}`), "Retry-After", "3")
		e.learned = true
	case plan.kind == oPropose:
		var act *action
		if t.act != nil {
			act = t.act
		} else {
			act = harnessActions[0]
		}
		b, _ := json.Marshal(map[string]any{"action_key": act.key, "terms": json.RawMessage(termGroups[plan.group][0]),
			"summary": "New terms.", "expires_in": 3600})
		resp = answer(req, http.StatusForbidden, operations.ProposalType, b)
		e.learned = true
	case plan.kind == oDecline:
		resp = answer(req, http.StatusForbidden, operations.DeclineType, []byte(`{"reason":"Not today."}`))
		e.learned = true
	case plan.kind == oBadProposal:
		resp = answer(req, http.StatusForbidden, operations.ProposalType, []byte(`{"terms":5}`))
		e.learned = true
	default: // 409, 5xx
		resp = answer(req, plan.status, "text/plain", []byte("try later"))
	}

	s.mu.Lock()
	e.end = s.next()
	t.inflight--
	s.inflight = slices.DeleteFunc(s.inflight, func(x *send) bool { return x == e })
	if delivered != nil {
		if e.performed || e.replay {
			t.lost = false
		} else {
			t.truth = append(t.truth, delivered)
		}
	}
	if c != nil {
		c.lb = max(c.lb, e.end)
		if e.learned {
			c.learned = true
		}
	}
	e.endOnce.Do(func() { close(e.done) })
	s.mu.Unlock()
	return resp, rerr
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func sendKeys(sends []*send) []string {
	var out []string
	for _, e := range sends {
		out = append(out, short(e.op)+"."+short(e.rev))
	}
	return out
}

// inflightOf describes the sends of op in flight. Called with s.mu held.
func (s *schedule) inflightOf(op string, also *send) string {
	var parts []string
	for _, e := range append(slices.Clone(s.inflight), also) {
		if e.op == op {
			who := "?"
			if e.call != nil {
				who = fmt.Sprintf("call %d (%s)", e.call.id, e.call.kind)
			}
			parts = append(parts, who)
		}
	}
	return strings.Join(parts, ", ")
}

// checkSend checks (b) for a send: exactly the approved revision's
// request and terms, for the operation's owner. Called with s.mu held.
func (s *schedule) checkSend(e *send) {
	ri := s.revs[e.key]
	switch {
	case ri == nil:
		s.violateLocked("(b) sent %s, a revision the Personal Agent was never shown", e.key)
		return
	case !s.approved[e.key]:
		s.violateLocked("(b) sent %s, a revision no approval of its owner named", e.key)
	}
	if e.call != nil && e.call.kind == "perform" {
		if !e.call.canApprove {
			s.violateLocked("(b) call %d sent %s for a Session that cannot approve it", e.call.id, e.key)
		}
		if !e.call.reqSame {
			s.violateLocked("(b) call %d sent %s for a request that asks something else (check 3)", e.call.id, e.key)
		}
	}
	c := e.claims
	if c == nil {
		return
	}
	if c.OperationID != ri.op || c.Revision != ri.rev {
		s.violateLocked("(b) send %s: Poppy-Verified names %s.%s", e.key, c.OperationID, c.Revision)
	}
	if c.ActionKey != ri.act.key {
		s.violateLocked("(b) send %s: action_key %q, proposed %q", e.key, c.ActionKey, ri.act.key)
	}
	if e.method != http.MethodPost || e.path != ri.act.path || c.Method != e.method || c.Path != e.path {
		s.violateLocked("(b) send %s: %s %s (claims %s %s), proposed POST %s", e.key, e.method, e.path, c.Method,
			c.Path, ri.act.path)
	}
	terms, err := operations.Canonical(c.Terms)
	for g := range ri.groups {
		if want, _ := operations.Canonical([]byte(termGroups[g][0])); err != nil || string(terms) != string(want) {
			s.violateLocked("(b) send %s: terms %s, approved %s", e.key, c.Terms, termGroups[g][0])
		}
	}
	body, err := operations.Canonical(e.body)
	for g := range ri.reqGroups {
		if want, _ := operations.Canonical([]byte(termGroups[g][0])); err != nil || string(body) != string(want) {
			s.violateLocked("(b) send %s: body %s, approved request %s", e.key, e.body, termGroups[g][0])
		}
	}
	owner := s.ops[e.op].owner
	account := ""
	if owner.AccountID != 0 {
		account = strconv.FormatInt(owner.AccountID, 10)
	}
	if c.ClientID != owner.ClientID || c.UserID != owner.UserID || c.Account != account {
		s.violateLocked("(b) send %s: for %s/%s/%q, the operation is %s/%s/%q's", e.key, c.ClientID, c.UserID, c.Account,
			owner.ClientID, owner.UserID, account)
	}
}

// approvalHook is the Company's approval hook.
func (s *schedule) approvalHook(req *http.Request, c *call) (*http.Response, error) {
	var body struct {
		Operation operations.Operation `json:"operation"`
	}
	raw, _ := io.ReadAll(req.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		s.violate("hook: unreadable body: %v", err)
	}
	claims, err := claimsOf(req.Header.Get(verified.Header))
	s.mu.Lock()
	key := body.Operation.OperationID + "." + body.Operation.Revision
	if ri := s.revs[key]; ri == nil {
		s.violateLocked("hook asked about %s, a revision the Personal Agent was never shown", key)
	} else if err == nil {
		terms, err := operations.Canonical(claims.Terms)
		for g := range ri.groups {
			if want, _ := operations.Canonical([]byte(termGroups[g][0])); err != nil || string(terms) != string(want) {
				s.violateLocked("(b) hook asked about %s with terms %s, approved %s", key, claims.Terms, termGroups[g][0])
			}
		}
	}
	plan := hookPlan{kind: h204}
	if c != nil && !c.hookUsed {
		plan, c.hookUsed = c.hook, true
	}
	s.mu.Unlock()
	if c != nil {
		c.hookOnce.Do(func() { close(c.hookEntered) })
	}
	if len(plan.wait) > 0 {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.abort)}}
		for _, ch := range plan.wait {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		reflect.Select(cases)
	}
	s.mu.Lock()
	if c != nil {
		c.lb = max(c.lb, s.next())
	}
	s.mu.Unlock()
	switch plan.kind {
	case hDecline:
		return answer(req, http.StatusForbidden, operations.DeclineType, []byte(`{"reason":"Risk check."}`)), nil
	case hError:
		return answer(req, http.StatusInternalServerError, "text/plain", []byte("oops")), nil
	case hReset:
		return nil, errReset
	}
	return answer(req, http.StatusNoContent, "", nil), nil
}

// --- steps

// stepPropose: the origin proposes terms for a, as the gateway records a
// proposal, sometimes answering an approval it must not name again.
func (s *schedule) stepPropose(ctx context.Context, a *action) {
	group := s.pickGroup()
	reqGroup := group
	if s.rng.IntN(10) == 0 {
		reqGroup = s.rng.IntN(len(termGroups))
	}
	avoid := ""
	if h := s.pickHeld(); h != nil && h.act == a && s.rng.IntN(10) < 3 {
		avoid = h.rev
	}
	expires := []int{0, 60, 600, 3600, 3600, 7200, 86400}[s.rng.IntN(7)]
	p := &operations.Proposal{ActionKey: a.key, Terms: json.RawMessage(s.text(group)), Summary: "Terms.",
		ExpiresIn: expires}
	req := s.request(a, reqGroup)
	op, err := s.w.store.Propose(ctx, s.co.ID, s.owner, a.iface, a.target, p, req, avoid, s.now())
	var busy *operations.PerformingError
	switch {
	case errors.As(err, &busy):
		s.logf("propose %s g%d/r%d -> performing %s", a.key, group, reqGroup, short(busy.OperationID))
		return
	case err != nil:
		s.fail("propose", err)
		return
	}
	s.mu.Lock()
	s.recordRev(op, a, group, reqGroup, avoid)
	s.mu.Unlock()
	s.logf("propose %s %s (r%d, expires_in %d, avoid %s) -> %s.%s", a.key, p.Terms, reqGroup, expires, short(avoid),
		short(op.OperationID), short(op.Revision))
}

// stepProposeRace: two or three proposals for one action at once, of the
// same or other terms (texts that differ in member order, spacing or the
// last digit of a big integer): one operation for the action, and one set
// of terms per revision (recordRev).
func (s *schedule) stepProposeRace(ctx context.Context) {
	a := s.acts[s.rng.IntN(len(s.acts))]
	n := 2 + s.rng.IntN(2)
	type result struct {
		group int
		op    *operations.Operation
		err   error
	}
	results := make([]result, n)
	reqs := make([]*operations.Request, n)
	props := make([]*operations.Proposal, n)
	for i := range results {
		results[i].group = s.pickGroup()
		props[i] = &operations.Proposal{ActionKey: a.key, Terms: json.RawMessage(s.text(results[i].group)),
			ExpiresIn: 3600}
		reqs[i] = s.request(a, results[i].group)
	}
	now := s.now()
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i].op, results[i].err = s.w.store.Propose(ctx, s.co.ID, s.owner, a.iface, a.target, props[i],
				reqs[i], "", now)
		})
	}
	wg.Wait()
	ops := map[string]bool{}
	for _, r := range results {
		var busy *operations.PerformingError
		switch {
		case errors.As(r.err, &busy):
			s.logf("propose race %s g%d -> performing %s", a.key, r.group, short(busy.OperationID))
		case r.err != nil:
			s.fail("propose", r.err)
		default:
			s.mu.Lock()
			s.recordRev(r.op, a, r.group, r.group, "")
			s.mu.Unlock()
			ops[r.op.OperationID] = true
			s.logf("propose race %s g%d -> %s.%s", a.key, r.group, short(r.op.OperationID), short(r.op.Revision))
		}
	}
	if len(ops) > 1 {
		s.violate("concurrent proposals for %q made %d operations (one operation per action)", a.key, len(ops))
	}
}

// stepPerform: one retry with an approval, alone.
func (s *schedule) stepPerform(ctx context.Context) {
	h := s.pickHeld()
	if h == nil {
		return
	}
	c, act := s.performCall(h, s.session(), s.rng.IntN(10) < 8)
	s.perform(ctx, s.eng, c, act)
	s.logf("%s", s.describe(c))
}

// stepRace: two or three retries of one approval at once, from one or
// several Sessions; a later one's hook may answer only after an earlier
// one returned.
func (s *schedule) stepRace(ctx context.Context) {
	h := s.pickHeld()
	if h == nil {
		return
	}
	n := 2 + s.rng.IntN(2)
	calls := make([]*call, n)
	acts := make([]*operations.Action, n)
	for i := range calls {
		sess := s.ownerSession()
		if s.rng.IntN(7) == 0 {
			sess = s.session()
		}
		calls[i], acts[i] = s.performCall(h, sess, s.rng.IntN(10) < 9)
		if i > 0 && s.rng.IntN(5) == 0 {
			calls[i].hook.wait = []<-chan struct{}{calls[0].returned}
		}
	}
	var wg sync.WaitGroup
	eng := s.eng
	for i := range calls {
		wg.Go(func() { s.perform(ctx, eng, calls[i], acts[i]) })
	}
	wg.Wait()
	for _, c := range calls {
		s.logf("race: %s", s.describe(c))
	}
}

// stepHookRace: two retries of one approval; the hook lets the first go
// ahead, and declines (or fails) the second only once the first has
// claimed the operation and reached the origin, whose answer waits until
// the second returned. The second must learn the operation as it stands:
// being performed, never declined.
func (s *schedule) stepHookRace(ctx context.Context) {
	h := s.pickHeld()
	if h == nil {
		return
	}
	a, actA := s.performCall(h, s.ownerSession(), true)
	b, actB := s.performCall(h, s.ownerSession(), true)
	a.hook = hookPlan{kind: h204, wait: []<-chan struct{}{b.hookEntered, b.returned}}
	b.hook = hookPlan{kind: hDecline, wait: []<-chan struct{}{a.entered, a.returned}}
	if s.rng.IntN(4) == 0 {
		b.hook.kind = hError
	}
	a.origin.wait = b.returned
	var wg sync.WaitGroup
	eng := s.eng
	wg.Go(func() { s.perform(ctx, eng, a, actA) })
	wg.Go(func() { s.perform(ctx, eng, b, actB) })
	wg.Wait()
	s.logf("hook race: %s", s.describe(a))
	s.logf("hook race: %s", s.describe(b))
}

// stepSettleDuringSend: a retry whose send is slow; while it is in
// flight (the clock moving less than its timeout) the claim's settle job
// runs, another retry comes, or the origin proposes the action again.
func (s *schedule) stepSettleDuringSend(ctx context.Context) {
	h := s.pickHeld()
	if h == nil {
		return
	}
	gate := make(chan struct{})
	c, act := s.performCall(h, s.ownerSession(), true)
	c.hook = hookPlan{kind: h204}
	c.origin.wait = gate
	eng := s.eng
	go s.perform(ctx, eng, c, act)
	select {
	case <-c.entered:
	case <-c.returned:
	case <-s.abort:
	}
	if isDone(c.entered) {
		s.logf("slow send of call %d in flight", c.id)
		if s.rng.IntN(2) == 0 {
			d := time.Duration(s.rng.IntN(25)) * time.Second
			s.advance(d)
			s.logf("advance %s", d)
		}
		switch s.rng.IntN(3) {
		case 0:
			s.stepPerformOf(ctx, h)
		case 1:
			s.proposeDuringSend(ctx, h)
		}
		// The settle sweep, on a replica whose clock runs ahead, may give
		// the claim its job while the send is out.
		s.settleDue(ctx, time.Duration(s.rng.IntN(5))*10*time.Second)
		if j, ok := s.jobOf(ctx, h.op); ok {
			s.runJob(ctx, j, s.rng.IntN(4) == 0, s.randomOrigin())
		}
	}
	close(gate)
	<-c.returned
	s.logf("%s", s.describe(c))
}

// stepPerformOf: a retry of h by its owner, alone.
func (s *schedule) stepPerformOf(ctx context.Context, h *held) {
	c, act := s.performCall(h, s.ownerSession(), true)
	s.perform(ctx, s.eng, c, act)
	s.logf("%s", s.describe(c))
}

// proposeDuringSend: the origin proposes h's action again while it is
// being performed: never a second operation.
func (s *schedule) proposeDuringSend(ctx context.Context, h *held) {
	group := s.pickGroup()
	p := &operations.Proposal{ActionKey: h.act.key, Terms: json.RawMessage(s.text(group))}
	op, err := s.w.store.Propose(ctx, s.co.ID, s.owner, h.act.iface, h.act.target, p, s.request(h.act, group), "",
		s.now())
	var busy *operations.PerformingError
	switch {
	case errors.As(err, &busy):
		s.logf("propose during send -> performing %s", short(busy.OperationID))
	case err != nil:
		s.fail("propose", err)
	default:
		s.mu.Lock()
		if t := s.ops[h.op]; t != nil && t.inflight > 0 {
			s.violateLocked("a second operation %s for %q while %s is being sent (one operation per action)",
				short(op.OperationID), h.act.key, short(h.op))
		}
		s.recordRev(op, h.act, group, group, "")
		s.mu.Unlock()
		s.logf("propose during send -> %s.%s", short(op.OperationID), short(op.Revision))
	}
}

// stepSettle runs one queued settle job, sometimes after moving the clock
// to its time or past its claim's lease, sometimes as its last attempt.
func (s *schedule) stepSettle(ctx context.Context) {
	jobs := s.liveJobs(ctx)
	if len(jobs) == 0 {
		return
	}
	j := jobs[s.rng.IntN(len(jobs))]
	switch s.rng.IntN(3) {
	case 0:
		if d := j.scheduledAt.Sub(s.now()); d > 0 {
			s.advance(d)
		}
	case 1:
		s.advance(sendTimeout + 6*time.Second)
	}
	s.runJob(ctx, j, s.rng.IntN(6) == 0, s.randomOrigin())
}

// stepSettleDue: the settle sweep (Engine.SettleDue), sometimes after
// the clock passed every lease, sometimes on a replica whose clock runs
// up to a lease ahead.
func (s *schedule) stepSettleDue(ctx context.Context) {
	if s.rng.IntN(3) == 0 {
		s.advance(sendTimeout + 6*time.Second)
	}
	s.settleDue(ctx, time.Duration(s.rng.IntN(3))*20*time.Second)
}

// settleDue runs the settle sweep with a clock ahead of the schedule's.
func (s *schedule) settleDue(ctx context.Context, ahead time.Duration) {
	n, err := s.eng.SettleDue(ctx, s.now().Add(ahead))
	if err != nil {
		s.fail("settle due", err)
		return
	}
	s.logf("settle due (clock ahead %s): %d jobs", ahead, n)
}

var advances = []time.Duration{time.Second, 10 * time.Second, 36 * time.Second, 5 * time.Minute, 31 * time.Minute,
	2 * time.Hour, 25 * time.Hour}

func (s *schedule) stepAdvance(context.Context) {
	d := advances[s.rng.IntN(len(advances))]
	s.advance(d)
	s.logf("advance %s", d)
}

// stepSweep: the hourly sweep, forgetting expired operations and giving
// stalled claims a settle job. (e): nothing performed is forgotten before
// its approved revision's expires_at.
func (s *schedule) stepSweep(ctx context.Context) {
	now := s.now()
	n, err := s.w.store.Sweep(ctx, now)
	if err != nil {
		s.fail("sweep", err)
		return
	}
	before := now.Add(-time.Hour)
	if s.rng.IntN(2) == 0 {
		before = now
	}
	if err := s.eng.Rescue(ctx, before); err != nil {
		s.fail("rescue", err)
	}
	s.logf("sweep: %d forgotten; rescue before %s", n, before.Sub(now))
	present, err := s.presentOps(ctx)
	if err != nil {
		s.fail("sweep", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.next()
	for id, t := range s.ops {
		if present[id] || s.forgotten[id] != 0 {
			continue
		}
		s.forgotten[id] = seq
		if len(t.performs) > 0 {
			ri := s.revs[t.performs[0].key]
			if ri != nil && !now.After(ri.expires) {
				s.violateLocked("(e) %s forgotten at %s, performed under a revision that expires %s", short(id), now,
					ri.expires)
			}
		}
	}
}

func (s *schedule) presentOps(ctx context.Context) (map[string]bool, error) {
	rows, err := s.w.pool.Query(ctx, `SELECT id FROM operations WHERE company_id = $1`, s.co.ID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// stepResolve: the Company resolves every unknown operation from its own
// records, truthfully.
func (s *schedule) stepResolve(ctx context.Context) {
	rows, err := s.w.pool.Query(ctx, `SELECT id FROM operations WHERE company_id = $1 AND status = 'unknown'
		ORDER BY id`, s.co.ID)
	if err != nil {
		s.fail("resolve", err)
		return
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			s.fail("resolve", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		s.mu.Lock()
		t := s.ops[id]
		performed := t != nil && len(t.performs) > 0
		var resp *operations.Response
		if performed {
			resp = t.answer
		}
		s.mu.Unlock()
		r := &operations.Resolution{Performed: performed, By: "harness", At: s.now()}
		if err := s.w.store.Resolve(ctx, s.co.ID, id, r, resp); err != nil {
			s.fail("resolve", err)
		}
		s.logf("resolve %s: performed %v", short(id), performed)
	}
}

// stepCrash: a retry whose process dies while its send is out: the
// origin may have performed it, and nobody gets the outcome. A new
// engine takes over.
func (s *schedule) stepCrash(ctx context.Context) {
	h := s.pickHeld()
	if h == nil {
		return
	}
	c, act := s.performCall(h, s.ownerSession(), true)
	c.dropped = true
	c.hook = hookPlan{kind: h204}
	kinds := []originKind{oResetDone, oReset, oTimeoutDone, o5xxDone, oOK}
	c.origin = originPlan{kind: kinds[s.rng.IntN(len(kinds))], status: http.StatusInternalServerError}
	if c.origin.kind == oOK {
		c.origin.status = http.StatusOK
	}
	gate := make(chan struct{})
	c.origin.wait = gate
	eng := s.eng
	go s.perform(ctx, eng, c, act)
	select {
	case <-c.entered:
	case <-c.returned:
	case <-s.abort:
	}
	s.restart()
	// The old process never hears the answer: its send times out.
	s.mu.Lock()
	for _, e := range s.inflight {
		if e.call == c {
			e.expire()
		}
	}
	s.mu.Unlock()
	close(gate)
	<-c.returned
	s.logf("crash: %s", s.describe(c))
}

// stepGone removes a target (its API or tool), or registers it again.
func (s *schedule) stepGone(context.Context) {
	a := s.acts[s.rng.IntN(len(s.acts))]
	s.mu.Lock()
	s.gone[a.target] = !s.gone[a.target]
	g := s.gone[a.target]
	s.mu.Unlock()
	s.logf("%s gone: %v", a.target, g)
}

// --- the fake River

type job struct {
	id          int64
	args        operations.SettleArgs
	attempt     int
	maxAttempts int
	scheduledAt time.Time
}

// liveJobs are the settle jobs River would still run.
func (s *schedule) liveJobs(ctx context.Context) []job {
	rows, err := s.w.pool.Query(ctx, `SELECT id, args, attempt, max_attempts, scheduled_at FROM river_job
		WHERE kind = $1 AND state IN ('available', 'scheduled', 'retryable', 'pending') ORDER BY id`,
		operations.SettleArgs{}.Kind())
	if err != nil {
		s.fail("jobs", err)
		return nil
	}
	defer rows.Close()
	var out []job
	for rows.Next() {
		var (
			j    job
			args []byte
		)
		if err := rows.Scan(&j.id, &args, &j.attempt, &j.maxAttempts, &j.scheduledAt); err != nil {
			s.fail("jobs", err)
			return nil
		}
		if err := json.Unmarshal(args, &j.args); err != nil {
			s.fail("jobs", err)
			return nil
		}
		out = append(out, j)
	}
	return out
}

// jobOf returns the live settle job of op's current claim.
func (s *schedule) jobOf(ctx context.Context, op string) (job, bool) {
	var claim string
	_ = s.w.pool.QueryRow(ctx, `SELECT coalesce(claim, '') FROM operations WHERE company_id = $1 AND id = $2`,
		s.co.ID, op).Scan(&claim)
	for _, j := range s.liveJobs(ctx) {
		if j.args.OperationID == op && j.args.Claim == claim {
			return j, true
		}
	}
	return job{}, false
}

// runJob works job j once as River would (attempt counted, last when it
// is the last), with the origin answering as plan says; last forces its
// last attempt.
func (s *schedule) runJob(ctx context.Context, j job, last bool, plan originPlan) {
	attempt := j.attempt + 1
	if last {
		attempt = max(attempt, j.maxAttempts)
	}
	last = attempt >= j.maxAttempts
	c := s.newCall("settle")
	c.claim, c.last, c.origin = j.args.Claim, last, plan
	c.approval = &operations.Approval{OperationID: j.args.OperationID}
	c.start = s.next()
	err := s.eng.Settle(context.WithValue(ctx, callKey{}, c), j.args, last)
	c.end = s.next()
	s.mu.Lock()
	c.settleErr = err
	s.mu.Unlock()
	now := s.now()
	var snooze *rivertype.JobSnoozeError
	switch {
	case err == nil:
		_, err = s.w.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', attempt = $2, finalized_at = $3
			WHERE id = $1`, j.id, attempt, now)
	case errors.As(err, &snooze):
		_, err = s.w.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = $2 WHERE id = $1`,
			j.id, now.Add(snooze.Duration))
	case last:
		_, err = s.w.pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', attempt = $2, finalized_at = $3
			WHERE id = $1`, j.id, attempt, now)
	default:
		backoff := time.Duration(attempt*attempt*attempt*attempt) * time.Second
		_, err = s.w.pool.Exec(ctx, `UPDATE river_job SET state = 'retryable', attempt = $2, scheduled_at = $3
			WHERE id = $1`, j.id, attempt, now.Add(backoff))
	}
	if err != nil {
		s.fail("job", err)
	}
	s.logf("settle call %d %s claim %s attempt %d/%d last=%v origin=%s -> %v (gone %v, learned %v)", c.id,
		short(j.args.OperationID), short(j.args.Claim), attempt, j.maxAttempts, last, plan, c.settleErr, c.gone,
		c.learned)
}

// --- the end of a schedule

// drain runs the settle jobs to their end, moving the clock two hours a
// round (past every lease and the sweep's stalledAfter) and rescuing
// stalled claims; the origin may be down for good, or a target gone, so
// attempts run out. (d): nothing is left performing, and what is unknown
// had its settle path fail.
func (s *schedule) drain(ctx context.Context) {
	down := s.rng.IntN(6) == 0
	s.logf("drain (origin down: %v)", down)
	drainWeights := []int{45, 5, 10, 4, 4, 4, 4, 3, 2, 2, 10, 5, 2}
	const rounds = 10
	for range rounds {
		if s.aborted() {
			return
		}
		s.settleDue(ctx, 0)
		s.advance(2 * time.Hour)
		jobs := s.liveJobs(ctx)
		if len(jobs) == 0 && s.countPerforming(ctx) == 0 {
			break
		}
		s.mu.Lock()
		anyGone := len(s.gone) > 0
		s.mu.Unlock()
		for _, j := range jobs {
			plan := s.originOf(drainWeights)
			if down {
				plan = originPlan{kind: o5xx, status: http.StatusServiceUnavailable}
			}
			s.runJob(ctx, j, (down || anyGone) && s.rng.IntN(2) == 0, plan)
		}
		if err := s.eng.Rescue(ctx, s.now().Add(-time.Hour)); err != nil {
			s.fail("rescue", err)
		}
	}
	rows, err := s.w.pool.Query(ctx, `SELECT id, status, coalesce(claim, '') FROM operations
		WHERE company_id = $1 AND status IN ('performing', 'unknown') ORDER BY id`, s.co.ID)
	if err != nil {
		s.fail("drain", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, status, claim string
		if err := rows.Scan(&id, &status, &claim); err != nil {
			s.fail("drain", err)
			return
		}
		if status == "performing" {
			s.violate("(d) %s still performing (claim %s) after its settle jobs ran out", short(id), short(claim))
			continue
		}
		s.mu.Lock()
		justified := false
		for _, c := range s.calls {
			if c.kind == "settle" && c.claim == claim && (c.gone || c.last && !c.learned) {
				justified = true
			}
		}
		if !justified {
			s.violateLocked("(d) %s unknown, yet no settle run of claim %s failed for good", short(id), short(claim))
		}
		s.mu.Unlock()
	}
}

func (s *schedule) countPerforming(ctx context.Context) int {
	var n int
	if err := s.w.pool.QueryRow(ctx, `SELECT count(*) FROM operations WHERE company_id = $1 AND status = 'performing'`,
		s.co.ID).Scan(&n); err != nil {
		s.fail("count", err)
	}
	return n
}

// finalRetries: the Company resolves what is unknown; then every
// operation the origin performed or refused for good is retried with an
// approval, and must answer with what the origin answered (e).
func (s *schedule) finalRetries(ctx context.Context) {
	s.stepResolve(ctx)
	s.mu.Lock()
	ids := make([]string, 0, len(s.ops))
	for id := range s.ops {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	s.mu.Unlock()
	for _, id := range ids {
		s.mu.Lock()
		t := s.ops[id]
		final := len(t.performs) > 0 || len(t.truth) > 0
		forgotten := s.forgotten[id] != 0
		var h *held
		for _, x := range s.helds {
			if x.op == id {
				h = x
			}
		}
		s.mu.Unlock()
		if !final || h == nil {
			continue
		}
		c, act := s.performCall(h, s.ownerSession(), true)
		c.hook = hookPlan{kind: h204}
		c.origin = originPlan{kind: oOK, status: http.StatusOK}
		s.perform(ctx, s.eng, c, act)
		s.logf("final: %s", s.describe(c))
		switch {
		case c.err != nil:
			s.violate("(e) final retry of %s, which the origin answered for good: %v", short(id), c.err)
		case c.out.Kind == operations.OutcomePerformed:
		case c.out.Kind == operations.OutcomeStale && forgotten:
		default:
			s.violate("(e) final retry of %s, which the origin answered for good: %s", short(id), c.result())
		}
	}
}

// checkOutcomes checks (c) for every outcome a Personal Agent got.
func (s *schedule) checkOutcomes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if c.kind != "perform" || c.dropped || c.end == 0 {
			continue
		}
		a, t := c.approval, s.ops[c.approval.OperationID]
		kind := operations.OutcomeKind(-1)
		if c.err == nil {
			kind = c.out.Kind
		}
		forgotten := s.forgotten[a.OperationID] != 0 && s.forgotten[a.OperationID] < c.start
		if !c.canApprove {
			want := operations.OutcomeUnapproved
			if c.needsAccount {
				want = operations.OutcomeNeedsAccount
			}
			if kind != want && !(kind == operations.OutcomeStale && forgotten) {
				s.violateLocked("(c) call %d from a Session that cannot approve got %s, want %s", c.id, c.result(),
					outcomeNames[want])
			}
			continue
		}
		switch kind {
		case operations.OutcomeUnapproved, operations.OutcomeNeedsAccount:
			s.violateLocked("(c) call %d from the owner's Session got %s", c.id, c.result())
		case operations.OutcomePerformed:
			if !hasResponse(t.truth, c.out.Response) {
				s.violateLocked("(c) call %d told performed with %d %s, which the origin never answered for good",
					c.id, c.out.Response.Status, c.out.Response.Body)
			}
		case operations.OutcomePerforming:
			// A claim comes before its send: a call that began before
			// this one returned sent it.
			if !slices.ContainsFunc(s.sends, func(e *send) bool {
				return e.op == a.OperationID && (e.start < c.end || e.call != nil && e.call.start < c.end)
			}) {
				s.violateLocked("(c) call %d told performing, but nothing was sent", c.id)
			}
		default:
			// Declined, Stale, NewTerms, Retry or an error: false if the
			// operation was performed, or being sent, when decided (after
			// the call's last answer from the hook or origin).
			lb := max(c.start, c.lb)
			if kind == operations.OutcomeStale && forgotten {
				break
			}
			for _, e := range t.performs {
				if e.start < lb {
					s.violateLocked("(c) call %d got %s after the origin performed %s (send of call %d)", c.id,
						c.result(), short(e.rev), callID(e))
				}
			}
			for _, e := range s.sends {
				if e.op == a.OperationID && e.start < lb && (e.end == 0 || e.end > c.end) {
					s.violateLocked("(c) call %d got %s while %s was being sent (call %d)", c.id, c.result(),
						short(e.rev), callID(e))
				}
			}
			if kind == operations.OutcomeDeclined || kind == operations.OutcomeNewTerms {
				for _, e := range t.performs {
					if e.rev == a.Revision {
						s.violateLocked("(c) call %d got %s for %s, which the origin performed", c.id, c.result(),
							short(a.Revision))
					}
				}
			}
			if kind == operations.OutcomeNewTerms && c.out.Operation != nil && c.out.Operation.Revision == a.Revision {
				s.violateLocked("(c) call %d: new terms under the revision it approved", c.id)
			}
		}
	}
}

func callID(e *send) int {
	if e.call == nil {
		return 0
	}
	return e.call.id
}

func hasResponse(truth []*operations.Response, r *operations.Response) bool {
	return r != nil && slices.ContainsFunc(truth, func(x *operations.Response) bool {
		return x.Status == r.Status && string(x.Body) == string(r.Body)
	})
}

// checkStored checks (e) on what the database keeps: every performed
// operation's answer is one the origin gave for good, and every
// operation the origin performed is stored performed, with that answer.
func (s *schedule) checkStored(ctx context.Context) {
	rows, err := s.w.pool.Query(ctx, `SELECT id, status, response FROM operations WHERE company_id = $1 ORDER BY id`,
		s.co.ID)
	if err != nil {
		s.fail("stored", err)
		return
	}
	defer rows.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for rows.Next() {
		var (
			id, status string
			resp       *operations.Response
		)
		if err := rows.Scan(&id, &status, &resp); err != nil {
			s.violateLocked("stored: %v", err)
			return
		}
		seen[id] = true
		t := s.ops[id]
		if t == nil {
			continue
		}
		if status == "performed" && !hasResponse(t.truth, resp) {
			s.violateLocked("(e) %s stored performed with an answer the origin never gave for good", short(id))
		}
		if len(t.performs) > 0 && (status != "performed" || !hasResponse([]*operations.Response{t.answer}, resp)) {
			stored := "no answer"
			if resp != nil {
				stored = fmt.Sprintf("%d %s", resp.Status, resp.Body)
			}
			s.violateLocked("(e) %s performed by the origin (%d %s), stored %s with %s", short(id), t.answer.Status,
				t.answer.Body, status, stored)
		}
	}
	for id, t := range s.ops {
		if len(t.performs) > 0 && !seen[id] && s.forgotten[id] == 0 {
			s.violateLocked("(e) %s performed by the origin, and lost", short(id))
		}
	}
}
