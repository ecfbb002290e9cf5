package conversations

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/notify"
)

// TestStreamKeepsAliveUntilItsCap: one timer writes the keep-alive
// comments and ends the stream at its cap, which the client then reads
// again from (spec 8.6); the waiter is gone with it.
func TestStreamKeepsAliveUntilItsCap(t *testing.T) {
	hub := NewHub(notify.New(nil, nil))
	rec := httptest.NewRecorder()
	r := &reader{hub: hub, keepAlive: 10 * time.Millisecond, streamCap: 100 * time.Millisecond}
	s := &eventStream{reader: r, w: rec, rc: http.NewResponseController(rec), companyID: 1, id: "cnv_a",
		watch: hub.WatchDeltas(1, "cnv_a")}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.wait(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the stream did not end at its cap")
	}
	require.GreaterOrEqual(t, strings.Count(rec.Body.String(), ": keep-alive\n\n"), 1, "%q", rec.Body.String())
	hub.mu.Lock()
	defer hub.mu.Unlock()
	require.Empty(t, hub.waiters, "the ended stream still waits")
}
