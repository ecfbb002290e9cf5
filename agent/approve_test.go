package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"
)

const jacketOp = `{"operation_id":"exc_5Rt2","revision":"r1","summary":"Exchange for $70.00 more.",
"terms":{"order_id":"ord_7Hk2","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}},
"expires_at":"2099-01-01T00:00:00Z"}`

// exchangeAPI answers like an API with operations: approval_required
// without an approval, then per approval what answer says.
func exchangeAPI(t *testing.T, f *fake, answer func(n int, approval httpsfv.Dictionary, w http.ResponseWriter)) *atomic.Int32 {
	var approved atomic.Int32
	f.mux.HandleFunc("POST /api/exchanges", func(w http.ResponseWriter, r *http.Request) {
		require.NotEmpty(t, r.Header.Get("Poppy-Session"))
		require.Equal(t, `"operations";v="3"`, r.Header.Get("Poppy-Extensions"))
		if r.Header.Get("Poppy-Approval") == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"approval_required","operation":` + jacketOp + `}`))
			return
		}
		d, err := httpsfv.UnmarshalDictionary(r.Header.Values("Poppy-Approval"))
		require.NoError(t, err)
		answer(int(approved.Add(1)), *d, w)
	})
	return &approved
}

func member(d httpsfv.Dictionary, name string) any {
	m, _ := d.Get(name)
	it, _ := m.(httpsfv.Item)
	return it.Value
}

var jacket = map[string]any{"order_id": "ord_7Hk2", "replacement_sku": "stormline-insulated-m"}

// Approved by the User, performing at first (503 + Retry-After: the same
// approval again), then performed.
func TestCallApprovedByUserRetriesWhilePerforming(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var revisions []string
	n := exchangeAPI(t, f, func(n int, d httpsfv.Dictionary, w http.ResponseWriter) {
		require.Equal(t, "user", member(d, "approver"))
		require.Equal(t, "tap", member(d, "input_type"))
		revisions = append(revisions, member(d, "revision").(string))
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, map[string]any{"exchange": "done"})
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	var asked *Ask
	user := AsUser(func(_ context.Context, ask *Ask) (bool, string, error) {
		asked = ask
		return true, "tap", nil
	})
	res, err := c.NewSession().Call(f.ctx, Request{Method: http.MethodPost, URL: f.url("/api/exchanges"), JSON: jacket}, jacket, user)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Response.Status)
	require.Equal(t, "Stormline Outfitters", asked.Company)
	require.Empty(t, asked.Differences)
	require.Equal(t, int32(2), n.Load())
	require.Equal(t, []string{"r1", "r1"}, revisions, "the same approval while performing")
}

// An agent approval on an instruction that covers the terms; a decline
// is never sent again.
func TestCallAgentApprovalDeclinedIsNotResent(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	n := exchangeAPI(t, f, func(_ int, d httpsfv.Dictionary, w http.ResponseWriter) {
		require.Equal(t, "agent", member(d, "approver"))
		require.Nil(t, member(d, "input_type"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": "approval_declined", "operation_id": "exc_5Rt2", "revision": "r1", "reason": "Only the account holder."})
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	in := AsAgent(Instruction{Text: "approve exchanges under $100", Under: "100", Currency: "USD"})
	_, err = c.NewSession().Call(f.ctx, Request{Method: http.MethodPost, URL: f.url("/api/exchanges"), JSON: jacket}, jacket, in)
	var d *Declined
	require.True(t, errors.As(err, &d), "%v", err)
	require.Equal(t, "Only the account holder.", d.Reason)
	require.Equal(t, int32(1), n.Load())
}

// An instruction doesn't cover terms over its limit, or terms other than
// those asked for: nothing is approved.
func TestInstructionChecksTerms(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	n := exchangeAPI(t, f, func(_ int, _ httpsfv.Dictionary, w http.ResponseWriter) { writeJSON(w, map[string]any{}) })
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	for _, tc := range []struct {
		in       Instruction
		expected map[string]any
	}{
		{Instruction{Under: "50", Currency: "USD"}, jacket},
		{Instruction{Under: "100", Currency: "EUR"}, jacket},
		{Instruction{Under: "100", Currency: "USD"}, map[string]any{"replacement_sku": "stormline-insulated-l"}},
	} {
		_, err := s.Call(f.ctx, Request{Method: http.MethodPost, URL: f.url("/api/exchanges"), JSON: jacket}, tc.expected, AsAgent(tc.in))
		require.ErrorIs(t, err, ErrNotApproved)
	}
	require.Equal(t, int32(0), n.Load(), "no approval sent")
}
