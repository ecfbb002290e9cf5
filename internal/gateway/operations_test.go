package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/gateway"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The Operations extension at an API (extension 4, 6, 7): the jacket
// exchange of the extension's examples through the gateway.

const declares = `"operations";v="3"`

// exchangeOrigin answers POST /orders/o1/exchanges as the Company's origin
// does under the origin contract: without an approval, a proposal whose
// terms follow the request's replacement_sku; with one, it performs once
// per Idempotency-Key and counts its performances.
type exchangeOrigin struct {
	performed atomic.Int32
	decline   atomic.Bool
	mu        sync.Mutex
	keys      map[string]string // answer by Idempotency-Key
}

func (x *exchangeOrigin) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		SKU string `json:"replacement_sku"`
	}
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &body)
	c := peers.OriginClaims(r)
	if c.OperationID == "" {
		w.Header().Set("Content-Type", "application/poppy-proposal+json")
		fmt.Fprintf(w, `{"action_key": "exchange o1 itm_4Qa", "summary": "Exchange the jacket for %s, $70.00 more.",
			"terms": {"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": %q,
				"price_difference": {"amount": "70.00", "currency": "USD"}}}`, body.SKU, body.SKU)
		return
	}
	if x.decline.Load() {
		w.Header().Set("Content-Type", "application/poppy-decline+json")
		_, _ = io.WriteString(w, `{"reason": "Only the account holder can exchange this order."}`)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	x.mu.Lock()
	defer x.mu.Unlock()
	if answer, ok := x.keys[key]; ok {
		// The same key: the first answer again, nothing performed.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
		return
	}
	n := x.performed.Add(1)
	w.Header().Set("Location", fmt.Sprintf("/orders/o1/exchanges/ex_%d", n))
	answer := fmt.Sprintf(`{"exchange_id": "ex_%d", "operation_id": %q, "approver": %q}`, n, c.OperationID, c.Approver)
	x.keys[key] = answer
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

func newOperationsRig(t *testing.T, name string) (*rig, *exchangeOrigin) {
	t.Helper()
	r := newRig(t, name)
	resp := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.slug, map[string]any{"operations": map[string]any{"enabled": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	x := &exchangeOrigin{keys: map[string]string{}}
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", x.serve)
	return r, x
}

type opBody struct {
	Error     string `json:"error"`
	Operation struct {
		OperationID string          `json:"operation_id"`
		Revision    string          `json:"revision"`
		Summary     string          `json:"summary"`
		Terms       json.RawMessage `json:"terms"`
		ExpiresAt   string          `json:"expires_at"`
	} `json:"operation"`
}

func requireOperation(t *testing.T, resp *peers.Response) opBody {
	t.Helper()
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	var b opBody
	require.NoError(t, json.Unmarshal(resp.Body, &b))
	require.Equal(t, "approval_required", b.Error, "%s", resp.Body)
	require.NotEmpty(t, b.Operation.OperationID)
	require.NotEmpty(t, b.Operation.Revision)
	require.NotEmpty(t, b.Operation.ExpiresAt)
	return b
}

func approval(op opBody, extra string) string {
	return fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=1791487260, input_type="tap"%s`,
		op.Operation.OperationID, op.Operation.Revision, extra)
}

const jacket = `{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}`

func TestOperationsAPIJacketExchange(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-jacket")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	exchange := func(body, approvalHeader string, o opts) *peers.Response {
		o.token = token
		o.header = append(o.header, "Poppy-Extensions", declares)
		if approvalHeader != "" {
			o.header = append(o.header, "Poppy-Approval", approvalHeader)
		}
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), body, o)
	}

	// Required: the origin proposes, the agent gets the operation.
	op := requireOperation(t, exchange(jacket, "", opts{header: []string{"Idempotency-Key", "first-try"}}))
	require.JSONEq(t, `{"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m",
		"price_difference": {"amount": "70.00", "currency": "USD"}}`, string(op.Operation.Terms))
	require.Zero(t, x.performed.Load())
	// The origin learns the request declared the extension (here by its
	// header): without it, approval would be the Company's own business.
	require.Equal(t, "3", r.origin.Last().Claims.Extensions["operations"])
	// The same request again: the same operation and revision.
	again := requireOperation(t, exchange(jacket, "", opts{}))
	require.Equal(t, op.Operation, again.Operation)

	// Approved, in another Session of the same agent and User, with the
	// JSON members in another order and an unknown approval member.
	done := exchange(`{"replacement_sku": "stormline-insulated-m", "item_id": "itm_4Qa"}`, approval(op, `, future=1`), opts{sub: "usr_test"})
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	require.Equal(t, int32(1), x.performed.Load())
	last := r.origin.Last()
	require.Equal(t, op.Operation.OperationID+"."+op.Operation.Revision, last.Header.Get("Idempotency-Key"))
	require.Equal(t, op.Operation.OperationID, last.Claims.OperationID)
	require.Equal(t, op.Operation.Revision, last.Claims.Revision)
	require.Equal(t, "user", last.Claims.Approver)
	require.Empty(t, last.Header.Get("Poppy-Approval"))

	// Retried: the same stored answer, the origin not called.
	calls := len(r.origin.Received())
	retry := exchange(jacket, approval(op, ""), opts{})
	require.Equal(t, http.StatusCreated, retry.Status)
	require.Equal(t, string(done.Body), string(retry.Body))
	require.Equal(t, "/orders/o1/exchanges/ex_1", retry.Header.Get("Location"), "the stored answer keeps what was made")
	require.Len(t, r.origin.Received(), calls)
	require.Equal(t, int32(1), x.performed.Load())

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
			o.header = append(o.header, "Poppy-Extensions", declares)
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
		op := requireOperation(t, send(ada, jacket, "", true))
		for _, h := range []string{
			fmt.Sprintf(`operation_id=%q, revision=%q`, op.Operation.OperationID, op.Operation.Revision),
			fmt.Sprintf(`operation_id=%q, revision=%q, approver="someone"`, op.Operation.OperationID, op.Operation.Revision),
			`not a dictionary ((`,
		} {
			resp := send(ada, jacket, h, true)
			require.Equal(t, http.StatusBadRequest, resp.Status, "%s: %s", h, resp.Body)
			require.Equal(t, "invalid_request", resp.JSON(t)["error"])
		}
		require.Zero(t, x.performed.Load())
	})
	t.Run("wrong revision, changed terms, other account, signed out", func(t *testing.T) {
		op := requireOperation(t, send(ada, jacket, "", true))
		wrong := op
		wrong.Operation.Revision = "NOTAREVISION"
		fresh := requireOperation(t, send(ada, jacket, approval(wrong, ""), true))
		require.Equal(t, op.Operation.OperationID, fresh.Operation.OperationID)
		require.NotEqual(t, "NOTAREVISION", fresh.Operation.Revision)

		// The request asks for other terms: a new revision, never the
		// approval's.
		other := `{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-l"}`
		changed := requireOperation(t, send(ada, other, approval(op, ""), true))
		require.Equal(t, op.Operation.OperationID, changed.Operation.OperationID)
		require.NotEqual(t, op.Operation.Revision, changed.Operation.Revision)
		// The first revision was replaced: approving it now is stale too.
		replaced := requireOperation(t, send(ada, jacket, approval(op, ""), true))
		require.NotEqual(t, op.Operation.Revision, replaced.Operation.Revision)

		// Another User of the same agent cannot approve it either.
		otherUser := send(ada, jacket, approval(replaced, ""), true, "usr_other")
		require.NotEqual(t, replaced.Operation.OperationID, requireOperation(t, otherUser).Operation.OperationID)
		// Bob cannot approve ada's operation: handled as no approval.
		bobs := requireOperation(t, send(bob, jacket, approval(replaced, ""), true))
		require.NotEqual(t, replaced.Operation.OperationID, bobs.Operation.OperationID)
		// Signed out, the same agent and User: a challenge.
		resp := send("", jacket, approval(replaced, ""), true)
		require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
		require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
		require.Zero(t, x.performed.Load())
	})
	t.Run("expired", func(t *testing.T) {
		op := requireOperation(t, send(ada, jacket, "", true))
		_, err := r.env.Pool.Exec(context.Background(), `UPDATE operation_revisions SET expires_at = now() - interval '1 second'
			WHERE company_id = $1 AND operation_id = $2`, r.companyID, op.Operation.OperationID)
		require.NoError(t, err)
		fresh := requireOperation(t, send(ada, jacket, approval(op, ""), true))
		require.Equal(t, op.Operation.OperationID, fresh.Operation.OperationID)
		require.NotEqual(t, op.Operation.Revision, fresh.Operation.Revision, "an expired revision is never performed")
		require.Zero(t, x.performed.Load())
	})
	t.Run("the same terms under a stale revision get a new one", func(t *testing.T) {
		op := requireOperation(t, send(ada, jacket, "", true))
		stale := op
		stale.Operation.Revision = "STALEREVISION"
		fresh := requireOperation(t, send(ada, jacket, approval(stale, ""), true))
		require.NotEqual(t, "STALEREVISION", fresh.Operation.Revision)
		require.Equal(t, op.Operation.Revision, fresh.Operation.Revision, "the current revision: the approval named another")
	})
	t.Run("declined, then resent", func(t *testing.T) {
		op := requireOperation(t, send(ada, jacket, "", true))
		x.decline.Store(true)
		resp := send(ada, jacket, approval(op, ""), true)
		x.decline.Store(false)
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		body := resp.JSON(t)
		require.Equal(t, "approval_declined", body["error"])
		require.Equal(t, op.Operation.OperationID, body["operation_id"])
		require.Equal(t, op.Operation.Revision, body["revision"])
		require.Equal(t, "Only the account holder can exchange this order.", body["reason"])
		// The declined revision is never offered or accepted again.
		plain := requireOperation(t, send(ada, jacket, "", true))
		require.NotEqual(t, op.Operation.Revision, plain.Operation.Revision)
		again := requireOperation(t, send(ada, jacket, approval(op, ""), true))
		require.NotEqual(t, op.Operation.Revision, again.Operation.Revision)
		require.Zero(t, x.performed.Load())
	})
}

func TestOperationsAPIConcurrentRetriesPerformOnce(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-storm")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	o := opts{token: token, header: []string{"Poppy-Extensions", declares}}
	op := requireOperation(t, r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o))
	o.header = append(o.header, "Poppy-Approval", approval(op, ""))
	const n = 100
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i] = r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o).Status
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), x.performed.Load(), "performed exactly once")
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
	r.putAPI(t, gateway.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
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
			x.serve(rec, req)
			time.Sleep(1500 * time.Millisecond)
			return
		}
		x.serve(w, req)
	})
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	o := opts{token: token, header: []string{"Poppy-Extensions", declares}}
	op := requireOperation(t, r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o))
	o.header = append(o.header, "Poppy-Approval", approval(op, ""))

	first := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	require.Equal(t, http.StatusServiceUnavailable, first.Status, "%s", first.Body)
	require.NotEmpty(t, first.Header.Get("Retry-After"))
	retry := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	require.Equal(t, http.StatusServiceUnavailable, retry.Status, "%s", retry.Body)
	// A new request for the same action meanwhile gets no second
	// operation, which could be approved and performed again.
	fresh := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket,
		opts{token: token, header: []string{"Poppy-Extensions", declares}})
	require.Equal(t, http.StatusServiceUnavailable, fresh.Status, "%s", fresh.Body)
	require.Equal(t, "5", fresh.Header.Get("Retry-After"))
	var operations int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operations WHERE company_id = $1`,
		r.companyID).Scan(&operations))
	require.Equal(t, 1, operations)

	require.Eventually(t, func() bool {
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o).Status == http.StatusCreated
	}, 30*time.Second, 500*time.Millisecond, "the settle job finishes the operation")
	require.Equal(t, int32(1), x.performed.Load(), "performed once, by the first call")
	var status string
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT status FROM operations WHERE company_id = $1 AND id = $2`,
		r.companyID, op.Operation.OperationID).Scan(&status))
	require.Equal(t, "performed", status)
}
