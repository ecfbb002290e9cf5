package accounts

import (
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: forgetting login failures a day
// old, such as those left by probes of unknown usernames, every hour.
func Sweeps(store *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "accounts_sweep_login_failures", Every: time.Hour, Run: store.DeleteStaleLoginFailures}}
}
