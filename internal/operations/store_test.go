package operations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// TestProposeWaitsForAClaim: new terms proposed while an approval of the
// current revision is being claimed never replace the revision being
// performed (extension 3: an approval covers exactly its revision's terms).
// The proposal waits for the claim and then finds the action performing.
func TestProposeWaitsForAClaim(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "exchange", 0, time.Hour)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}

	claimed, release := make(chan struct{}), make(chan struct{})
	won := make(chan bool, 1)
	go func() {
		// Spelled otherwise than the revision's, so that the claim is made
		// in a transaction (ClaimChecked), which next holds open.
		req := &operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{ }`)}
		_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, req,
			&verified.Facts{}, time.Minute, r.t0.Add(time.Minute),
			func(context.Context, *operations.Checked) error {
				close(claimed)
				<-release // the claim's transaction stays open
				return nil
			})
		won <- err == nil && c != nil
	}()
	<-claimed

	proposed := make(chan error, 1)
	go func() {
		p := &operations.Proposal{ActionKey: "exchange", Terms: json.RawMessage(`{"order_id": "o1", "size": "L"}`)}
		_, err := r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", p,
			&operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{}`)}, "", r.t0.Add(time.Minute))
		proposed <- err
	}()
	select {
	case err := <-proposed:
		t.Fatalf("the proposal did not wait for the claim: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.True(t, <-won)
	err := <-proposed
	var busy *operations.PerformingError
	require.True(t, errors.As(err, &busy), "got %v", err)
	require.Equal(t, op.OperationID, busy.OperationID)

	var status, revision string
	var replaced *time.Time
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT o.status, o.revision, r.replaced_at FROM operations o
		JOIN operation_revisions r ON r.company_id = o.company_id AND r.operation_id = o.id AND r.revision = $3
		WHERE o.company_id = $1 AND o.id = $2`, r.companyID, op.OperationID, op.Revision).Scan(&status, &revision, &replaced))
	require.Equal(t, "performing", status)
	require.Equal(t, op.Revision, revision, "the revision being performed is still the operation's")
	require.Nil(t, replaced)
}

// TestProposeSameTermsOtherRequest: the same terms for another request
// make another revision, so an approval performs only the request it was
// given for.
func TestProposeSameTermsOtherRequest(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	first := r.propose(t, "exchange", 0, time.Hour)
	again := r.propose(t, "exchange", time.Second, time.Hour)
	require.Equal(t, first.Revision, again.Revision, "the same request and terms keep the revision")

	p := &operations.Proposal{ActionKey: "exchange", Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 3600}
	other, err := r.store.Propose(context.Background(), r.companyID, r.owner, operations.InterfaceAPI, "orders-api", p,
		&operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{"note": "other"}`)}, "", r.t0.Add(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, first.OperationID, other.OperationID)
	require.NotEqual(t, first.Revision, other.Revision)
}

// TestClaimRefusesARetiredRevision: a claim never performs a revision that
// was declined (the approval hook) or has expired meanwhile.
func TestClaimRefusesARetiredRevision(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	claim := func(op *operations.Operation, at time.Duration) bool {
		a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverAgent}
		c, err := r.store.Claim(ctx, r.companyID, a, &verified.Facts{}, time.Minute, r.t0.Add(at))
		require.NoError(t, err)
		return c != nil
	}
	declined := r.propose(t, "declined", 0, time.Hour)
	ok, err := r.store.DeclineUnclaimed(ctx, r.companyID, declined.OperationID, declined.Revision, &operations.Decline{}, r.t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, claim(declined, time.Minute))

	expired := r.propose(t, "expired", 0, time.Minute)
	require.False(t, claim(expired, 2*time.Minute))
	require.True(t, claim(r.propose(t, "fresh", 0, time.Hour), time.Minute))
}

// TestProposeWaitsForAnUnknownOutcome: while an action's operation has an
// unknown outcome, a new proposal for the action is answered as that
// operation (PerformingError), never with a second operation that could be
// performed too; once the Company resolves it not performed, the action
// is proposed again under the same operation. Found by
// TestEngineSchedules: the second operation made the resolution fail.
func TestProposeWaitsForAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "exchange", 0, time.Hour)
	_, c := r.claim(t, op, time.Minute)
	ok, err := r.store.GiveUp(ctx, r.companyID, op.OperationID, c.ID, r.t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)

	p := &operations.Proposal{ActionKey: "exchange", Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 3600}
	_, err = r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", p,
		&operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{}`)}, "", r.t0.Add(3*time.Minute))
	var busy *operations.PerformingError
	require.True(t, errors.As(err, &busy), "got %v", err)
	require.Equal(t, op.OperationID, busy.OperationID)

	require.NoError(t, r.store.Resolve(ctx, r.companyID, op.OperationID,
		&operations.Resolution{Performed: false, By: "support", At: r.t0.Add(4 * time.Minute)}, nil))
	again := r.propose(t, "exchange", 5*time.Minute, time.Hour)
	require.Equal(t, op.OperationID, again.OperationID)
	require.NotEqual(t, op.Revision, again.Revision)
}

// claimChecked is ClaimChecked of op's current revision for the request
// r.propose made, at t0+at; it reports whether it claimed.
func (r *sweepRig) claimChecked(t *testing.T, op *operations.Operation, key string, at time.Duration) bool {
	t.Helper()
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	req := &operations.Request{Method: "POST", Path: "/orders/o1/" + key, Body: []byte(`{}`)}
	checked, c, err := r.store.ClaimChecked(context.Background(), r.companyID, r.owner, operations.InterfaceAPI,
		"orders-api", a, req, &verified.Facts{}, time.Minute, r.t0.Add(at),
		func(context.Context, *operations.Checked) error { return nil })
	require.NoError(t, err)
	require.Equal(t, c == nil, checked == nil)
	return c != nil
}

// TestClaimCheckedMakesEveryCheck: the check and the claim in one
// statement claim only what Check would approve: not another owner's,
// another request's, a declined, replaced or expired revision, nor one
// claimed already; and what did not claim changed nothing.
func TestClaimCheckedMakesEveryCheck(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	facts := &verified.Facts{}
	none := func(context.Context, *operations.Checked) error { return nil }

	op := r.propose(t, "exchange", 0, time.Hour)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	req := &operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{}`)}
	for name, try := range map[string]func() (*operations.Claim, error){
		"another User": func() (*operations.Claim, error) {
			_, c, err := r.store.ClaimChecked(ctx, r.companyID, operations.Owner{ClientID: r.owner.ClientID, UserID: "usr_other"},
				operations.InterfaceAPI, "orders-api", a, req, facts, time.Minute, r.t0, none)
			return c, err
		},
		"another account": func() (*operations.Claim, error) {
			o := r.owner
			o.AccountID = 7
			_, c, err := r.store.ClaimChecked(ctx, r.companyID, o, operations.InterfaceAPI, "orders-api", a, req, facts,
				time.Minute, r.t0, none)
			return c, err
		},
		"another API": func() (*operations.Claim, error) {
			_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "other-api", a, req, facts,
				time.Minute, r.t0, none)
			return c, err
		},
		"another request": func() (*operations.Claim, error) {
			other := &operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{"size": "L"}`)}
			_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, other,
				facts, time.Minute, r.t0, none)
			return c, err
		},
		"another revision": func() (*operations.Claim, error) {
			b := *a
			b.Revision = "NOTTHISONE"
			_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", &b, req,
				facts, time.Minute, r.t0, none)
			return c, err
		},
	} {
		c, err := try()
		require.NoError(t, err, name)
		require.Nil(t, c, name)
	}
	var status string
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT status FROM operations WHERE company_id = $1 AND id = $2`,
		r.companyID, op.OperationID).Scan(&status))
	require.Equal(t, "proposed", status, "nothing that did not claim changed the operation")

	// The same request spelled otherwise (check 3 by Request.Same) is
	// claimed in a transaction, which next may undo: what next refuses is
	// undone with the claim.
	respelled := &operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(`{ }`)}
	_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, respelled,
		facts, time.Minute, r.t0, func(context.Context, *operations.Checked) error {
			return operations.ErrGone
		})
	require.ErrorIs(t, err, operations.ErrGone)
	require.Nil(t, c)
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT status FROM operations WHERE company_id = $1 AND id = $2`,
		r.companyID, op.OperationID).Scan(&status))
	require.Equal(t, "proposed", status, "the claim next refused was undone")

	checked, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, req,
		facts, time.Minute, r.t0, none)
	require.NoError(t, err)
	require.NotNil(t, c)
	require.Equal(t, operations.Approved, checked.Verdict)
	require.Equal(t, "exchange", checked.ActionKey)
	require.JSONEq(t, `{"order_id": "o1"}`, string(checked.Operation.Terms))
	require.Equal(t, r.t0.Add(time.Minute), c.LeaseUntil)
	require.False(t, r.claimChecked(t, op, "exchange", time.Second), "claimed once")

	// Spelled otherwise, the request is still the revision's: claimed.
	other := r.propose(t, "respelled", 0, time.Hour)
	b := &operations.Approval{OperationID: other.OperationID, Revision: other.Revision, Approver: operations.ApproverUser}
	respelledOther := &operations.Request{Method: "POST", Path: "/orders/o1/respelled", Body: []byte(`{ }`)}
	checked, c, err = r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", b,
		respelledOther, facts, time.Minute, r.t0, none)
	require.NoError(t, err)
	require.NotNil(t, c, "Request.Same takes the other spelling")
	require.Equal(t, "respelled", checked.ActionKey)
	require.Equal(t, []byte(`{}`), checked.Request.Body, "the revision's own request is what is performed")

	declined := r.propose(t, "declined", 0, time.Hour)
	ok, err := r.store.DeclineUnclaimed(ctx, r.companyID, declined.OperationID, declined.Revision, &operations.Decline{}, r.t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, r.claimChecked(t, declined, "declined", time.Minute))

	replaced := r.propose(t, "replaced", 0, time.Hour)
	p := &operations.Proposal{ActionKey: "replaced", Terms: json.RawMessage(`{"order_id": "o1", "size": "L"}`), ExpiresIn: 3600}
	_, err = r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", p,
		&operations.Request{Method: "POST", Path: "/orders/o1/replaced", Body: []byte(`{}`)}, "", r.t0.Add(time.Second))
	require.NoError(t, err)
	require.False(t, r.claimChecked(t, replaced, "replaced", time.Minute))

	expired := r.propose(t, "expired", 0, time.Minute)
	require.False(t, r.claimChecked(t, expired, "expired", 2*time.Minute))
}

// TestClaimCheckedSeesARevisionRetiredWhileItWaits: a revision retired
// by a transaction that holds the operation's row when the one-statement
// claim begins (a claim released with the origin's decline, say) is not
// claimed once that transaction commits, though the statement's snapshot
// saw it approvable: the claim is made only on the row version it checked.
func TestClaimCheckedSeesARevisionRetiredWhileItWaits(t *testing.T) {
	t.Parallel()
	// The revision's request byte for byte (one statement, then the
	// transaction when it did not claim), and spelled otherwise (the
	// transaction alone).
	for name, body := range map[string]string{"exact": `{}`, "respelled": `{ }`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			claimRetiredWhileWaiting(t, body)
		})
	}
}

func claimRetiredWhileWaiting(t *testing.T, body string) {
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "exchange", 0, time.Hour)

	tx, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE operations SET updated_at = $3 WHERE company_id = $1 AND id = $2`,
		r.companyID, op.OperationID, r.t0.Add(time.Second))
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE operation_revisions SET declined_at = $4
		WHERE company_id = $1 AND operation_id = $2 AND revision = $3`,
		r.companyID, op.OperationID, op.Revision, r.t0.Add(time.Second))
	require.NoError(t, err)

	claimed := make(chan bool, 1)
	go func() {
		a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
		req := &operations.Request{Method: "POST", Path: "/orders/o1/exchange", Body: []byte(body)}
		_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, req,
			&verified.Facts{}, time.Minute, r.t0.Add(time.Minute),
			func(context.Context, *operations.Checked) error { return nil })
		claimed <- err == nil && c != nil
	}()
	// The claim's statement has begun and waits for the row.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH seen AS%')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	require.False(t, <-claimed, "a revision declined before the claim took the row was claimed")

	var status string
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT status FROM operations WHERE company_id = $1 AND id = $2`,
		r.companyID, op.OperationID).Scan(&status))
	require.Equal(t, "proposed", status)
}

// TestClaimCheckedTellsInvalidTextApart: a query that is not UTF-8 is
// stored as JSON with U+FFFD in its place, so the JSON of two such
// queries can be equal though they differ; neither is claimed as the
// revision's, since Request.Same compares their bytes.
func TestClaimCheckedTellsInvalidTextApart(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	p := &operations.Proposal{ActionKey: "exchange", Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 3600}
	op, err := r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", p,
		&operations.Request{Method: "POST", Path: "/orders/o1/exchange", Query: "a=\xff", Body: []byte(`{}`)}, "", r.t0)
	require.NoError(t, err)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	other := &operations.Request{Method: "POST", Path: "/orders/o1/exchange", Query: "a=\xfe", Body: []byte(`{}`)}
	_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, other,
		&verified.Facts{}, time.Minute, r.t0, func(context.Context, *operations.Checked) error { return nil })
	require.NoError(t, err)
	require.Nil(t, c, "another query whose JSON is the same was claimed")
}

// TestClaimCheckedOnceAmongMany: many requests carrying one approval at
// once, each the revision's request byte for byte or spelled otherwise,
// make exactly one claim.
func TestClaimCheckedOnceAmongMany(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	for round := range 5 {
		op := r.propose(t, fmt.Sprintf("many%d", round), 0, time.Hour)
		a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
		var (
			wg     sync.WaitGroup
			claims atomic.Int32
		)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := `{}`
				if i%3 == 0 {
					body = `{ }`
				}
				req := &operations.Request{Method: "POST", Path: fmt.Sprintf("/orders/o1/many%d", round), Body: []byte(body)}
				_, c, err := r.store.ClaimChecked(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, req,
					&verified.Facts{}, time.Minute, r.t0, func(context.Context, *operations.Checked) error { return nil })
				if err == nil && c != nil {
					claims.Add(1)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1, claims.Load(), "round %d", round)
	}
}
