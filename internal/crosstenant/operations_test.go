package crosstenant_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// opsRig proposes and claims A's operations.
type opsRig struct {
	w     *world
	store *operations.Store
	owner operations.Owner
	t0    time.Time
}

func (r *opsRig) request(key string) *operations.Request {
	return &operations.Request{Method: "POST", Path: "/orders/o1/" + key, Body: []byte(`{}`)}
}

func (r *opsRig) propose(t *testing.T, companyID int64, iface, key string) (*operations.Operation, *operations.Approval) {
	t.Helper()
	p := &operations.Proposal{ActionKey: key, Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 3600}
	op, err := r.store.Propose(r.w.ctx, companyID, r.owner, iface, "orders-api", p, r.request(key), "", r.t0)
	require.NoError(t, err)
	return op, &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
}

func (r *opsRig) claim(t *testing.T, a *operations.Approval) *operations.Claim {
	t.Helper()
	c, err := r.store.Claim(r.w.ctx, r.w.a.ID, a, &verified.Facts{}, time.Minute, r.t0)
	require.NoError(t, err)
	require.NotNil(t, c)
	return c
}

func TestOperations(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := operations.NewStore(w.pool)
	r := &opsRig{w: w, store: store, owner: operations.Owner{ClientID: "https://agent.test/client", UserID: "usr_1"},
		t0: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	ctx, a, b := w.ctx, w.a.ID, w.b.ID
	later := r.t0.Add(2 * time.Minute) // past the claims' send lease

	// A's operations: one proposed, one being performed, one unknown, and
	// three at the website (approval recorded, none, recorded and used).
	free, freeApproval := r.propose(t, a, operations.InterfaceAPI, "free")
	performing, performingApproval := r.propose(t, a, operations.InterfaceAPI, "performing")
	claim := r.claim(t, performingApproval)
	unknown, unknownApproval := r.propose(t, a, operations.InterfaceAPI, "unknown")
	unknownClaim := r.claim(t, unknownApproval)
	ok, err := store.GiveUp(ctx, a, unknown.OperationID, unknownClaim.ID, r.t0)
	require.NoError(t, err)
	require.True(t, ok)
	web, webApproval := r.propose(t, a, operations.InterfaceWeb, "web")
	ok, err = store.Record(ctx, a, webApproval, &verified.Facts{}, r.t0)
	require.NoError(t, err)
	require.True(t, ok)
	webFresh, webFreshApproval := r.propose(t, a, operations.InterfaceWeb, "web-fresh")
	webUsed, webUsedApproval := r.propose(t, a, operations.InterfaceWeb, "web-used")
	ok, err = store.Record(ctx, a, webUsedApproval, &verified.Facts{}, r.t0)
	require.NoError(t, err)
	require.True(t, ok)
	usedAt := r.t0.Add(time.Second)
	ok, err = store.UseUp(ctx, a, webUsedApproval, usedAt)
	require.NoError(t, err)
	require.True(t, ok)

	status := func(t *testing.T, id string) string {
		t.Helper()
		rec, err := store.Get(ctx, a, id)
		require.NoError(t, err)
		return rec.Status
	}
	approved := func(t *testing.T, id string) bool {
		t.Helper()
		l, err := store.Lookup(ctx, a, id)
		require.NoError(t, err)
		require.NotNil(t, l)
		return l.Approved
	}
	// keptA checks, as A, that each operation is as A left it.
	keptA := func(t *testing.T) {
		t.Helper()
		checked, err := store.Check(ctx, a, r.owner, operations.InterfaceAPI, "orders-api", freeApproval,
			r.request("free"), later)
		require.NoError(t, err)
		require.Equal(t, operations.Approved, checked.Verdict, "A's proposed revision is approvable")
		known, declined, err := store.RevisionOf(ctx, a, free.OperationID, free.Revision)
		require.NoError(t, err)
		require.True(t, known)
		require.Nil(t, declined)
		require.Equal(t, "proposed", status(t, free.OperationID))
		require.Equal(t, "performing", status(t, performing.OperationID))
		u, err := store.Performing(ctx, a, performing.OperationID, claim.ID)
		require.NoError(t, err)
		require.NotNil(t, u, "A's claim holds")
		require.Equal(t, "unknown", status(t, unknown.OperationID))
		require.True(t, approved(t, web.OperationID), "A's recorded approval is not used up")
		require.False(t, approved(t, webFresh.OperationID), "nothing recorded for A")
		require.False(t, approved(t, webUsed.OperationID), "A's used approval stays used")
		list, err := store.List(ctx, a, "", 100)
		require.NoError(t, err)
		require.Len(t, list, 6)
	}
	keptA(t)

	for _, c := range []struct {
		method string
		// call makes B's attempt and reports whether it reached A's
		// data.
		call func() (bool, error)
	}{
		{"Get", func() (bool, error) {
			_, err := store.Get(ctx, b, free.OperationID)
			if errors.Is(err, operations.ErrNotFound) {
				return false, nil
			}
			return true, err
		}},
		{"List", func() (bool, error) { l, err := store.List(ctx, b, "", 100); return len(l) > 0, err }},
		{"Search", func() (bool, error) {
			l, err := store.Search(ctx, b, operations.Filter{Status: "unknown"}, "", 100)
			return len(l) > 0, err
		}},
		{"Each", func() (bool, error) {
			n := 0
			err := store.Each(ctx, b, operations.Filter{}, func(*operations.Record) error { n++; return nil })
			return n > 0, err
		}},
		{"Approvals", func() (bool, error) {
			l, err := store.Approvals(ctx, b, web.OperationID)
			return len(l) > 0, err
		}},
		{"ResolveUnknown", func() (bool, error) {
			yes := true
			_, err := store.ResolveUnknown(ctx, b, unknown.OperationID, &operations.ResolveRequest{Performed: &yes, By: "b"}, later)
			if e, ok := errors.AsType[*httpx.Error](err); ok && e.Code == httpx.CodeNotFound {
				return false, nil
			}
			return true, err
		}},
		{"Lookup", func() (bool, error) { l, err := store.Lookup(ctx, b, web.OperationID); return l != nil, err }},
		{"RevisionOf", func() (bool, error) {
			known, _, err := store.RevisionOf(ctx, b, free.OperationID, free.Revision)
			return known, err
		}},
		{"State", func() (bool, error) {
			st, err := store.State(ctx, b, performing.OperationID, performing.Revision)
			return st != nil, err
		}},
		{"Check", func() (bool, error) {
			checked, err := store.Check(ctx, b, r.owner, operations.InterfaceAPI, "orders-api", freeApproval,
				r.request("free"), later)
			return err == nil && checked.Verdict != operations.Stale, err
		}},
		{"Claim", func() (bool, error) {
			c, err := store.Claim(ctx, b, freeApproval, &verified.Facts{}, time.Minute, later)
			return c != nil, err
		}},
		{"DeclineUnclaimed", func() (bool, error) {
			return store.DeclineUnclaimed(ctx, b, free.OperationID, free.Revision, &operations.Decline{Reason: "no"}, later)
		}},
		{"Record", func() (bool, error) {
			return store.Record(ctx, b, webFreshApproval, &verified.Facts{}, later)
		}},
		{"Find", func() (bool, error) {
			found, err := store.Find(ctx, b, r.owner, r.request("web"), later)
			return len(found) > 0, err
		}},
		{"UseUp", func() (bool, error) { return store.UseUp(ctx, b, webApproval, later) }},
		{"GiveBack", func() (bool, error) { return false, store.GiveBack(ctx, b, webUsedApproval, usedAt) }},
		{"Lease", func() (bool, error) {
			ok, until, err := store.Lease(ctx, b, performing.OperationID, claim.ID, time.Minute, later)
			return ok || !until.IsZero(), err
		}},
		{"Performing", func() (bool, error) {
			u, err := store.Performing(ctx, b, performing.OperationID, claim.ID)
			return u != nil, err
		}},
		{"Performed", func() (bool, error) {
			return store.Performed(ctx, b, performing.OperationID, claim.ID, &operations.Response{Status: 201}, later)
		}},
		{"Release", func() (bool, error) {
			return store.Release(ctx, b, performing.OperationID, claim.ID, operations.ReleaseDeclined,
				&operations.Decline{Reason: "no"}, later)
		}},
		{"GiveUp", func() (bool, error) { return store.GiveUp(ctx, b, performing.OperationID, claim.ID, later) }},
		{"Resolve", func() (bool, error) {
			err := store.Resolve(ctx, b, unknown.OperationID, &operations.Resolution{Performed: true, By: "b", At: later},
				&operations.Response{Status: 201})
			if errors.Is(err, operations.ErrNotFound) {
				return false, nil
			}
			return true, err
		}},
	} {
		t.Run("operations.Store/"+c.method, func(t *testing.T) {
			reached, err := c.call()
			require.NoError(t, err)
			require.False(t, reached, "B reached A's operation")
			keptA(t)
		})
	}
	t.Run("operations.Store/Propose", func(t *testing.T) {
		p := &operations.Proposal{ActionKey: "performing", Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 3600}
		op, err := store.Propose(ctx, b, r.owner, operations.InterfaceAPI, "orders-api", p, r.request("performing"), "", later)
		require.NoError(t, err, "A's operation being performed does not block B's")
		require.NotEqual(t, performing.OperationID, op.OperationID)
		keptA(t)
	})
}
