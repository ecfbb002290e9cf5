package gateway_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/gateway"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Randomized schedules at the interfaces of the Operations extension, the
// companion of internal/operations' engine harness (TestEngineSchedules):
// the engine's invariants hold there; these hold where the interfaces
// meet the origin and the Personal Agent. Each schedule is seeded, and a
// failure names its seed (-gw.seed=N reruns it, -gw.schedules=N runs
// more).

var (
	gwSeed      = flag.Uint64("gw.seed", 0, "run only the interface schedule of this seed")
	gwSchedules = flag.Int("gw.schedules", 4, "interface schedules per interface")
)

// scheduleSeeds returns the seeds to run.
func scheduleSeeds() []uint64 {
	if *gwSeed != 0 {
		return []uint64{*gwSeed}
	}
	seeds := make([]uint64, *gwSchedules)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// TestInterfaceSchedulesAPI: whatever a Personal Agent sends, an origin
// can trust Idempotency-Key and the approval: a request reaches it with
// Idempotency-Key only when Poppy-Verified states an approval, and then
// the key names exactly that revision; Poppy-Approval never reaches it.
func TestInterfaceSchedulesAPI(t *testing.T) {
	t.Parallel()
	r, x := newOperationsRig(t, "sched-api")
	token := r.signIn(t, r.agent, "ada", "orders:read", "orders:write")
	for _, seed := range scheduleSeeds() {
		rnd := rand.New(rand.NewPCG(seed, 7))
		var known []opBody
		for step := range 24 {
			o := opts{token: token, header: []string{"Poppy-Extensions", declares}}
			if rnd.IntN(2) == 0 {
				o.header = append(o.header, "Idempotency-Key", fmt.Sprintf("pa-key-%d-%d", seed, step))
			}
			switch pick := rnd.IntN(4); {
			case pick == 0 && len(known) > 0:
				// An approval of an operation proposed earlier: performed
				// once, or stale, or the stored answer.
				o.header = append(o.header, "Poppy-Approval", approval(known[rnd.IntN(len(known))], ""))
			case pick == 1:
				// An approval of an operation nobody proposed: handled as a
				// request without one, and forwarded.
				o.header = append(o.header, "Poppy-Approval",
					fmt.Sprintf(`operation_id="op_forged%d", revision="r%d", approver="user"`, seed, step))
			}
			x.decline.Store(rnd.IntN(5) == 0)
			resp := r.call(t, http.MethodPost, api("/orders/o1/exchanges"), jacket, o)
			if resp.Status == http.StatusForbidden && resp.JSON(t)["error"] == "approval_required" {
				known = append(known, requireOperation(t, resp))
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

// TestInterfaceSchedulesWebsite: a Personal Agent's lookup of a website
// operation's ref never hides a decline. Once the approval hook or the
// origin declined the ref's revision, the lookup answers approval_declined
// (extension 6), or the operation's state once a later revision of it
// was performed; never invalid_request, which would send the Personal
// Agent to approve anew.
func TestInterfaceSchedulesWebsite(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "sched-web", false)
	for _, seed := range scheduleSeeds() {
		rnd := rand.New(rand.NewPCG(seed, 9))
		sid := fmt.Sprintf("sidSchedWeb%d", seed)
		b := s.join(t, sid, "")
		declined := map[string]bool{}
		var refs []string
		recorded := ""
		for range 12 {
			s.x.decline.Store(rnd.IntN(3) == 0)
			if rnd.IntN(3) == 0 {
				s.hook.mode.Store("decline")
			} else {
				s.hook.mode.Store("ok")
			}
			resp := s.exchange(t, b)
			if resp.Status < http.StatusBadRequest {
				recorded = "" // performed: the approval is used up
			}
			switch {
			case resp.Status == http.StatusForbidden && len(resp.Header.Values("Poppy-Operation")) > 0:
				ref := webRef(t, resp, sid)
				refs = append(refs, ref)
				look := s.endpoint(t, sid, webUser, "", refBody(ref), "")
				if look.Status != http.StatusForbidden || look.JSON(t)["error"] != "approval_required" {
					continue
				}
				op := requireOperation(t, look)
				rec := s.endpoint(t, sid, webUser, "", refBody(ref), approval(op, ""))
				switch {
				case rec.Status == http.StatusNoContent:
					recorded = ref
				case rec.Status == http.StatusForbidden && rec.JSON(t)["error"] == "approval_declined":
					declined[ref] = true
				}
			case strings.Contains(string(resp.Body), "declined") && recorded != "":
				// The browser's request was declined at perform time: the
				// ref whose approval was recorded was to be performed.
				declined[recorded] = true
				recorded = ""
			}
		}
		for _, ref := range refs {
			if !declined[ref] {
				continue
			}
			look := s.endpoint(t, sid, webUser, "", refBody(ref), "")
			if look.Status == http.StatusOK {
				// The action went ahead under a later revision: the
				// operation's state, which tells the Personal Agent not to
				// approve it again.
				require.Contains(t, []any{"performing", "performed"}, look.JSON(t)["status"], "seed %d: %s", seed, look.Body)
				continue
			}
			require.Equal(t, http.StatusForbidden, look.Status, "seed %d: lookup of declined ref %s: %s", seed, ref, look.Body)
			require.Equal(t, "approval_declined", look.JSON(t)["error"], "seed %d: %s", seed, look.Body)
		}
	}
}

// TestInterfaceSchedulesMCPBatches: no JSON-RPC batch loses a result. A
// batch answered otherwise than 200 ran nothing at the origin; a batch
// answered 200 has a result for every call.
func TestInterfaceSchedulesMCPBatches(t *testing.T) {
	t.Parallel()
	g, xs := setupMCPOperations(t)
	token := g.signIn(t, []string{"orders:write"}, g.issuer("stormline")+"/mcp")
	origin := g.origins["stormline/exchange_item"]
	var slow atomic.Bool
	origin.Handle(http.MethodPost, "/", func(w http.ResponseWriter, req *http.Request) {
		if slow.Load() && peers.OriginClaims(req).OperationID != "" {
			time.Sleep(1500 * time.Millisecond) // past the tool's timeout: outcome unknown
		}
		xs["stormline"].serve(w, req)
	})
	g.putTool(t, "stormline", gateway.Tool{Name: "exchange_item", Description: "Exchanges an item",
		Scopes: []string{"orders:write"}, URL: origin.BaseURL(), InputSchema: json.RawMessage(`{"type":"object"}`),
		TimeoutSeconds: 1})
	headers := []string{"MCP-Protocol-Version", "2025-03-26", "Poppy-Extensions", declares}
	for _, seed := range scheduleSeeds() {
		rnd := rand.New(rand.NewPCG(seed, 11))
		for step := range 6 {
			sku := fmt.Sprintf("sku-%d-%d", seed, step)
			op := toolOperation(t, readToolResult(t, g.post(t, "stormline", newSID(), token,
				toolsCall("exchange_item", map[string]any{"item_id": "itm_4Qa", "replacement_sku": sku}), headers...)))
			slow.Store(rnd.IntN(2) == 0)
			batch := []any{}
			for i := range 1 + rnd.IntN(3) {
				var call map[string]any
				if i == 0 && rnd.IntN(2) == 0 {
					call = approvedCall("exchange_item", map[string]any{"item_id": "itm_4Qa", "replacement_sku": sku}, op, nil)
				} else {
					call = toolsCall("exchange_item", map[string]any{"item_id": "itm_9", "replacement_sku": sku + "-other"})
				}
				call["id"] = i + 1
				batch = append(batch, call)
			}
			before := len(origin.Received())
			resp := g.post(t, "stormline", newSID(), token, batch, headers...)
			if resp.Status != http.StatusOK {
				// Allow the cut-off send to arrive before counting.
				time.Sleep(200 * time.Millisecond)
				require.Equal(t, before, len(origin.Received()),
					"seed %d step %d: a batch answered %d ran calls at the origin, whose results are lost", seed, step, resp.Status)
				continue
			}
			var results []json.RawMessage
			require.NoError(t, json.Unmarshal(resp.Body, &results), "seed %d: %s", seed, resp.Body)
			require.Len(t, results, len(batch), "seed %d step %d: a result for every call", seed, step)
		}
	}
	slow.Store(false)
}
