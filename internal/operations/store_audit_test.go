package operations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// ids returns the operation IDs of recs in order.
func ids(recs []*operations.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.OperationID
	}
	return out
}

// TestSearchFilters: each filter keeps only the operations it names, the
// pages follow one another newest first with no operation twice, and
// another Company's operations are never listed.
func TestSearchFilters(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	a := r.propose(t, "a", 0, time.Hour)
	b := r.propose(t, "b", time.Minute, time.Hour)
	_, claim := r.claim(t, b, time.Minute)
	ok, err := r.store.GiveUp(ctx, r.companyID, b.OperationID, claim.ID, r.t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	other := operations.Owner{ClientID: "https://other.test/client", UserID: "usr_other"}
	c, err := r.store.Propose(ctx, r.companyID, other, operations.InterfaceMCP, "track",
		&operations.Proposal{ActionKey: "c", Terms: json.RawMessage(`{"n": 1}`)},
		&operations.Request{Method: "POST", Path: "/track"}, "", r.t0.Add(2*time.Minute))
	require.NoError(t, err)
	var otherCo int64
	require.NoError(t, r.pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('other', '{}') RETURNING id`).
		Scan(&otherCo))
	_, err = r.store.Propose(ctx, otherCo, r.owner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: "a", Terms: json.RawMessage(`{"n": 1}`)},
		&operations.Request{Method: "POST", Path: "/x"}, "", r.t0)
	require.NoError(t, err)

	search := func(f operations.Filter, after string, limit int) []string {
		t.Helper()
		recs, err := r.store.Search(ctx, r.companyID, f, after, limit)
		require.NoError(t, err)
		return ids(recs)
	}
	require.Equal(t, []string{c.OperationID, b.OperationID, a.OperationID}, search(operations.Filter{}, "", 10))
	require.Equal(t, []string{b.OperationID}, search(operations.Filter{Status: operations.StatusUnknown}, "", 10))
	require.Equal(t, []string{c.OperationID}, search(operations.Filter{Interface: operations.InterfaceMCP}, "", 10))
	require.Equal(t, []string{c.OperationID}, search(operations.Filter{ClientID: other.ClientID}, "", 10))
	require.Equal(t, []string{b.OperationID, a.OperationID}, search(operations.Filter{Target: "orders-api"}, "", 10))
	require.Equal(t, []string{b.OperationID}, search(operations.Filter{Since: r.t0.Add(time.Minute),
		Until: r.t0.Add(2 * time.Minute)}, "", 10), "since included, until excluded")
	require.Empty(t, search(operations.Filter{Status: operations.StatusPerformed}, "", 10))
	require.Equal(t, []string{a.OperationID},
		search(operations.Filter{Status: operations.StatusProposed, Target: "orders-api"}, "", 10),
		"filters combine: b is unknown")
}

// TestSearchPages: keyset pages of a filtered search cover every operation
// it keeps once, in order.
func TestSearchPages(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	var want []string
	for i := range 5 {
		op := r.propose(t, fmt.Sprint("k", i), time.Duration(i)*time.Second, time.Hour)
		want = append([]string{op.OperationID}, want...)
	}
	var got []string
	after := ""
	for range 10 {
		page, err := r.store.Search(ctx, r.companyID, operations.Filter{Target: "orders-api"}, after, 2)
		require.NoError(t, err)
		got = append(got, ids(page)...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].OperationID
	}
	require.Equal(t, want, got)
}

// TestEachReadsEveryPage: Each calls its function with every operation
// the filter keeps, across more than one page of reading, and stops at
// the function's error.
func TestEachReadsEveryPage(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	const n = 205 // more than one page
	_, err := r.pool.Exec(ctx, `INSERT INTO operations (company_id, id, client_id, user_id, interface, target,
			action_key, revision, created_at, updated_at, expires_at)
		SELECT $1, 'op_' || lpad(i::text, 4, '0'), 'https://agent.test/client', 'usr', 'api', 'orders-api',
			'k' || i, 'r' || i, $2::timestamptz + i * interval '1 second', $2, $2::timestamptz + interval '1 day'
		FROM generate_series(1, $3) AS i`, r.companyID, r.t0, n)
	require.NoError(t, err)
	var got []string
	require.NoError(t, r.store.Each(ctx, r.companyID, operations.Filter{}, func(rec *operations.Record) error {
		got = append(got, rec.OperationID)
		return nil
	}))
	require.Len(t, got, n)
	require.Equal(t, fmt.Sprintf("op_%04d", n), got[0], "newest first")
	require.Equal(t, "op_0001", got[n-1])

	stop := errors.New("stop")
	calls := 0
	err = r.store.Each(ctx, r.companyID, operations.Filter{}, func(*operations.Record) error {
		calls++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}

// TestApprovalsListed: the approval an operation was claimed with is
// listed with its approver, when the Personal Agent says it approved it,
// its input type and when it was received; none for another Company.
func TestApprovalsListed(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "a", 0, time.Hour)
	none, err := r.store.Approvals(ctx, r.companyID, op.OperationID)
	require.NoError(t, err)
	require.Empty(t, none)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser,
		ApprovedAt: r.t0.Unix() + 5, InputType: "biometric"}
	_, err = r.store.Claim(ctx, r.companyID, a, &verified.Facts{}, time.Minute, r.t0.Add(10*time.Second))
	require.NoError(t, err)
	got, err := r.store.Approvals(ctx, r.companyID, op.OperationID)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, operations.ApproverUser, got[0].Approver)
	require.Equal(t, "biometric", got[0].InputType)
	require.Equal(t, r.t0.Add(5*time.Second), *got[0].ApprovedTime())
	require.True(t, got[0].ReceivedAt.Equal(r.t0.Add(10*time.Second)))
	require.False(t, got[0].Recorded)

	other, err := r.store.Approvals(ctx, r.companyID+1, op.OperationID)
	require.NoError(t, err)
	require.Empty(t, other, "another Company's operation has no approvals for this one")
}

// TestResolveUnknownRules: ResolveUnknown, what the Company API and the
// console call, lists every bad field, answers 404 for another Company's
// operation and 409 for one not unknown, with nothing changed, and
// records a valid resolution.
func TestResolveUnknownRules(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	ctx := context.Background()
	op := r.propose(t, "a", 0, time.Hour)
	yes, no := true, false

	_, err := r.store.ResolveUnknown(ctx, r.companyID, op.OperationID, &operations.ResolveRequest{
		By: " ", Note: "bad\x00note", Response: &operations.ResolveResponse{Status: 500}}, r.t0)
	e, ok := errors.AsType[*httpx.Error](err)
	require.True(t, ok, "got %v", err)
	var fields []string
	for _, f := range e.Fields {
		fields = append(fields, f.Field)
	}
	require.Equal(t, []string{"performed", "by", "note", "response.status"}, fields)

	_, err = r.store.ResolveUnknown(ctx, r.companyID, op.OperationID,
		&operations.ResolveRequest{Performed: &yes, By: "ops"}, r.t0)
	e, ok = errors.AsType[*httpx.Error](err)
	require.True(t, ok, "got %v", err)
	require.Equal(t, httpx.CodeConflict, e.Code, "a proposed operation is not resolved")

	_, claim := r.claim(t, op, time.Second)
	_, err = r.store.GiveUp(ctx, r.companyID, op.OperationID, claim.ID, r.t0.Add(time.Hour))
	require.NoError(t, err)
	for _, id := range []string{op.OperationID, "op_nope", "not an id!"} {
		_, err = r.store.ResolveUnknown(ctx, r.companyID+1, id, &operations.ResolveRequest{Performed: &no, By: "x"}, r.t0)
		e, ok = errors.AsType[*httpx.Error](err)
		require.True(t, ok, "got %v", err)
		require.Equal(t, httpx.CodeNotFound, e.Code)
	}
	rec, err := r.store.Get(ctx, r.companyID, op.OperationID)
	require.NoError(t, err)
	require.Equal(t, operations.StatusUnknown, rec.Status, "nothing changed by the refused resolutions")

	rec, err = r.store.ResolveUnknown(ctx, r.companyID, op.OperationID,
		&operations.ResolveRequest{Performed: &yes, By: " Ana (console) ", Note: "Seen in the ledger."}, r.t0.Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, operations.StatusPerformed, rec.Status)
	require.Equal(t, "Ana (console)", rec.Resolution.By)
	require.JSONEq(t, fmt.Sprintf(`{"operation_id": %q, "status": "performed"}`, op.OperationID), string(rec.Response.Body))
}
