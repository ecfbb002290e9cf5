package website_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations/opstest"
)

// Randomized schedules at the interfaces of the Operations extension, the
// companion of internal/operations' engine harness (TestEngineSchedules):
// the engine's invariants hold there; these hold where the interfaces
// meet the origin and the Personal Agent. Each schedule is seeded, and a
// failure names its seed (opstest.Seeds).

// TestInterfaceSchedulesWebsite: a Personal Agent's lookup of a website
// operation's ref never hides a decline. Once the approval hook or the
// origin declined the ref's revision, the lookup answers approval_declined
// (extension 6), or the operation's state once a later revision of it
// was performed; never invalid_request, which would send the Personal
// Agent to approve anew.
func TestInterfaceSchedulesWebsite(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "sched-web", false)
	for _, seed := range opstest.Seeds() {
		rnd := rand.New(rand.NewPCG(seed, 9))
		sid := fmt.Sprintf("sidSchedWeb%d", seed)
		b := s.join(t, sid, "")
		declined := map[string]bool{}
		var refs []string
		recorded := ""
		for range 12 {
			s.x.decline.Store(rnd.IntN(3) == 0)
			if rnd.IntN(3) == 0 {
				s.hook.Mode.Store("decline")
			} else {
				s.hook.Mode.Store("ok")
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
				op := opstest.RequireOperation(t, look)
				rec := s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(op, ""))
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
