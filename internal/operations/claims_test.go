package operations_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
)

// TestDeclineUnclaimed: the approval hook's decline retires a revision
// only while nobody has claimed the operation (extension 7: a performed
// or performing operation is never reported as declined).
func TestDeclineUnclaimed(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "claimed", 0, time.Hour)
	r.claim(t, op, time.Second)
	ok, err := r.store.DeclineUnclaimed(ctx, r.companyID, op.OperationID, op.Revision,
		&operations.Decline{Reason: "no"}, r.t0.Add(2*time.Second))
	require.NoError(t, err)
	require.False(t, ok, "a claimed operation is not declined")
	var declined *time.Time
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT declined_at FROM operation_revisions
		WHERE company_id = $1 AND operation_id = $2`, r.companyID, op.OperationID).Scan(&declined))
	require.Nil(t, declined)

	free := r.propose(t, "free", 0, time.Hour)
	ok, err = r.store.DeclineUnclaimed(ctx, r.companyID, free.OperationID, free.Revision,
		&operations.Decline{Reason: "no"}, r.t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	known, d, err := r.store.RevisionOf(ctx, r.companyID, free.OperationID, free.Revision)
	require.NoError(t, err)
	require.True(t, known)
	require.Equal(t, "no", d.Reason, "the decline is kept for a lookup of its ref")
}

// TestClaimConcludedOnce: a claim's send lease keeps a second send from
// starting until it lapses, and what concludes a send concludes only its
// own claim.
func TestClaimConcludedOnce(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "lease", 0, time.Hour)
	_, c := r.claim(t, op, 0) // lease for a minute from t0
	require.Equal(t, r.t0.Add(time.Minute), c.LeaseUntil.UTC())

	ok, until, err := r.store.Lease(ctx, r.companyID, op.OperationID, c.ID, time.Minute, r.t0.Add(59*time.Second))
	require.NoError(t, err)
	require.False(t, ok, "the first send may still be in flight")
	require.Equal(t, r.t0.Add(time.Minute), until.UTC())
	ok, until, err = r.store.Lease(ctx, r.companyID, op.OperationID, c.ID, time.Minute, r.t0.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r.t0.Add(2*time.Minute), until.UTC())
	ok, _, err = r.store.Lease(ctx, r.companyID, op.OperationID, "clm_other", time.Minute, r.t0.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, ok, "another claim's lease")

	resp := &operations.Response{Status: 201}
	done, err := r.store.Performed(ctx, r.companyID, op.OperationID, "clm_other", resp, r.t0.Add(90*time.Second))
	require.NoError(t, err)
	require.False(t, done, "another claim concludes nothing")
	released, err := r.store.Release(ctx, r.companyID, op.OperationID, "clm_other", operations.ReleaseRetry, nil,
		r.t0.Add(90*time.Second))
	require.NoError(t, err)
	require.False(t, released)
	done, err = r.store.Performed(ctx, r.companyID, op.OperationID, c.ID, resp, r.t0.Add(90*time.Second))
	require.NoError(t, err)
	require.True(t, done)
	released, err = r.store.Release(ctx, r.companyID, op.OperationID, c.ID, operations.ReleaseRetry, nil,
		r.t0.Add(91*time.Second))
	require.NoError(t, err)
	require.False(t, released, "a concluded claim is not released")
	ok, until, err = r.store.Lease(ctx, r.companyID, op.OperationID, c.ID, time.Minute, r.t0.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, ok)
	require.True(t, until.IsZero(), "nothing left to send")
}

// TestRetryReleaseKeepsRevision: a claim released because the origin
// asked for the request again later leaves the revision approvable, and a
// new claim of it gets a new ID.
func TestRetryReleaseKeepsRevision(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "retry", 0, time.Hour)
	_, first := r.claim(t, op, 0)
	released, err := r.store.Release(ctx, r.companyID, op.OperationID, first.ID, operations.ReleaseRetry, nil,
		r.t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, released)
	_, second := r.claim(t, op, 2*time.Second)
	require.NotEqual(t, first.ID, second.ID)
}

// TestUnknownResolved: a claim given up is unknown, still answered as
// performing, blocks a second operation for the same action, and is
// resolved once by the Company.
func TestUnknownResolved(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "unknown", 0, time.Hour)
	a, c := r.claim(t, op, 0)
	err := r.store.Resolve(ctx, r.companyID, op.OperationID, &operations.Resolution{Performed: true, By: "x", At: r.t0}, nil)
	require.ErrorIs(t, err, operations.ErrNotUnknown, "only an unknown outcome is resolved")
	ok, err := r.store.GiveUp(ctx, r.companyID, op.OperationID, c.ID, r.t0.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)

	req := &operations.Request{Method: "POST", Path: "/orders/o1/unknown", Body: []byte(`{}`)}
	checked, err := r.store.Check(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, req, r.t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, operations.Performing, checked.Verdict)
	_, err = r.store.Propose(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: "unknown", Terms: []byte(`{"order_id": "o1"}`)}, req, "", r.t0.Add(time.Hour))
	var busy *operations.PerformingError
	require.ErrorAs(t, err, &busy, "no second operation for an action whose outcome is unknown")
	n := r.sweep(t, 30*24*time.Hour)
	require.Zero(t, n, "an unknown operation is remembered")

	err = r.store.Resolve(ctx, r.companyID, op.OperationID, &operations.Resolution{Performed: false, By: "ops",
		At: r.t0.Add(2 * time.Hour)}, nil)
	require.NoError(t, err)
	checked, err = r.store.Check(ctx, r.companyID, r.owner, operations.InterfaceAPI, "orders-api", a, req, r.t0.Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, operations.Stale, checked.Verdict, "not performed: the approval gets a new revision")
	rec, err := r.store.Get(ctx, r.companyID, op.OperationID)
	require.NoError(t, err)
	require.Equal(t, "proposed", rec.Status)
	require.Equal(t, "ops", rec.Resolution.By)
	_, err = r.store.Get(ctx, r.companyID+1, op.OperationID)
	require.ErrorIs(t, err, operations.ErrNotFound, "another Company's")
}
