package conversations

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOperationsBackoff: a waiting job waits as long again as it waited
// so far, from a second up to five minutes: not every second for a day.
func TestOperationsBackoff(t *testing.T) {
	require.Equal(t, time.Second, backoff(0))
	require.Equal(t, 8*time.Second, backoff(8*time.Second))
	require.Equal(t, 5*time.Minute, backoff(24*time.Hour))
	waited, checks := time.Duration(0), 0
	for waited < 24*time.Hour {
		waited += backoff(waited)
		checks++
	}
	require.Less(t, checks, 300, "a day of waiting is a few hundred checks, not 86400")
}
