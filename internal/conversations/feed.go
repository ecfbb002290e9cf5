package conversations

import (
	"bytes"
	"context"
	"net/http"
	"time"
)

// Feeds for the Company's staff (internal/console): a server-sent event
// stream of a page's part, rendered again whenever the hub is woken for
// what it shows (a conversation, or every conversation of the Company)
// and sent when it changed. The console renders the part; the feed knows
// only when to.

// FeedOptions shape a feed.
type FeedOptions struct {
	// Event is the SSE event name of each rendering ["update"].
	Event string
	// Every is the least time between two renderings [1s]: a Company's
	// feed is woken by every event of its conversations, and the wakes
	// of a busy second make one rendering.
	Every time.Duration
	// KeepAlive is the time between comments on a quiet feed [15s].
	KeepAlive time.Duration
	// Cap ends the feed after this long [5m]; the browser's EventSource
	// opens it again, through the console's checks.
	Cap time.Duration
}

func (o *FeedOptions) defaults() {
	if o.Event == "" {
		o.Event = "update"
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	if o.Cap <= 0 {
		o.Cap = 5 * time.Minute
	}
}

// ServeFeed answers r with a feed: render's output first, then again
// each time watch is woken (at most once per o.Every) when it differs
// from the last sent. It stops watch, and returns when the client goes,
// render fails, o.Cap passes or the hub drains. watch comes from Watch or
// WatchCompany, registered before render's first read so that nothing
// committed after it is missed.
func (h *Hub) ServeFeed(w http.ResponseWriter, r *http.Request, watch *Waiter, o FeedOptions,
	render func(ctx context.Context) ([]byte, error)) {
	defer watch.Stop()
	o.defaults()
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var last []byte
	send := func() bool {
		out, err := render(ctx)
		if err != nil {
			return false
		}
		if last != nil && bytes.Equal(out, last) {
			return true
		}
		last = out
		return writeFeedEvent(w, o.Event, out) == nil && rc.Flush() == nil
	}
	if !send() {
		return
	}
	end := time.NewTimer(o.Cap)
	defer end.Stop()
	keepAlive := time.NewTicker(o.KeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-watch.C:
			// Let the wakes of the next moment join this one.
			pause := time.NewTimer(o.Every)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				return
			}
			watch.Take()
			if !send() {
				return
			}
		case <-keepAlive.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-end.C:
			return
		case <-h.draining:
			return
		case <-ctx.Done():
			return
		}
	}
}

// writeFeedEvent writes one SSE event named event whose data is data,
// one data: line per line of it. A carriage return ends a line for the
// browser, as a newline does, so it ends one here too: text in the data
// cannot start a field of its own.
func writeFeedEvent(w http.ResponseWriter, event string, data []byte) error {
	data = bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
	var b bytes.Buffer
	b.Grow(len(event) + len(data) + 32)
	b.WriteString("event: ")
	b.WriteString(event)
	b.WriteByte('\n')
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}
