package clientauth

import (
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: forgetting client assertion
// jtis past their exp, every minute.
func Sweeps(store *PGReplays) []jobs.Sweep {
	return []jobs.Sweep{{Name: "clientauth_sweep_jtis", Every: time.Minute, Run: store.Sweep}}
}
