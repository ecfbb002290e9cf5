package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// The Operations extension at an API (extension 4, 6, 7): the jacket
// exchange of the extension's examples through the gateway.

func newOperationsRig(t *testing.T, name string) (*rig, *opstest.ExchangeOrigin) {
	t.Helper()
	r := newRig(t, name)
	resp := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.slug, map[string]any{"operations": map[string]any{"enabled": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	x := opstest.NewExchangeOrigin()
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", x.Serve)
	return r, x
}

const jacket = `{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}`

func TestOperationsAPIJacketExchange(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-jacket")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	exchange := func(body, approvalHeader string, o opts) *peers.Response {
		o.token = token
		o.header = append(o.header, "Poppy-Extensions", opstest.Declares)
		if approvalHeader != "" {
			o.header = append(o.header, "Poppy-Approval", approvalHeader)
		}
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), body, o)
	}

	// Required: the origin proposes, the agent gets the operation.
	op := opstest.RequireOperation(t, exchange(jacket, "", opts{header: []string{"Idempotency-Key", "first-try"}}))
	require.JSONEq(t, `{"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m",
		"price_difference": {"amount": "70.00", "currency": "USD"}}`, string(op.Operation.Terms))
	require.Zero(t, x.Performed.Load())
	// The origin learns the request declared the extension (here by its
	// header): without it, approval would be the Company's own business.
	require.Equal(t, "3", r.origin.Last().Claims.Extensions["operations"])
	// The same request again: the same operation and revision.
	again := opstest.RequireOperation(t, exchange(jacket, "", opts{}))
	require.Equal(t, op.Operation, again.Operation)

	// Approved, in another Session of the same agent and User, with the
	// JSON members in another order and an unknown approval member.
	done := exchange(`{"replacement_sku": "stormline-insulated-m", "item_id": "itm_4Qa"}`, opstest.Approval(op, `, future=1`), opts{sub: "usr_test"})
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	require.Equal(t, int32(1), x.Performed.Load())
	last := r.origin.Last()
	require.Equal(t, op.Operation.OperationID+"."+op.Operation.Revision, last.Header.Get("Idempotency-Key"))
	require.Equal(t, op.Operation.OperationID, last.Claims.OperationID)
	require.Equal(t, op.Operation.Revision, last.Claims.Revision)
	require.Equal(t, "user", last.Claims.Approver)
	require.Empty(t, last.Header.Get("Poppy-Approval"))

	// Retried: the same stored answer, the origin not called.
	calls := len(r.origin.Received())
	retry := exchange(jacket, opstest.Approval(op, ""), opts{})
	require.Equal(t, http.StatusCreated, retry.Status)
	require.Equal(t, string(done.Body), string(retry.Body))
	require.Equal(t, "/orders/o1/exchanges/ex_1", retry.Header.Get("Location"), "the stored answer keeps what was made")
	require.Len(t, r.origin.Received(), calls)
	require.Equal(t, int32(1), x.Performed.Load())

	// The Company sees it for audits: revision, approval and outcome.
	list := r.env.Admin(t, http.MethodGet, "/admin/v1/companies/"+r.slug+"/operations", nil)
	require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
	var page struct {
		Operations []struct {
			OperationID string `json:"operation_id"`
			Status      string `json:"status"`
			Account     string `json:"account"`
			Revisions   []struct {
				Revision string `json:"revision"`
			} `json:"revisions"`
			Approval map[string]any `json:"approval"`
			Response struct {
				Status int `json:"status"`
			} `json:"response"`
		} `json:"operations"`
	}
	require.NoError(t, json.Unmarshal(list.Body, &page))
	require.Len(t, page.Operations, 1)
	got := page.Operations[0]
	require.Equal(t, op.Operation.OperationID, got.OperationID)
	require.Equal(t, "performed", got.Status)
	require.NotEmpty(t, got.Account)
	require.Len(t, got.Revisions, 1)
	require.Equal(t, op.Operation.Revision, got.Revisions[0].Revision)
	require.Equal(t, map[string]any{"operation_id": op.Operation.OperationID, "revision": op.Operation.Revision,
		"approver": "user", "approved_at": float64(1791487260), "input_type": "tap"}, got.Approval)
	require.Equal(t, http.StatusCreated, got.Response.Status)
	// Another Company sees none of them.
	other := addCompany(t, r.env, r.agent, "other", "origin-ops-other.test")
	none := r.env.Admin(t, http.MethodGet, "/admin/v1/companies/"+other.slug+"/operations", nil)
	require.JSONEq(t, `{"operations": [], "next": null}`, string(none.Body))
}

func TestOperationsAPIChecks(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-checks")
	ada := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	bob := r.signIn(t, r.agent, "bob", "orders:read", "orders:write")
	send := func(token, body, approvalHeader string, declare bool, sub ...string) *peers.Response {
		o := opts{token: token}
		if len(sub) > 0 {
			o.sub = sub[0]
		}
		if declare {
			o.header = append(o.header, "Poppy-Extensions", opstest.Declares)
		}
		if approvalHeader != "" {
			o.header = append(o.header, "Poppy-Approval", approvalHeader)
		}
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), body, o)
	}

	t.Run("undeclared", func(t *testing.T) {
		resp := send(ada, jacket, "", false)
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		require.Equal(t, "extension_required", resp.JSON(t)["error"])
		require.Equal(t, "operations", resp.JSON(t)["extension"])
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="extension_required"`)
	})
	t.Run("malformed or missing approver", func(t *testing.T) {
		op := opstest.RequireOperation(t, send(ada, jacket, "", true))
		for _, h := range []string{
			fmt.Sprintf(`operation_id=%q, revision=%q`, op.Operation.OperationID, op.Operation.Revision),
			fmt.Sprintf(`operation_id=%q, revision=%q, approver="someone"`, op.Operation.OperationID, op.Operation.Revision),
			`not a dictionary ((`,
		} {
			resp := send(ada, jacket, h, true)
			require.Equal(t, http.StatusBadRequest, resp.Status, "%s: %s", h, resp.Body)
			require.Equal(t, "invalid_request", resp.JSON(t)["error"])
		}
		require.Zero(t, x.Performed.Load())
	})
	t.Run("wrong revision, changed terms, other account, signed out", func(t *testing.T) {
		op := opstest.RequireOperation(t, send(ada, jacket, "", true))
		wrong := op
		wrong.Operation.Revision = "NOTAREVISION"
		fresh := opstest.RequireOperation(t, send(ada, jacket, opstest.Approval(wrong, ""), true))
		require.Equal(t, op.Operation.OperationID, fresh.Operation.OperationID)
		require.NotEqual(t, "NOTAREVISION", fresh.Operation.Revision)

		// The request asks for other terms: a new revision, never the
		// approval's.
		other := `{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-l"}`
		changed := opstest.RequireOperation(t, send(ada, other, opstest.Approval(op, ""), true))
		require.Equal(t, op.Operation.OperationID, changed.Operation.OperationID)
		require.NotEqual(t, op.Operation.Revision, changed.Operation.Revision)
		// The first revision was replaced: approving it now is stale too.
		replaced := opstest.RequireOperation(t, send(ada, jacket, opstest.Approval(op, ""), true))
		require.NotEqual(t, op.Operation.Revision, replaced.Operation.Revision)

		// Another User of the same agent cannot approve it either.
		otherUser := send(ada, jacket, opstest.Approval(replaced, ""), true, "usr_other")
		require.NotEqual(t, replaced.Operation.OperationID, opstest.RequireOperation(t, otherUser).Operation.OperationID)
		// Bob cannot approve ada's operation: handled as no approval.
		bobs := opstest.RequireOperation(t, send(bob, jacket, opstest.Approval(replaced, ""), true))
		require.NotEqual(t, replaced.Operation.OperationID, bobs.Operation.OperationID)
		// Signed out, the same agent and User: a challenge.
		resp := send("", jacket, opstest.Approval(replaced, ""), true)
		require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
		require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
		require.Zero(t, x.Performed.Load())
	})
	t.Run("expired", func(t *testing.T) {
		op := opstest.RequireOperation(t, send(ada, jacket, "", true))
		_, err := r.env.Pool.Exec(context.Background(), `UPDATE operation_revisions SET expires_at = now() - interval '1 second'
			WHERE company_id = $1 AND operation_id = $2`, r.companyID, op.Operation.OperationID)
		require.NoError(t, err)
		fresh := opstest.RequireOperation(t, send(ada, jacket, opstest.Approval(op, ""), true))
		require.Equal(t, op.Operation.OperationID, fresh.Operation.OperationID)
		require.NotEqual(t, op.Operation.Revision, fresh.Operation.Revision, "an expired revision is never performed")
		require.Zero(t, x.Performed.Load())
	})
	t.Run("the same terms under a stale revision get a new one", func(t *testing.T) {
		op := opstest.RequireOperation(t, send(ada, jacket, "", true))
		stale := op
		stale.Operation.Revision = "STALEREVISION"
		fresh := opstest.RequireOperation(t, send(ada, jacket, opstest.Approval(stale, ""), true))
		require.NotEqual(t, "STALEREVISION", fresh.Operation.Revision)
		require.Equal(t, op.Operation.Revision, fresh.Operation.Revision, "the current revision: the approval named another")
	})
	t.Run("declined, then resent", func(t *testing.T) {
		op := opstest.RequireOperation(t, send(ada, jacket, "", true))
		x.Decline.Store(true)
		resp := send(ada, jacket, opstest.Approval(op, ""), true)
		x.Decline.Store(false)
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		body := resp.JSON(t)
		require.Equal(t, "approval_declined", body["error"])
		require.Equal(t, op.Operation.OperationID, body["operation_id"])
		require.Equal(t, op.Operation.Revision, body["revision"])
		require.Equal(t, "Only the account holder can exchange this order.", body["reason"])
		// The declined revision is never offered or accepted again.
		plain := opstest.RequireOperation(t, send(ada, jacket, "", true))
		require.NotEqual(t, op.Operation.Revision, plain.Operation.Revision)
		again := opstest.RequireOperation(t, send(ada, jacket, opstest.Approval(op, ""), true))
		require.NotEqual(t, op.Operation.Revision, again.Operation.Revision)
		require.Zero(t, x.Performed.Load())
	})
}

func TestOperationsAPIConcurrentRetriesPerformOnce(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-storm")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
	op := opstest.RequireOperation(t, r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o))
	o.header = append(o.header, "Poppy-Approval", opstest.Approval(op, ""))
	const n = 100
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i] = r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o).Status
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), x.Performed.Load(), "performed exactly once")
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusServiceUnavailable}, s)
	}
	// Once settled, every retry gets the stored answer.
	require.Equal(t, http.StatusCreated, r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o).Status)
}

// TestOperationsAPIOriginTimeoutSettles: the first approved call times out
// at the origin, which did perform it; every retry meanwhile gets 503 with
// Retry-After, never a failure, and the settle job learns the outcome with
// the same Idempotency-Key, so the action is performed once and the stored
// answer comes back.
func TestOperationsAPIOriginTimeoutSettles(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-settle")
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
	require.NoError(t, r.env.Platform.Jobs.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.env.Platform.Jobs.Stop(ctx)
	})
	var slow atomic.Bool
	slow.Store(true)
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" && slow.CompareAndSwap(true, false) {
			// Performed, but the answer comes too late.
			rec := httptest.NewRecorder()
			x.Serve(rec, req)
			time.Sleep(1500 * time.Millisecond)
			return
		}
		x.Serve(w, req)
	})
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
	op := opstest.RequireOperation(t, r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o))
	o.header = append(o.header, "Poppy-Approval", opstest.Approval(op, ""))

	first := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	require.Equal(t, http.StatusServiceUnavailable, first.Status, "%s", first.Body)
	require.NotEmpty(t, first.Header.Get("Retry-After"))
	retry := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	require.Equal(t, http.StatusServiceUnavailable, retry.Status, "%s", retry.Body)
	// A new request for the same action meanwhile gets no second
	// operation, which could be approved and performed again.
	fresh := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket,
		opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}})
	require.Equal(t, http.StatusServiceUnavailable, fresh.Status, "%s", fresh.Body)
	require.Equal(t, "5", fresh.Header.Get("Retry-After"))
	var operations int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operations WHERE company_id = $1`,
		r.companyID).Scan(&operations))
	require.Equal(t, 1, operations)

	require.Eventually(t, func() bool {
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o).Status == http.StatusCreated
	}, 30*time.Second, 500*time.Millisecond, "the settle job finishes the operation")
	require.Equal(t, int32(1), x.Performed.Load(), "performed once, by the first call")
	var status string
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT status FROM operations WHERE company_id = $1 AND id = $2`,
		r.companyID, op.Operation.OperationID).Scan(&status))
	require.Equal(t, "performed", status)
}

// TestOperationsAPIProposalDatabaseDown: when PostgreSQL goes away while
// the origin answers with a proposal, the Personal Agent gets 503 with
// Retry-After, as for every request while the database is down, never a
// 500; nothing is recorded, and once the database is back the same
// request gets the operation.
func TestOperationsAPIProposalDatabaseDown(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-db-down")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	ctx := context.Background()
	var name string
	require.NoError(t, r.env.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
	admin, err := pgx.Connect(ctx, testdb.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	allow := func(on bool) {
		_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{name}.Sanitize(), on))
		require.NoError(t, err)
	}
	t.Cleanup(func() { allow(true) })

	var down atomic.Bool
	down.Store(true)
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if down.CompareAndSwap(true, false) {
			// Down between the forward and the proposal's record: every
			// connection of the platform's pool is closed, and no new one
			// is accepted.
			allow(false)
			_, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name)
			require.NoError(t, err)
		}
		x.Serve(w, req)
	})
	o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
	resp := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s", resp.Body)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Equal(t, "unavailable", resp.JSON(t)["error"], "%s", resp.Body)

	allow(true)
	var n int
	require.Eventually(t, func() bool {
		return r.env.Pool.QueryRow(ctx, `SELECT count(*) FROM operations`).Scan(&n) == nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Zero(t, n, "nothing was recorded")
	require.Eventually(t, func() bool {
		resp = r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
		return resp.Status != http.StatusServiceUnavailable
	}, 10*time.Second, 100*time.Millisecond)
	opstest.RequireOperation(t, resp)
	require.Zero(t, x.Performed.Load())
}
