package operations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// sweepRig is a store on a fresh database with one Company, and a clock
// that starts at t0.
type sweepRig struct {
	pool      *pgxpool.Pool
	store     *operations.Store
	companyID int64
	owner     operations.Owner
	t0        time.Time
}

func newSweepRig(t *testing.T) *sweepRig {
	t.Helper()
	pool := testdb.NewPool(t)
	r := &sweepRig{pool: pool, store: operations.NewStore(pool),
		owner: operations.Owner{ClientID: "https://agent.test/client", UserID: "usr_test"},
		t0:    time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)}
	require.NoError(t, pool.QueryRow(context.Background(),
		`INSERT INTO companies (slug, settings) VALUES ('sweep', '{}') RETURNING id`).Scan(&r.companyID))
	return r
}

// propose proposes action key at t0+at with a revision that can be
// approved for expiresIn.
func (r *sweepRig) propose(t *testing.T, key string, at, expiresIn time.Duration) *operations.Operation {
	t.Helper()
	p := &operations.Proposal{ActionKey: key, Terms: json.RawMessage(`{"order_id": "o1"}`),
		ExpiresIn: int(expiresIn / time.Second)}
	op, err := r.store.Propose(context.Background(), r.companyID, r.owner, operations.InterfaceAPI, "orders-api", p,
		&operations.Request{Method: "POST", Path: "/orders/o1/" + key, Body: []byte(`{}`)}, "", r.t0.Add(at))
	require.NoError(t, err)
	return op
}

// claim makes op performing at t0+at, and returns the approval and the
// claim.
func (r *sweepRig) claim(t *testing.T, op *operations.Operation, at time.Duration) (*operations.Approval, *operations.Claim) {
	t.Helper()
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	c, err := r.store.Claim(context.Background(), r.companyID, a, &verified.Facts{}, time.Minute, r.t0.Add(at))
	require.NoError(t, err)
	require.NotNil(t, c)
	return a, c
}

// sweep runs the sweep at t0+at and returns how many operations it forgot.
func (r *sweepRig) sweep(t *testing.T, at time.Duration) int64 {
	t.Helper()
	n, err := r.store.Sweep(context.Background(), r.t0.Add(at))
	require.NoError(t, err)
	return n
}

// remembered reports whether operation id is still stored, and how many
// revisions it has.
func (r *sweepRig) remembered(t *testing.T, id string) (bool, int) {
	t.Helper()
	ctx := context.Background()
	var ops, revs int
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM operations WHERE company_id = $1 AND id = $2`,
		r.companyID, id).Scan(&ops))
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM operation_revisions WHERE company_id = $1 AND operation_id = $2`,
		r.companyID, id).Scan(&revs))
	return ops == 1, revs
}

// TestSweepForgetsExpiredOperations: an operation past its expires_at is
// forgotten with every revision; one not yet expired, or still being
// performed however old, is kept (extension 7).
func TestSweepForgetsExpiredOperations(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	expired := r.propose(t, "expired", 0, time.Minute)
	// A second revision of the same action: both go with the operation.
	r2 := &operations.Proposal{ActionKey: "expired", Terms: json.RawMessage(`{"order_id": "o1", "size": "L"}`), ExpiresIn: 60}
	again, err := r.store.Propose(context.Background(), r.companyID, r.owner, operations.InterfaceAPI, "orders-api", r2,
		&operations.Request{Method: "POST", Path: "/orders/o1/expired", Body: []byte(`{"size": "L"}`)}, "", r.t0.Add(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, expired.OperationID, again.OperationID)
	require.NotEqual(t, expired.Revision, again.Revision)
	fresh := r.propose(t, "fresh", 0, time.Hour)
	performing := r.propose(t, "performing", 0, time.Minute)
	r.claim(t, performing, 30*time.Second)

	_, revs := r.remembered(t, expired.OperationID)
	require.Equal(t, 2, revs)
	require.Zero(t, r.sweep(t, 30*time.Second), "nothing has expired yet")

	require.Equal(t, int64(1), r.sweep(t, 2*time.Minute))
	ok, revs := r.remembered(t, expired.OperationID)
	require.False(t, ok, "past expires_at: forgotten")
	require.Zero(t, revs, "with its revisions")
	ok, revs = r.remembered(t, fresh.OperationID)
	require.True(t, ok, "not yet expired: kept")
	require.Equal(t, 1, revs)
	ok, _ = r.remembered(t, performing.OperationID)
	require.True(t, ok, "being performed: kept whatever its expires_at")

	// Days later the performing one is still there; the fresh one is not.
	require.Equal(t, int64(1), r.sweep(t, 72*time.Hour))
	ok, _ = r.remembered(t, performing.OperationID)
	require.True(t, ok)
	ok, _ = r.remembered(t, fresh.OperationID)
	require.False(t, ok)

	// A forgotten operation's approval fails check 3: a new revision,
	// never a performance.
	c, err := r.store.Check(context.Background(), r.companyID, r.owner, operations.InterfaceAPI, "orders-api",
		&operations.Approval{OperationID: expired.OperationID, Revision: again.Revision, Approver: operations.ApproverUser},
		&operations.Request{Method: "POST", Path: "/orders/o1/expired", Body: []byte(`{"size": "L"}`)}, r.t0.Add(72*time.Hour))
	require.NoError(t, err)
	require.Equal(t, operations.Stale, c.Verdict)
}

// TestSweepKeepsPerformedUntilRevisionExpires: a performed operation is
// remembered, with its stored answer, until its approved revision's
// expires_at however early it was performed, and forgotten after.
func TestSweepKeepsPerformedUntilRevisionExpires(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	op := r.propose(t, "performed", 0, 10*time.Minute)
	a, c := r.claim(t, op, time.Minute)
	ok, err := r.store.Performed(context.Background(), r.companyID, op.OperationID, c.ID,
		&operations.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"exchange_id": "ex_1"}`)},
		r.t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)

	for _, at := range []time.Duration{3 * time.Minute, 9*time.Minute + 59*time.Second} {
		require.Zero(t, r.sweep(t, at), "at %s", at)
		c, err := r.store.Check(context.Background(), r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a,
			&operations.Request{Method: "POST", Path: "/orders/o1/performed", Body: []byte(`{}`)}, r.t0.Add(at))
		require.NoError(t, err)
		require.Equal(t, operations.Performed, c.Verdict, "remembered until the revision's expires_at")
		require.Equal(t, 201, c.Response.Status)
		require.JSONEq(t, `{"exchange_id": "ex_1"}`, string(c.Response.Body))
	}

	require.Equal(t, int64(1), r.sweep(t, 10*time.Minute+time.Second))
	ok, revs := r.remembered(t, op.OperationID)
	require.False(t, ok, "past the approved revision's expires_at: forgotten")
	require.Zero(t, revs)
}

// TestSweepEveryCompany: the sweep is the platform's, over every
// Company's operations, and leaves each Company's unexpired ones.
func TestSweepEveryCompany(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	var other int64
	require.NoError(t, r.pool.QueryRow(context.Background(),
		`INSERT INTO companies (slug, settings) VALUES ('sweep-other', '{}') RETURNING id`).Scan(&other))
	mine := r.propose(t, "mine", 0, time.Minute)
	p := &operations.Proposal{ActionKey: "theirs", Terms: json.RawMessage(`{"order_id": "o2"}`), ExpiresIn: 60}
	theirs, err := r.store.Propose(context.Background(), other, r.owner, operations.InterfaceAPI, "orders-api", p,
		&operations.Request{Method: "POST", Path: "/orders/o2"}, "", r.t0)
	require.NoError(t, err)
	kept, err := r.store.Propose(context.Background(), other, r.owner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: "kept", Terms: json.RawMessage(`{}`), ExpiresIn: 3600},
		&operations.Request{Method: "POST", Path: "/orders/o3"}, "", r.t0)
	require.NoError(t, err)

	require.Equal(t, int64(2), r.sweep(t, 2*time.Minute))
	ok, _ := r.remembered(t, mine.OperationID)
	require.False(t, ok)
	var n int
	require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT count(*) FROM operations WHERE company_id = $1 AND id = ANY($2)`,
		other, []string{theirs.OperationID, kept.OperationID}).Scan(&n))
	require.Equal(t, 1, n, "the other Company's expired operation forgotten, its live one kept")
}

// TestSweepKeepsRecordedApprovals: a website operation's recorded approval
// that is not used up is kept until the approved revision's expires_at
// (extension 6, "Websites"), and goes with its operation after.
func TestSweepKeepsRecordedApprovals(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op, err := r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceWeb, "web",
		&operations.Proposal{ActionKey: "web exchange", Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 600},
		&operations.Request{Method: "POST", Path: "/orders/o1/exchange"}, "", r.t0)
	require.NoError(t, err)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	recorded, err := r.store.Record(ctx, r.companyID, a, &verified.Facts{}, r.t0.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, recorded)
	approvals := func() (n int) {
		require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM operation_approvals WHERE company_id = $1 AND operation_id = $2`,
			r.companyID, op.OperationID).Scan(&n))
		return n
	}

	require.Zero(t, r.sweep(t, 9*time.Minute))
	require.Equal(t, 1, approvals(), "kept, not used up, until the revision's expires_at")
	require.Equal(t, int64(1), r.sweep(t, 10*time.Minute+time.Second))
	require.Zero(t, approvals(), "forgotten with its operation")
}

// TestSweepInBatches: a backlog larger than one batch is forgotten whole,
// over several statements, and an operation being performed is kept.
func TestSweepInBatches(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	_, err := r.pool.Exec(ctx, `INSERT INTO operations (company_id, id, client_id, user_id, interface, target, action_key,
			status, revision, created_at, updated_at, expires_at)
		SELECT $1, 'op_' || n, 'c', 'u', 'api', 'orders-api', 'k' || n,
			CASE WHEN n = 0 THEN 'performing' ELSE 'performed' END, 'r', $2, $2, $2
		FROM generate_series(0, 2500) AS n`, r.companyID, r.t0)
	require.NoError(t, err)
	require.Equal(t, int64(2500), r.sweep(t, time.Hour))
	ok, _ := r.remembered(t, "op_0")
	require.True(t, ok, "performing is never forgotten")
}
