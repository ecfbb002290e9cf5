package operations_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Recorded approvals of website operations (extension 6, "Websites"), in
// the store: what Record accepts, which approvals Find applies to a
// browser's request, and that UseUp lets one request use one.

type recordRig struct {
	store     *operations.Store
	companyID int64
	other     int64
	owner     operations.Owner
	req       *operations.Request
	t0        time.Time
}

func newRecordRig(t *testing.T) *recordRig {
	t.Helper()
	pool := testdb.NewPool(t)
	r := &recordRig{store: operations.NewStore(pool),
		owner: operations.Owner{ClientID: "https://agent.test/client", UserID: "usr_test", AccountID: 7},
		req: &operations.Request{Method: "POST", Path: "/orders/o1/exchange", ContentType: "application/json",
			Body: []byte(`{"sku": "m", "qty": 1}`)},
		t0: time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('rec', '{}') RETURNING id`).Scan(&r.companyID))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('rec2', '{}') RETURNING id`).Scan(&r.other))
	return r
}

func (r *recordRig) propose(t *testing.T, iface, key string, owner operations.Owner, at time.Duration) (*operations.Operation, *operations.Approval) {
	t.Helper()
	op, err := r.store.Propose(context.Background(), r.companyID, owner, iface, "web",
		&operations.Proposal{ActionKey: key, Terms: json.RawMessage(`{"sku": "m"}`), ExpiresIn: 600}, r.req, "", r.t0.Add(at))
	require.NoError(t, err)
	return op, &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
}

func (r *recordRig) record(t *testing.T, a *operations.Approval, at time.Duration) bool {
	t.Helper()
	ok, err := r.store.Record(context.Background(), r.companyID, a, &verified.Facts{ClientID: r.owner.ClientID}, r.t0.Add(at))
	require.NoError(t, err)
	return ok
}

func (r *recordRig) find(t *testing.T, owner operations.Owner, req *operations.Request, at time.Duration) []string {
	t.Helper()
	found, err := r.store.Find(context.Background(), r.companyID, owner, req, r.t0.Add(at))
	require.NoError(t, err)
	var ids []string
	for _, a := range found {
		ids = append(ids, a.OperationID)
	}
	return ids
}

func TestRecordedApprovals(t *testing.T) {
	t.Parallel()
	r := newRecordRig(t)
	ctx := context.Background()
	first, a1 := r.propose(t, operations.InterfaceWeb, "first", r.owner, 0)
	second, a2 := r.propose(t, operations.InterfaceWeb, "second", r.owner, 0)

	// Nothing recorded: nothing found.
	require.Empty(t, r.find(t, r.owner, r.req, time.Second))
	// Recorded, the second first: found in that order; the same request
	// by meaning (member order) too.
	require.True(t, r.record(t, a2, time.Second))
	require.True(t, r.record(t, a1, 2*time.Second))
	require.True(t, r.record(t, a1, 3*time.Second), "recorded already")
	same := *r.req
	same.Body = []byte(`{"qty": 1, "sku": "m"}`)
	require.Equal(t, []string{second.OperationID, first.OperationID}, r.find(t, r.owner, &same, 4*time.Second))
	w, err := r.store.Lookup(ctx, r.companyID, first.OperationID)
	require.NoError(t, err)
	require.True(t, w.Approved)
	require.Equal(t, first.Revision, w.Current.Revision)

	// Never for another request, another owner, or once expired.
	other := *r.req
	other.Body = []byte(`{"sku": "l", "qty": 1}`)
	require.Empty(t, r.find(t, r.owner, &other, 4*time.Second))
	query := *r.req
	query.Query = "x=1"
	require.Empty(t, r.find(t, r.owner, &query, 4*time.Second))
	for _, o := range []operations.Owner{
		{ClientID: r.owner.ClientID, UserID: r.owner.UserID},
		{ClientID: r.owner.ClientID, UserID: r.owner.UserID, AccountID: 8},
		{ClientID: r.owner.ClientID, UserID: "usr_other", AccountID: 7},
		{ClientID: "https://other.test/client", UserID: r.owner.UserID, AccountID: 7},
	} {
		require.Empty(t, r.find(t, o, r.req, 4*time.Second), "%+v", o)
	}
	require.Empty(t, r.find(t, r.owner, r.req, 600*time.Second))
	// Nor at another Company.
	found, err := r.store.Find(ctx, r.other, r.owner, r.req, r.t0)
	require.NoError(t, err)
	require.Empty(t, found)

	// One request uses one approval: of many concurrent UseUps, one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := r.store.UseUp(ctx, r.companyID, a2, r.t0.Add(5*time.Second))
			require.NoError(t, err)
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), wins.Load())
	require.Equal(t, []string{first.OperationID}, r.find(t, r.owner, r.req, 6*time.Second))
	// Used up while its operation is still proposed (nothing performed):
	// it can be recorded anew.
	require.True(t, r.record(t, a2, 7*time.Second))
	require.Equal(t, []string{first.OperationID, second.OperationID}, r.find(t, r.owner, r.req, 8*time.Second))
}

func TestRecordRefuses(t *testing.T) {
	t.Parallel()
	r := newRecordRig(t)
	ctx := context.Background()

	// Another interface's operation.
	_, api := r.propose(t, operations.InterfaceAPI, "api", r.owner, 0)
	require.False(t, r.record(t, api, time.Second))
	// An expired revision.
	_, old := r.propose(t, operations.InterfaceWeb, "old", r.owner, 0)
	require.False(t, r.record(t, old, 600*time.Second))
	// A replaced revision: new terms for the same action.
	op, replaced := r.propose(t, operations.InterfaceWeb, "replaced", r.owner, 0)
	next, err := r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceWeb, "web",
		&operations.Proposal{ActionKey: "replaced", Terms: json.RawMessage(`{"sku": "l"}`)}, r.req, "", r.t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, op.OperationID, next.OperationID)
	require.False(t, r.record(t, replaced, 2*time.Second))
	// A declined one.
	_, declined := r.propose(t, operations.InterfaceWeb, "declined", r.owner, 0)
	ok, err := r.store.DeclineUnclaimed(ctx, r.companyID, declined.OperationID, declined.Revision, &operations.Decline{},
		r.t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, r.record(t, declined, 2*time.Second))
	// An unknown one, or another Company's.
	require.False(t, r.record(t, &operations.Approval{OperationID: "op_NONE", Revision: "R", Approver: "user"}, 0))
	_, mine := r.propose(t, operations.InterfaceWeb, "mine", r.owner, 0)
	ok, err = r.store.Record(ctx, r.other, mine, &verified.Facts{}, r.t0)
	require.NoError(t, err)
	require.False(t, ok)
	w, err := r.store.Lookup(ctx, r.other, mine.OperationID)
	require.NoError(t, err)
	require.Nil(t, w)

	// Forgotten with its operation.
	require.True(t, r.record(t, mine, time.Second))
	n, err := r.store.Sweep(ctx, r.t0.Add(24*time.Hour))
	require.NoError(t, err)
	require.Positive(t, n)
	require.Empty(t, r.find(t, r.owner, r.req, time.Second))
}

// TestRecordWaitingOnlyWhileApprovable: an approval recorded already and
// not used up counts as recorded only while its revision can still be
// approved.
func TestRecordWaitingOnlyWhileApprovable(t *testing.T) {
	t.Parallel()
	r := newRecordRig(t)
	ctx := context.Background()

	// Replaced by new terms after it was recorded.
	op, replaced := r.propose(t, operations.InterfaceWeb, "replaced", r.owner, 0)
	require.True(t, r.record(t, replaced, time.Second))
	next, err := r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceWeb, "web",
		&operations.Proposal{ActionKey: "replaced", Terms: json.RawMessage(`{"sku": "l"}`)}, r.req, "", r.t0.Add(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, op.OperationID, next.OperationID)
	require.False(t, r.record(t, replaced, 3*time.Second))
	// Declined after it was recorded.
	_, declined := r.propose(t, operations.InterfaceWeb, "declined", r.owner, 0)
	require.True(t, r.record(t, declined, time.Second))
	ok, err := r.store.DeclineUnclaimed(ctx, r.companyID, declined.OperationID, declined.Revision, &operations.Decline{},
		r.t0.Add(2*time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, r.record(t, declined, 3*time.Second))
	// Expired after it was recorded.
	_, expired := r.propose(t, operations.InterfaceWeb, "expired", r.owner, 0)
	require.True(t, r.record(t, expired, time.Second))
	require.True(t, r.record(t, expired, 2*time.Second))
	require.False(t, r.record(t, expired, 600*time.Second))
}

// TestGiveBack: an approval used up by a request that performed nothing
// applies again, unless another use replaced that one.
func TestGiveBack(t *testing.T) {
	t.Parallel()
	r := newRecordRig(t)
	ctx := context.Background()
	op, a := r.propose(t, operations.InterfaceWeb, "give-back", r.owner, 0)
	require.True(t, r.record(t, a, time.Second))
	used := r.t0.Add(2 * time.Second)
	ok, err := r.store.UseUp(ctx, r.companyID, a, used)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, r.find(t, r.owner, r.req, 3*time.Second))
	require.NoError(t, r.store.GiveBack(ctx, r.companyID, a, used))
	require.Equal(t, []string{op.OperationID}, r.find(t, r.owner, r.req, 3*time.Second))

	// Used by another request since: that use stands.
	again := r.t0.Add(4 * time.Second)
	ok, err = r.store.UseUp(ctx, r.companyID, a, again)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, r.store.GiveBack(ctx, r.companyID, a, used))
	require.Empty(t, r.find(t, r.owner, r.req, 5*time.Second))
}

func TestParseRef(t *testing.T) {
	t.Parallel()
	id, rev, ok := operations.ParseRef(operations.Ref("op_5Rt2", "K3Jd-9Q_x"))
	require.True(t, ok)
	require.Equal(t, []string{"op_5Rt2", "K3Jd-9Q_x"}, []string{id, rev})
	for _, bad := range []string{"", ".", "op_1", "op_1.", ".r", "op_1.r.x", "op 1.r", "op_1.r!",
		"op_1." + strings.Repeat("r", 2048)} {
		_, _, ok := operations.ParseRef(bad)
		require.False(t, ok, bad)
	}
}
