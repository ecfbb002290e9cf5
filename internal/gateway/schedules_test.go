package gateway_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations/opstest"
)

// Randomized schedules at the interfaces of the Operations extension, the
// companion of internal/operations' engine harness (TestEngineSchedules):
// the engine's invariants hold there; these hold where the interfaces
// meet the origin and the Personal Agent. Each schedule is seeded, and a
// failure names its seed (opstest.Seeds).

// TestInterfaceSchedulesAPI: whatever a Personal Agent sends, an origin
// can trust Idempotency-Key and the approval: a request reaches it with
// Idempotency-Key only when Poppy-Verified states an approval, and then
// the key names exactly that revision; Poppy-Approval never reaches it.
func TestInterfaceSchedulesAPI(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "sched-api")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	for _, seed := range opstest.Seeds() {
		rnd := rand.New(rand.NewPCG(seed, 7))
		var known []opstest.Op
		for step := range 24 {
			o := opts{token: token, header: []string{"Poppy-Extensions", opstest.Declares}}
			if rnd.IntN(2) == 0 {
				o.header = append(o.header, "Idempotency-Key", fmt.Sprintf("pa-key-%d-%d", seed, step))
			}
			switch pick := rnd.IntN(4); {
			case pick == 0 && len(known) > 0:
				// An approval of an operation proposed earlier: performed
				// once, or stale, or the stored answer.
				o.header = append(o.header, "Poppy-Approval", opstest.Approval(known[rnd.IntN(len(known))], ""))
			case pick == 1:
				// An approval of an operation nobody proposed: handled as a
				// request without one, and forwarded.
				o.header = append(o.header, "Poppy-Approval",
					fmt.Sprintf(`operation_id="op_forged%d", revision="r%d", approver="user"`, seed, step))
			}
			x.Decline.Store(rnd.IntN(5) == 0)
			resp := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
			if resp.Status == http.StatusForbidden && resp.JSON(t)["error"] == "approval_required" {
				known = append(known, opstest.RequireOperation(t, resp))
			}
		}
		for _, rec := range r.origin.Received() {
			key, approvalHeader := rec.Header.Get("Idempotency-Key"), rec.Header.Get("Poppy-Approval")
			require.Empty(t, approvalHeader, "seed %d: a Personal Agent's Poppy-Approval reached the origin", seed)
			if rec.Claims == nil || rec.Claims.OperationID == "" {
				require.Empty(t, key, "seed %d: an Idempotency-Key reached the origin without an approval", seed)
				continue
			}
			require.Equal(t, rec.Claims.OperationID+"."+rec.Claims.Revision, key,
				"seed %d: the key names the approved revision", seed)
		}
	}
}
