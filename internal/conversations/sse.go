package conversations

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// stream answers a read as server-sent events (spec 8.6): every event
// with its ID as the SSE id, text deltas without one, comments to keep the
// connection alive. It ends when the client goes, after streamCap (the
// client reconnects with Last-Event-ID), or when the hub drains.
func (h *reader) stream(w http.ResponseWriter, r *http.Request, c *Conversation, p readParams) {
	rc := http.NewResponseController(w)
	ctx := r.Context()
	watch := h.hub.WatchDeltas(c.CompanyID, c.ID)
	defer watch.Stop()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	end := time.NewTimer(h.streamCap)
	defer end.Stop()
	alive := time.NewTicker(h.keepAlive)
	defer alive.Stop()
	after := p.after
	// send writes the events after the last one sent; false when the
	// client is gone or the database failed.
	send := func() bool {
		for {
			events, more, err := h.store.Events(ctx, c.CompanyID, c.ID, after, maxEventsPerRead)
			if err != nil {
				return false
			}
			for _, e := range events {
				data, err := json.Marshal(e)
				if err != nil {
					return false
				}
				if _, err := fmt.Fprintf(w, "id: %s\ndata: %s\n\n", eventID(e.Seq), data); err != nil {
					return false
				}
				after = e.Seq
			}
			if len(events) > 0 && rc.Flush() != nil {
				return false
			}
			if !more {
				return true
			}
		}
	}
	// delta writes a text delta; false when the client is gone.
	delta := func(d *Delta) bool {
		data, _ := json.Marshal(map[string]string{"message_id": d.MessageID, "text": d.Text})
		_, err := fmt.Fprintf(w, "event: text-delta\ndata: %s\n\n", data)
		return err == nil && rc.Flush() == nil
	}
	if !send() {
		return
	}
	for {
		select {
		case <-watch.C:
			// The hub queued every delta that came before this wake-up:
			// they go first, so a message never overtakes its own deltas.
			for queued := true; queued; {
				select {
				case d := <-watch.Deltas:
					if !delta(d) {
						return
					}
				default:
					queued = false
				}
			}
			if !send() {
				return
			}
		case d := <-watch.Deltas:
			if !delta(d) {
				return
			}
		case <-alive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-end.C:
			return
		case <-h.hub.draining:
			return
		case <-ctx.Done():
			return
		}
	}
}
