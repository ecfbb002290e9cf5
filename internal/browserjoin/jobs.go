package browserjoin

import (
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Sweeps are the package's periodic work: deleting expired codes and web
// sessions, every hour.
func Sweeps(store *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "browserjoin_sweep", Every: time.Hour, Run: store.sweep}}
}
