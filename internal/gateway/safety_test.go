package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The promises of the Operations extension at the interfaces, each
// through a sequence that once broke it: exact terms (extension 3, check
// 3), what the origin is told, answers never false (extension 7).

// TestOperationsExactNumbers: an approval of one amount never performs
// another. 9007199254740993 and 9007199254740992 are one float64; as
// request content they are two requests, so the approval of the first
// fails check 3 for the second and gets a new revision.
func TestOperationsExactNumbers(t *testing.T) {
	t.Parallel()
	r, _ := newOperationsRig(t, "ops-exact")
	var performed atomic.Int32
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		c := peers.OriginClaims(req)
		if c.OperationID == "" {
			w.Header().Set("Content-Type", "application/poppy-proposal+json")
			fmt.Fprintf(w, `{"action_key": "credit o1", "terms": {"credit": %s}}`, raw)
			return
		}
		performed.Add(1)
		// The origin is told exactly the approved terms.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"performed": %s, "terms": %s}`, raw, c.Terms)
	})
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	send := func(body, approvalHeader string) *peers.Response {
		o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
		if approvalHeader != "" {
			o.header = append(o.header, "Poppy-Approval", approvalHeader)
		}
		return r.call(t, http.MethodPost, api("/orders/o1/exchanges"), body, o)
	}
	op := opstest.RequireOperation(t, send(`{"amount": 9007199254740993}`, ""))
	// The same amount written otherwise is the same request.
	again := opstest.RequireOperation(t, send(`{ "amount" : 9007199254740993e0 }`, ""))
	require.Equal(t, op.Operation.Revision, again.Operation.Revision)

	// Another amount with the first's approval: a new revision, nothing
	// performed.
	other := opstest.RequireOperation(t, send(`{"amount": 9007199254740992}`, opstest.Approval(op, "")))
	require.Equal(t, op.Operation.OperationID, other.Operation.OperationID)
	require.NotEqual(t, op.Operation.Revision, other.Operation.Revision)
	require.Zero(t, performed.Load())

	// A body that names a member twice says two things: refused, nothing
	// recorded or sent.
	calls := len(r.origin.Received())
	dup := send(`{"amount": 1, "amount": 9007199254740993}`, "")
	require.Equal(t, http.StatusBadRequest, dup.Status, "%s", dup.Body)
	require.Equal(t, "invalid_request", dup.JSON(t)["error"])
	require.Len(t, r.origin.Received(), calls)

	// The approved amount, exactly, with its terms in Poppy-Verified.
	done := send(`{"amount": 9007199254740992}`, opstest.Approval(other, ""))
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	// JSONEq would compare as float64, where the two amounts are one.
	require.True(t, operations.SameJSON([]byte(`{"performed": {"amount": 9007199254740992},
		"terms": {"credit": {"amount": 9007199254740992}}}`), done.Body), "%s", done.Body)
	require.Equal(t, "credit o1", r.origin.Last().Claims.ActionKey)
	require.Equal(t, int32(1), performed.Load())
}

// TestOperationsHookDeclineLosesToClaim: the approval hook declines a
// second concurrent retry after the first has claimed the operation. The
// second is answered as extension 7 says (performing, then the stored
// answer), never approval_declined for an action that was performed.
func TestOperationsHookDeclineLosesToClaim(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-race")
	h := addHook(t, r, "hook-ops-race.test")
	sending, release := make(chan struct{}), make(chan struct{})
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" {
			close(sending) // claimed, and being sent
			<-release
		}
		x.Serve(w, req)
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))

	first := make(chan *peers.Response, 1)
	go func() { first <- exchange(opstest.Approval(op, "")) }()
	<-sending
	h.Mode.Store("decline")
	second := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusServiceUnavailable, second.Status, "%s", second.Body)
	require.NotEmpty(t, second.Header.Get("Retry-After"))
	require.NotContains(t, string(second.Body), "approval_declined")
	close(release)
	done := <-first
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)

	// Every later retry gets the stored answer, the hook declining or not.
	retry := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusCreated, retry.Status, "%s", retry.Body)
	require.Equal(t, string(done.Body), string(retry.Body))
	require.Equal(t, int32(1), x.Performed.Load())
	key := apiKey(t, r)
	listed := companyOperation(t, r, key, op.Operation.OperationID)
	require.Equal(t, "performed", listed.Status)
	require.Nil(t, listed.Revisions[0].DeclinedAt, "a decline that lost to a claim retires nothing")
}

// TestOperationsOutcomeClasses: what an origin's answer to an approved
// request means (docs/operations-extension.md, "What an answer means").
// 429 (and 408, 425) performed nothing: 503 with the origin's Retry-After,
// and the same approval performs it later. 409, an Idempotency-Key still
// in flight, says nothing of the outcome: 503, never stored as the answer;
// the settle job learns it.
func TestOperationsOutcomeClasses(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-classes")
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
	var answer atomic.Value
	answer.Store("")
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" {
			switch answer.Load() {
			case "429":
				w.Header().Set("Retry-After", "7")
				http.Error(w, "busy", http.StatusTooManyRequests)
				return
			case "409":
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusConflict)
				_, _ = io.WriteString(w, `{"title": "A request with this key is in progress."}`)
				return
			}
		}
		x.Serve(w, req)
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))

	answer.Store("429")
	busy := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusServiceUnavailable, busy.Status, "%s", busy.Body)
	require.Equal(t, "7", busy.Header.Get("Retry-After"))
	require.Contains(t, busy.JSON(t)["error_description"], "nothing was performed")
	answer.Store("")
	done := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusCreated, done.Status, "the same approval performs it: %s", done.Body)
	require.Equal(t, int32(1), x.Performed.Load())

	second := opstest.RequireOperation(t, exchange(""))
	require.NotEqual(t, op.Operation.OperationID, second.Operation.OperationID, "performed: a new action")
	answer.Store("409")
	inFlight := exchange(opstest.Approval(second, ""))
	require.Equal(t, http.StatusServiceUnavailable, inFlight.Status, "%s", inFlight.Body)
	require.NotContains(t, string(inFlight.Body), "in progress", "a 409 is not the operation's answer")
	require.Equal(t, http.StatusServiceUnavailable, exchange(opstest.Approval(second, "")).Status)
	answer.Store("")
	startJobs(t, r)
	waitSettled(t, r, second.Operation.OperationID)
	settled := exchange(opstest.Approval(second, ""))
	require.Equal(t, http.StatusCreated, settled.Status, "%s", settled.Body)
	require.Equal(t, int32(2), x.Performed.Load())
}

// TestOperationsUnknownResolved: an operation whose settle job cannot
// learn the outcome (its API removed after the claim) is not left
// performing for ever: it is unknown, still answered 503 (extension 7),
// and the Company resolves it through the Company API; retries then get
// the resolution's answer.
func TestOperationsUnknownResolved(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "ops-unknown")
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
	r.origin.Handle(http.MethodPost, "/orders/o1/exchanges", func(w http.ResponseWriter, req *http.Request) {
		if peers.OriginClaims(req).OperationID != "" {
			time.Sleep(1500 * time.Millisecond) // past the API's timeout
		}
		x.Serve(w, req)
	})
	exchange := exchanger(t, r)
	op := opstest.RequireOperation(t, exchange(""))
	require.Equal(t, http.StatusServiceUnavailable, exchange(opstest.Approval(op, "")).Status)
	key := apiKey(t, r)
	resp := r.env.Do(t, http.MethodDelete, r.env.PublicURL("/company/v1/apis/"+proxyAPI), nil, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)

	startJobs(t, r)
	get := func() map[string]any {
		resp := r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/operations/"+op.Operation.OperationID), nil,
			"Authorization", "Bearer "+key)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		return resp.JSON(t)
	}
	require.Eventually(t, func() bool { return get()["status"] == "unknown" }, 40*time.Second, 200*time.Millisecond)
	rec := get()
	revisions := rec["revisions"].([]any)
	require.Len(t, revisions, 1)
	require.Equal(t, op.Operation.Revision, revisions[0].(map[string]any)["revision"])
	require.NotNil(t, revisions[0].(map[string]any)["terms"], "every revision's terms")

	resolve := func(body string) *peers.Response {
		return r.env.Do(t, http.MethodPost, r.env.PublicURL("/company/v1/operations/"+op.Operation.OperationID+"/resolve"),
			strings.NewReader(body), "Authorization", "Bearer "+key, "Content-Type", "application/json")
	}
	bad := resolve(`{"by": "ops"}`)
	require.Equal(t, http.StatusBadRequest, bad.Status, "%s", bad.Body)
	require.Contains(t, string(bad.Body), "performed")
	require.Equal(t, "unknown", get()["status"], "a refused resolution changes nothing")
	ok := resolve(`{"performed": true, "by": "ops@stormline", "note": "exchange ex_1 found in the order system",
		"response": {"status": 201, "content_type": "application/json", "body": {"exchange_id": "ex_1"}}}`)
	require.Equal(t, http.StatusOK, ok.Status, "%s", ok.Body)
	var done struct {
		Status     string `json:"status"`
		Resolution struct {
			Performed bool   `json:"performed"`
			By        string `json:"by"`
			At        string `json:"at"`
		} `json:"resolution"`
	}
	require.NoError(t, json.Unmarshal(ok.Body, &done))
	require.Equal(t, "performed", done.Status)
	require.True(t, done.Resolution.Performed)
	require.Equal(t, "ops@stormline", done.Resolution.By)
	require.NotEmpty(t, done.Resolution.At)
	require.Equal(t, http.StatusConflict, resolve(`{"performed": false, "by": "ops"}`).Status, "resolved once")

	// The API registered again: a retry gets the resolution's answer.
	r.putAPI(t, registry.API{Name: proxyAPI, Origin: r.origin.BaseURL(), TimeoutSeconds: 1})
	retry := exchange(opstest.Approval(op, ""))
	require.Equal(t, http.StatusCreated, retry.Status, "%s", retry.Body)
	require.JSONEq(t, `{"exchange_id": "ex_1"}`, string(retry.Body))
	other := r.env.Do(t, http.MethodGet, r.env.PublicURL("/company/v1/operations/op_NOTOURS"), nil,
		"Authorization", "Bearer "+key)
	require.Equal(t, http.StatusNotFound, other.Status)
}
