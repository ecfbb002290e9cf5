package conversations

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// stream answers a read as server-sent events (spec 8.6): every event
// with its ID as the SSE id, text deltas without one, comments to keep the
// connection alive. It ends when the client goes, after streamCap (the
// client reconnects with Last-Event-ID), or when the hub drains. Once the
// events so far are written, the stream waits in ParkStreams when the
// request came through it, else here.
func (h *reader) stream(w http.ResponseWriter, r *http.Request, c *Conversation, p readParams) {
	s := &eventStream{reader: h, w: w, rc: http.NewResponseController(w), companyID: c.CompanyID, id: c.ID,
		after: p.after, watch: h.hub.WatchDeltas(c.CompanyID, c.ID)}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if s.rc.Flush() != nil || !s.send(r.Context()) {
		s.watch.Stop()
		return
	}
	if pk, ok := r.Context().Value(parkKey{}).(*parking); ok {
		pk.stream = s
		return
	}
	s.wait(r.Context())
}

// eventStream is an open stream: what its wait needs and nothing of the
// request's checks (the Session, the conversation's row), which stay
// behind when it parks.
type eventStream struct {
	*reader
	w         http.ResponseWriter
	rc        *http.ResponseController
	companyID int64
	id        string
	// after is the last event sent.
	after int64
	watch *Waiter
}

// send writes the events after the last one sent; false when the client
// is gone or the database failed.
func (s *eventStream) send(ctx context.Context) bool {
	for {
		events, more, err := s.store.Events(ctx, s.companyID, s.id, s.after, maxEventsPerRead)
		if err != nil || !s.write(events) {
			return false
		}
		if !more {
			return true
		}
	}
}

// write writes events, the next ones after the last one sent, in one
// write and one flush, each as its notification encoded it when it
// carried it; false when the client is gone.
func (s *eventStream) write(events []Event) bool {
	if len(events) == 0 {
		return true
	}
	size := 0
	for i := range events {
		size += len(events[i].encoded) + 48
	}
	buf := make([]byte, 0, size)
	for i := range events {
		e := &events[i]
		buf = append(buf, "id: "+eventPrefix...)
		buf = strconv.AppendInt(buf, e.Seq, 10)
		buf = append(buf, "\ndata: "...)
		var err error
		if buf, err = appendEncoded(buf, e); err != nil {
			return false
		}
		buf = append(buf, "\n\n"...)
	}
	if _, err := s.w.Write(buf); err != nil {
		return false
	}
	s.after = events[len(events)-1].Seq
	return s.rc.Flush() == nil
}

// delta writes a text delta; false when the client is gone.
func (s *eventStream) delta(d *Delta) bool {
	buf := append(make([]byte, 0, 64+len(d.Text)), "event: text-delta\ndata: {\"message_id\":"...)
	buf = appendJSONString(buf, d.MessageID)
	buf = append(buf, `,"text":`...)
	buf = appendJSONString(buf, d.Text)
	buf = append(buf, "}\n\n"...)
	_, err := s.w.Write(buf)
	return err == nil && s.rc.Flush() == nil
}

// wait writes what the hub wakes the stream for until it ends; ctx is
// the request's. One timer serves the keep-alive comments and the end.
// What it writes, it writes on a goroutine of its own (offload), so that
// the stack the writes and queries grow is not the waiting one's.
func (s *eventStream) wait(ctx context.Context) {
	defer s.watch.Stop()
	end := time.Now().Add(s.streamCap)
	tick := time.NewTimer(min(s.keepAlive, s.streamCap))
	defer tick.Stop()
	for {
		select {
		case <-s.watch.C:
			if !offload(func() bool { return s.wake(ctx) }) {
				return
			}
		case <-tick.C:
			left := time.Until(end)
			if left <= 0 || !offload(s.keepAliveComment) {
				return
			}
			tick.Reset(min(s.keepAlive, left))
		case <-s.hub.draining:
			return
		case <-ctx.Done():
			return
		}
	}
}

// wake writes the deltas that came, then the events if any may have:
// those the notifications carried, or else read; false when the client is
// gone or the database failed.
func (s *eventStream) wake(ctx context.Context) bool {
	deltas, news := s.watch.Take()
	for _, d := range deltas {
		if !s.delta(d) {
			return false
		}
	}
	if !news.Came {
		return true
	}
	if events, ok := news.After(s.after); ok {
		return s.write(events)
	}
	return s.send(ctx)
}

// keepAliveComment writes a comment; false when the client is gone.
func (s *eventStream) keepAliveComment() bool {
	_, err := io.WriteString(s.w, ": keep-alive\n\n")
	return err == nil && s.rc.Flush() == nil
}

// offload runs f on a goroutine of its own and returns what it returns;
// a panic of f is the caller's.
func offload(f func() bool) bool {
	var (
		ok bool
		p  any
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { p = recovered(recover()) }()
		ok = f()
	}()
	<-done
	if p != nil {
		panic(p)
	}
	return ok
}

// parkKey is the context key of a request's parking.
type parkKey struct{}

// parking is where a stream leaves itself for ParkStreams to wait on.
type parking struct {
	stream *eventStream
}

// ParkStreams runs the wait of an event stream (spec 8.6) that a handler
// under it leaves there. The handler runs on a goroutine of its own
// (offload; its panic is the request's goroutine's), whose
// stack the request's checks grow (the Session's signature check, the
// routers) and which ends when the handler returns; the wait then runs
// here, in a shallow frame of the request's goroutine, and the garbage of
// those checks is freed. The middleware between see the request end when
// its stream starts waiting. Mount it as far out as the streams' requests
// pass; a second one further in lets the outer one run the wait. Only a
// GET of a path ending in /events that accepts a stream takes a goroutine.
func ParkStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/events") ||
			r.Context().Value(parkKey{}) != nil || !acceptsStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		pk := &parking{}
		// A panic after the stream parked must not leave its waiter.
		defer func() {
			if pk.stream != nil {
				pk.stream.watch.Stop()
			}
		}()
		offload(func() bool {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), parkKey{}, pk)))
			return true
		})
		if pk.stream != nil {
			pk.stream.wait(r.Context())
		}
	})
}

// recovered is what a handler's goroutine panicked with, for the
// request's goroutine to panic with again: http.ErrAbortHandler as it is,
// anything else with the stack where it happened.
func recovered(p any) any {
	if p == nil || p == http.ErrAbortHandler {
		return p
	}
	return fmt.Errorf("%v\n%s", p, debug.Stack())
}
