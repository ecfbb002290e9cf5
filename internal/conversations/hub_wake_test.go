package conversations

import (
	"testing"

	"github.com/poppyhost/poppyhost/internal/notify"
)

// BenchmarkHubWake is the hub's part of every event's notification
// (docs/benchmarks.md, "The console's inbox feed"): waking a
// conversation's long-poll, with no Company waiter (the baseline) and
// with the Company's inbox open in the console (WatchCompany), whose
// waiter is woken too.
func BenchmarkHubWake(b *testing.B) {
	for _, inbox := range []bool{false, true} {
		name := "conversation"
		if inbox {
			name = "conversation+inbox"
		}
		b.Run(name, func(b *testing.B) {
			h := NewHub(notify.New(nil, nil))
			w := h.Watch(42, "cnv_abcdefghijklmnopqrstuvwxyz")
			defer w.Stop()
			if inbox {
				defer h.WatchCompany(42).Stop()
			}
			// Another Company's inbox is not woken.
			defer h.WatchCompany(7).Stop()
			key := hubKey(42, "cnv_abcdefghijklmnopqrstuvwxyz")
			b.ReportAllocs()
			for b.Loop() {
				h.wake(key)
			}
		})
	}
}
