package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Performing approved operations (extension 6, 7; DESIGN.md, the origin
// contract): the Company's approval hook, and what the origin answers an
// approved call, through the gateway and the settle job.

// addHook starts an approval hook on host and makes it the Company's.
func addHook(t *testing.T, r *rig, host string) *opstest.Hook {
	t.Helper()
	h := opstest.StartHook(t, r.env, host, r.issuer)
	resp := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.slug,
		map[string]any{"operations": map[string]any{"enabled": true, "approval_hook": h.URL}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	return h
}

// apiKey returns a new Company API key for /company/v1.
func apiKey(t *testing.T, r *rig) string {
	t.Helper()
	resp := r.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+r.slug+"/api-keys", map[string]any{"name": "backend"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	key, _ := resp.JSON(t)["key"].(string)
	require.NotEmpty(t, key)
	return key
}

// listedOperation is an operation as GET /company/v1/operations lists it.
type listedOperation struct {
	OperationID string `json:"operation_id"`
	Status      string `json:"status"`
	Revision    string `json:"revision"`
	Revisions   []struct {
		Revision   string  `json:"revision"`
		DeclinedAt *string `json:"declined_at"`
		ReplacedAt *string `json:"replaced_at"`
	} `json:"revisions"`
	Approval map[string]any `json:"approval"`
}

// companyOperation returns operation id as the Company's backend sees it.
func companyOperation(t *testing.T, r *rig, key, id string) listedOperation {
	t.Helper()
	resp := r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/operations"), nil, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var page struct {
		Operations []listedOperation `json:"operations"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &page))
	for _, op := range page.Operations {
		if op.OperationID == id {
			return op
		}
	}
	t.Fatalf("operation %s not listed: %s", id, resp.Body)
	return listedOperation{}
}

// approvedCalls counts the origin's requests that carried an approval of
// operation id, and checks each one's Idempotency-Key.
func approvedCalls(t *testing.T, o *peers.Origin, op opstest.Op) int {
	t.Helper()
	n := 0
	for _, rec := range o.Received() {
		if rec.Claims == nil || rec.Claims.OperationID != op.Operation.OperationID {
			continue
		}
		n++
		require.Equal(t, op.Operation.OperationID+"."+op.Operation.Revision, rec.Header.Get("Idempotency-Key"))
		require.Equal(t, op.Operation.Revision, rec.Claims.Revision)
	}
	return n
}

// exchanger sends the jacket exchange as ada with the extension declared.
func exchanger(t *testing.T, r *rig) func(approvalHeader string) *peers.Response {
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	return func(approvalHeader string) *peers.Response {
		o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
		if approvalHeader != "" {
			o.header = append(o.header, "Poppy-Approval", approvalHeader)
		}
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
	}
}

// startJobs runs the platform's River client (the settle job) until the
// test ends.
func startJobs(t *testing.T, r *rig) {
	t.Helper()
	require.NoError(t, r.env.Platform.Jobs.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.env.Platform.Jobs.Stop(ctx)
	})
}

// waitSettled waits until the settle job of operation id has completed.
func waitSettled(t *testing.T, r *rig, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := r.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = $1 AND args->>'operation_id' = $2 AND state = 'completed'`,
			operations.SettleArgs{}.Kind(), id).Scan(&n)
		return err == nil && n == 1
	}, 40*time.Second, 200*time.Millisecond, "the settle job of %s completes", id)
}

// requireNoSettleJob waits until the settle sweep has run after every
// claim made before claimedBy had its lease lapse (the API's timeout of
// timeout plus the lease's margin), and checks that operation id was given
// no settle job: its claim was concluded by the request that made it.
func requireNoSettleJob(t *testing.T, r *rig, id string, claimedBy time.Time, timeout time.Duration) {
	t.Helper()
	lapsed := claimedBy.Add(timeout + 5*time.Second)
	require.Eventually(t, func() bool {
		var n int
		err := r.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'operations_settle_due' AND state = 'completed' AND attempted_at > $1`, lapsed).Scan(&n)
		return err == nil && n > 0
	}, 40*time.Second, 200*time.Millisecond, "the settle sweep runs after the lease lapsed")
	var n int
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
		WHERE kind = $1 AND args->>'operation_id' = $2`, operations.SettleArgs{}.Kind(), id).Scan(&n))
	require.Zero(t, n, "a claim its request concluded gets no settle job")
}

// verifyAt returns why token is not valid for a receiver with audience
// aud, or nil.
func verifyAt(t *testing.T, r *rig, token, aud string) error {
	t.Helper()
	resp := r.env.Do(t, http.MethodGet, r.issuer+"/oauth/jwks.json", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	set, err := jwk.Parse(resp.Body)
	require.NoError(t, err)
	_, err = verified.Verify(token, set, r.issuer, aud, time.Now())
	return err
}

// requireOriginError checks the answer to an approval the hook did not
// answer: an error, never a decline or a performance.
func requireOriginError(t *testing.T, resp *peers.Response) {
	t.Helper()
	requireError(t, resp, http.StatusBadGateway, origin.CodeUnreachable)
}

// TestOperationsApprovalHook: an approval that passes the checks is
// POSTed to the Company's approval hook with Poppy-Verified before
// anything is recorded or performed; 204 performs it, a decline performs
// nothing and retires the revision for good, and an error records nothing
// so that the same approval works once the hook answers.
func TestOperationsApprovalHook(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-hook")
	h := addHook(t, r, "hook-ops-hook.test")
	key := apiKey(t, r)
	exchange := exchanger(t, r)

	t.Run("204 performs", func(t *testing.T) {
		op := opstest.RequireOperation(t, exchange(""))
		require.Empty(t, h.Calls(), "no approval, no hook")
		done := exchange(opstest.Approval(op, `, reference="apr_1"`))
		require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
		require.Equal(t, int32(1), x.Performed.Load())
		require.Equal(t, 1, approvedCalls(t, r.origin, op))

		calls := h.Calls()
		require.Len(t, calls, 1)
		last := h.Origin.Last()
		require.Equal(t, http.MethodPost, last.Method)
		require.Equal(t, "application/json", last.Header.Get("Content-Type"))
		claims := r.verify(t, last.Header.Get("Poppy-Verified"), h.URL)
		require.Equal(t, h.URL, claims.Audience)
		require.Equal(t, op.Operation.OperationID, claims.OperationID)
		require.Equal(t, op.Operation.Revision, claims.Revision)
		require.Equal(t, "user", claims.Approver)
		require.NotEmpty(t, claims.Account, "the facts of the approving request")
		require.Error(t, verifyAt(t, r, last.Header.Get("Poppy-Verified"), r.origin.BaseURL()),
			"the hook's Poppy-Verified is not valid at the origin")

		var body struct {
			Interface string          `json:"interface"`
			Target    string          `json:"target"`
			Op        json.RawMessage `json:"operation"`
			Approval  map[string]any  `json:"approval"`
		}
		require.NoError(t, json.Unmarshal(calls[0], &body), "%s", calls[0])
		require.Equal(t, "api", body.Interface)
		require.Equal(t, proxyAPI, body.Target)
		var sent struct {
			OperationID string          `json:"operation_id"`
			Revision    string          `json:"revision"`
			Summary     string          `json:"summary"`
			Terms       json.RawMessage `json:"terms"`
			ExpiresAt   string          `json:"expires_at"`
		}
		require.NoError(t, json.Unmarshal(body.Op, &sent))
		require.Equal(t, op.Operation.OperationID, sent.OperationID)
		require.Equal(t, op.Operation.Revision, sent.Revision)
		require.Equal(t, op.Operation.Summary, sent.Summary)
		require.JSONEq(t, string(op.Operation.Terms), string(sent.Terms))
		require.NotEmpty(t, sent.ExpiresAt)
		require.Equal(t, map[string]any{"operation_id": op.Operation.OperationID, "revision": op.Operation.Revision,
			"approver": "user", "approved_at": float64(1791487260), "input_type": "tap", "reference": "apr_1"}, body.Approval)

		// A retry gets the stored answer without asking the hook again.
		retry := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusCreated, retry.Status)
		require.Equal(t, string(done.Body), string(retry.Body))
		require.Len(t, h.Calls(), 1)
	})

	t.Run("decline", func(t *testing.T) {
		before := x.Performed.Load()
		op := opstest.RequireOperation(t, exchange(""))
		h.Mode.Store("decline")
		resp := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		require.Equal(t, "application/json", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
		require.JSONEq(t, fmt.Sprintf(`{"error": "approval_declined", "operation_id": %q, "revision": %q,
			"reason": "Exchanges over $50 need the account holder.",
			"alternative": {"instructions": "Exchange it in the app.",
				"references": [{"type": "web", "url": "https://shop.example/exchanges"}]}}`,
			op.Operation.OperationID, op.Operation.Revision), string(resp.Body))
		require.Zero(t, approvedCalls(t, r.origin, op), "the origin is not asked to perform")
		listed := companyOperation(t, r, key, op.Operation.OperationID)
		require.Equal(t, "proposed", listed.Status)
		require.Nil(t, listed.Approval, "a declined approval is not recorded")

		// The same approval again, the hook willing now: never accepted,
		// never performed; a new revision instead.
		h.Mode.Store("ok")
		hooked := len(h.Calls())
		again := opstest.RequireOperation(t, exchange(opstest.Approval(op, "")))
		require.Equal(t, op.Operation.OperationID, again.Operation.OperationID)
		require.NotEqual(t, op.Operation.Revision, again.Operation.Revision)
		require.Len(t, h.Calls(), hooked, "a declined revision fails the checks before the hook")
		plain := opstest.RequireOperation(t, exchange(""))
		require.NotEqual(t, op.Operation.Revision, plain.Operation.Revision, "a declined revision is never offered again")
		require.Zero(t, approvedCalls(t, r.origin, op))
		require.Equal(t, before, x.Performed.Load())

		// A decline whose alternative links over http: the alternative is
		// dropped, the decline stands.
		h.Mode.Store("decline-http")
		resp = exchange(opstest.Approval(plain, ""))
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		require.JSONEq(t, fmt.Sprintf(`{"error": "approval_declined", "operation_id": %q, "revision": %q,
			"reason": "Not today."}`, plain.Operation.OperationID, plain.Operation.Revision), string(resp.Body))
		require.Zero(t, approvedCalls(t, r.origin, plain))
		require.Equal(t, before, x.Performed.Load())

		// A decline the platform cannot read is still a decline, with
		// nothing of its body.
		op = opstest.RequireOperation(t, exchange(""))
		h.Mode.Store("decline-garbage")
		resp = exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		require.JSONEq(t, fmt.Sprintf(`{"error": "approval_declined", "operation_id": %q, "revision": %q}`,
			op.Operation.OperationID, op.Operation.Revision), string(resp.Body))
		require.Zero(t, approvedCalls(t, r.origin, op))
		h.Mode.Store("ok")
	})

	t.Run("hook fails, then answers", func(t *testing.T) {
		op := opstest.RequireOperation(t, exchange(""))
		// Neither 204 nor a decline: an error, whatever else it says.
		for _, mode := range []string{"fail", "redirect", "json", "forbidden"} {
			h.Mode.Store(mode)
			requireOriginError(t, exchange(opstest.Approval(op, "")))
		}
		listed := companyOperation(t, r, key, op.Operation.OperationID)
		require.Equal(t, "proposed", listed.Status, "nothing recorded")
		require.Equal(t, op.Operation.Revision, listed.Revision)
		require.Nil(t, listed.Approval)
		for _, rev := range listed.Revisions {
			if rev.Revision == op.Operation.Revision {
				require.Nil(t, rev.DeclinedAt, "an error is not a decline")
				require.Nil(t, rev.ReplacedAt)
			}
		}
		require.Zero(t, approvedCalls(t, r.origin, op))

		// The same approval once the hook answers 204.
		h.Mode.Store("ok")
		before := x.Performed.Load()
		done := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
		require.Equal(t, before+1, x.Performed.Load())
		require.Equal(t, 1, approvedCalls(t, r.origin, op))
		require.Equal(t, "performed", companyOperation(t, r, key, op.Operation.OperationID).Status)
	})
}

// TestOperationsApprovalHookTimeout: a hook that does not answer in time
// is an error that records nothing; the same approval works later.
func TestOperationsApprovalHookTimeout(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-hook-slow")
	h := addHook(t, r, "hook-ops-hook-slow.test")
	key := apiKey(t, r)
	exchange := exchanger(t, r)

	op := opstest.RequireOperation(t, exchange(""))
	h.Mode.Store("hang")
	started := time.Now()
	requireOriginError(t, exchange(opstest.Approval(op, "")))
	require.Less(t, time.Since(started), 19*time.Second, "the platform stops waiting for the hook")
	listed := companyOperation(t, r, key, op.Operation.OperationID)
	require.Equal(t, "proposed", listed.Status, "nothing recorded")
	require.Nil(t, listed.Approval)
	require.Zero(t, approvedCalls(t, r.origin, op))

	h.Mode.Store("ok")
	done := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	require.Equal(t, int32(1), x.Performed.Load())
}

// TestOperationsOrigin500Settles: an approved call that the origin answers
// with 500 has an unknown outcome: 503 with Retry-After to it and to every
// retry, never a failure; the settle job sends the same request with the
// same Idempotency-Key until the origin answers, and then every retry gets
// that answer and the action was performed once.
func TestOperationsOrigin500Settles(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-500")
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
	var failures atomic.Int32
	failures.Store(2) // the first call and the settle job's first try
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" && failures.Add(-1) >= 0 {
			http.Error(w, "database unavailable", http.StatusInternalServerError)
			return
		}
		x.Serve(w, req)
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))

	for range 3 {
		resp := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s", resp.Body)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
		require.Equal(t, "unavailable", resp.JSON(t)["error"])
	}
	require.Equal(t, 1, approvedCalls(t, r.origin, op), "retries wait for the outcome; they do not call the origin")
	require.Zero(t, x.Performed.Load())

	startJobs(t, r)
	var done *peers.Response
	require.Eventually(t, func() bool {
		done = exchange(opstest.Approval(op, ""))
		return done.Status != http.StatusServiceUnavailable
	}, 45*time.Second, 500*time.Millisecond, "the settle job learns the outcome")
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	require.Equal(t, "/orders/o1/exchanges/ex_1", done.Header.Get("Location"))
	require.Equal(t, int32(1), x.Performed.Load(), "performed once")
	require.Equal(t, 3, approvedCalls(t, r.origin, op), "the first call and two settle tries, with the same key")
	for range 2 {
		retry := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusCreated, retry.Status)
		require.Equal(t, string(done.Body), string(retry.Body))
	}
	require.Equal(t, 3, approvedCalls(t, r.origin, op))
	waitSettled(t, r, op.Operation.OperationID)
	require.Equal(t, int32(1), x.Performed.Load())
}

// TestOperationsAnswerTooLarge: an origin's answer to an approved call
// larger than the API's max_response_bytes still says the action was
// performed: its status, Location and ETag are kept without the body, and
// nothing asks the origin again: the claim gets no settle job.
func TestOperationsAnswerTooLarge(t *testing.T) {
	t.Parallel()
	r, _ := newOperationsRig(t, "ops-large")
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1, MaxResponseBytes: 1024})
	var performed atomic.Int32
	proposals := opstest.NewExchangeOrigin()
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID == "" {
			proposals.Serve(w, req)
			return
		}
		n := performed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/o1/exchanges/ex_%d", n))
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"exchange_id": "ex_%d", "receipt": %q}`, n, strings.Repeat("x", 4096))
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))

	for i := range 3 {
		resp := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusCreated, resp.Status, "try %d: %s", i, resp.Body)
		require.Equal(t, "/orders/o1/exchanges/ex_1", resp.Header.Get("Location"))
		require.Equal(t, `"v1"`, resp.Header.Get("ETag"))
		require.Empty(t, resp.Body, "a body too large to keep is not sent, whole or in part")
	}
	require.Equal(t, int32(1), performed.Load())

	startJobs(t, r)
	requireNoSettleJob(t, r, op.Operation.OperationID, time.Now(), time.Second)
	require.Equal(t, 1, approvedCalls(t, r.origin, op), "the outcome is known: nothing calls the origin again")
	require.Equal(t, int32(1), performed.Load())
}

// TestOperationsOrigin4xxStored: a 4xx answer to an approved call is the
// origin's answer: stored, returned to every retry, performed once.
func TestOperationsOrigin4xxStored(t *testing.T) {
	t.Parallel()
	r, _ := newOperationsRig(t, "ops-422")
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
	proposals := opstest.NewExchangeOrigin()
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID == "" {
			proposals.Serve(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"title": "The order was already exchanged."}`)
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))

	first := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusUnprocessableEntity, first.Status, "%s", first.Body)
	require.Equal(t, "application/problem+json", first.Header.Get("Content-Type"))
	require.JSONEq(t, `{"title": "The order was already exchanged."}`, string(first.Body))
	for range 2 {
		retry := exchange(opstest.Approval(op, ""))
		require.Equal(t, http.StatusUnprocessableEntity, retry.Status)
		require.Equal(t, "application/problem+json", retry.Header.Get("Content-Type"))
		require.Equal(t, string(first.Body), string(retry.Body))
	}
	startJobs(t, r)
	requireNoSettleJob(t, r, op.Operation.OperationID, time.Now(), time.Second)
	require.Equal(t, 1, approvedCalls(t, r.origin, op), "asked once")
}

// TestOperationsUnusableNewTerms: an origin that answers an approved call
// with a proposal the platform cannot use performed nothing: an error
// answer, and the approved revision is retired, so the same approval gets
// a new revision and is never performed.
func TestOperationsUnusableNewTerms(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-unusable")
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" {
			w.Header().Set("Content-Type", "application/poppy-proposal+json")
			_, _ = io.WriteString(w, `{"terms": ["not", "an", "object"]}`)
			return
		}
		x.Serve(w, req)
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))
	requireOriginError(t, exchange(opstest.Approval(op, "")))
	again := opstest.RequireOperation(t, exchange(opstest.Approval(op, "")))
	require.Equal(t, op.Operation.OperationID, again.Operation.OperationID)
	require.NotEqual(t, op.Operation.Revision, again.Operation.Revision)
	require.Equal(t, 1, approvedCalls(t, r.origin, op))
	require.Zero(t, x.Performed.Load())
}
