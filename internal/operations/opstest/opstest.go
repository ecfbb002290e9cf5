package opstest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Declares is Poppy-Extensions declaring the extension, version 3.
const Declares = `"operations";v="3"`

// Op is an approval_required answer.
type Op struct {
	Error     string `json:"error"`
	Operation struct {
		OperationID string          `json:"operation_id"`
		Revision    string          `json:"revision"`
		Summary     string          `json:"summary"`
		Terms       json.RawMessage `json:"terms"`
		ExpiresAt   string          `json:"expires_at"`
	} `json:"operation"`
}

// RequireOperation checks that resp is approval_required with an
// operation, and returns it.
func RequireOperation(t testing.TB, resp *peers.Response) Op {
	t.Helper()
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	var b Op
	require.NoError(t, json.Unmarshal(resp.Body, &b))
	require.Equal(t, "approval_required", b.Error, "%s", resp.Body)
	require.NotEmpty(t, b.Operation.OperationID)
	require.NotEmpty(t, b.Operation.Revision)
	require.NotEmpty(t, b.Operation.ExpiresAt)
	return b
}

// Approval is the Poppy-Approval of op's revision by the User, with
// extra parameters appended.
func Approval(op Op, extra string) string {
	return fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=1791487260, input_type="tap"%s`,
		op.Operation.OperationID, op.Operation.Revision, extra)
}

// ExchangeOrigin answers POST /orders/o1/exchanges as the Company's origin
// does under the origin contract: without an approval, a proposal whose
// terms follow the request's replacement_sku; with one, it performs once
// per Idempotency-Key and counts its performances.
type ExchangeOrigin struct {
	Performed atomic.Int32
	// Decline answers an approved request with a decline.
	Decline atomic.Bool
	mu      sync.Mutex
	keys    map[string]string // answer by Idempotency-Key
}

// NewExchangeOrigin returns an ExchangeOrigin that performed nothing.
func NewExchangeOrigin() *ExchangeOrigin { return &ExchangeOrigin{keys: map[string]string{}} }

// Serve answers a request.
func (x *ExchangeOrigin) Serve(w http.ResponseWriter, r *http.Request) {
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
	if x.Decline.Load() {
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
	n := x.Performed.Add(1)
	w.Header().Set("Location", fmt.Sprintf("/orders/o1/exchanges/ex_%d", n))
	answer := fmt.Sprintf(`{"exchange_id": "ex_%d", "operation_id": %q, "approver": %q}`, n, c.OperationID, c.Approver)
	x.keys[key] = answer
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}
