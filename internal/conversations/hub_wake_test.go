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

// BenchmarkCarriedEvents is what the hub's listener does with an event
// notification when its replica has a reader on the conversation: decode
// the events it carried (a message's), once for all the readers, and,
// since 2026-12-06, write each as JSON for them (docs/benchmarks.md,
// "Wake-ups near a bare NOTIFY").
func BenchmarkCarriedEvents(b *testing.B) {
	const payload = `[{"seq": 12, "body": {"message": {"id": "m12_abcdef", "text": "Where is my order?", "author": {"type": "agent"}}},` +
		` "type": "message", "created_at": "2026-12-06T03:16:03.668551+00:00"}]`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := carriedEvents(payload); err != nil {
			b.Fatal(err)
		}
	}
}
