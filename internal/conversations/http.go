package conversations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// What both sides' handlers share: reading a conversation's events
// (cursor, wait, server-sent events; spec 8.5, 8.6) and decoding a body.

// reader answers reads of a conversation's events, for the Personal Agent
// (AgentHandler) and the Company (CompanyHandler) alike.
type reader struct {
	store *Store
	hub   *Hub
	// waitCap bounds wait [30s, 5m]; streamCap a stream's life.
	waitCap   time.Duration
	streamCap time.Duration
	keepAlive time.Duration
}

func newReader(store *Store, hub *Hub) reader {
	return reader{store: store, hub: hub, waitCap: defaultWaitCap, streamCap: 5 * time.Minute, keepAlive: 15 * time.Second}
}

// readParams are cursor and wait (spec 8.5), with Last-Event-ID winning
// over cursor (8.6).
type readParams struct {
	after int64
	// cursor is the request's cursor as given, returned when no event is.
	cursor string
	wait   time.Duration
	// waited: the request has wait, which makes a POST answer with a
	// read (spec 8.3).
	waited bool
	sse    bool
}

// parseWait reads wait: digits only, and a larger wait than the cap is
// held for the cap, not refused (spec 8.5).
func parseWait(s string, limit time.Duration) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	s = strings.TrimLeft(s, "0")
	n, err := strconv.ParseInt(s, 10, 64)
	if s == "" {
		n, err = 0, nil
	}
	if err != nil || n > int64(limit/time.Second) {
		// Too many digits for int64 is also just long.
		return limit, true
	}
	return time.Duration(n) * time.Second, true
}

func (h *reader) parseRead(r *http.Request) (readParams, error) {
	var p readParams
	q := r.URL.Query()
	if len(q["cursor"]) > 1 || len(q["wait"]) > 1 {
		return p, invalid("send cursor and wait at most once")
	}
	p.cursor = q.Get("cursor")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p.cursor = id
	}
	if p.cursor != "" {
		seq, ok := parseEventID(p.cursor)
		if !ok {
			return p, invalid("cursor is not an event ID of this conversation")
		}
		p.after = seq
	}
	if ws, ok := q["wait"]; ok {
		if p.wait, ok = parseWait(ws[0], h.waitCap); !ok {
			return p, invalid("wait must be a whole number of seconds, 0 or more (spec 8.5)")
		}
		p.waited = true
	}
	p.sse = acceptsStream(r)
	return p, nil
}

func acceptsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// checkCursor validates a cursor against the conversation: one of its
// event IDs, not pruned (cursor_expired).
func checkCursor(c *Conversation, p readParams) error {
	switch {
	case p.after > c.LastSeq:
		return invalid("cursor is not an event ID of this conversation")
	case p.after > 0 && p.after < c.FirstSeq-1:
		return httpx.Errorf(httpx.CodeCursorExpired, "the events after this cursor are no longer kept; read from the beginning")
	}
	return nil
}

// read returns the events of c after p, waiting up to p.wait for one.
// The waiter is registered before the first read, so an event committed
// after that read wakes it. current says c is the conversation as of its
// last event, c.LastSeq (as one read of its row gives it); otherwise the
// first read reads it again.
//
// A read with events takes the status and responder from the
// conversation read and the state events after it (every change of
// either adds one, spec 8.7): the state is never older than the events.
// A wake-up whose notifications carried the events (News) answers with
// them and reads nothing; otherwise it reads the events, and if it finds
// none, the conversation again, and finds it if it is gone.
func (h *reader) read(ctx context.Context, c *Conversation, current bool, p readParams) (*Read, error) {
	w := h.hub.Watch(c.CompanyID, c.ID)
	defer w.Stop()
	deadline := time.NewTimer(p.wait)
	defer deadline.Stop()
	var (
		cur    = c
		events []Event
		more   bool
		err    error
	)
	if current {
		events, more, err = h.store.Events(ctx, c.CompanyID, c.ID, p.after, maxEventsPerRead)
	} else {
		cur, events, more, err = h.store.snapshot(ctx, c.CompanyID, c.ID, p.after, maxEventsPerRead)
	}
	for {
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, notFound()
		}
		if len(events) > 0 || p.wait == 0 {
			return readOf(stateAfter(cur, events), p, events, more), nil
		}
		select {
		case <-w.C:
			_, news := w.Take()
			var carried bool
			if events, carried = news.After(p.after); carried {
				more = false
				break
			}
			events, more, err = h.store.Events(ctx, c.CompanyID, c.ID, p.after, maxEventsPerRead)
			if err == nil && len(events) == 0 {
				cur, events, more, err = h.store.snapshot(ctx, c.CompanyID, c.ID, p.after, maxEventsPerRead)
			}
		case <-deadline.C:
			return readOf(cur, p, nil, false), nil
		case <-h.hub.draining:
			return readOf(cur, p, nil, false), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// serveEvents answers a read of c for either side (spec 8.5, 8.6): a
// stream when asked for, else events as JSON, waiting up to wait, written
// by write. It returns the error to answer with, having written nothing.
func (h *reader) serveEvents(w http.ResponseWriter, r *http.Request, c *Conversation,
	write func(http.ResponseWriter, *http.Request, int, *Read)) error {
	p, err := h.parseRead(r)
	if err == nil {
		err = checkCursor(c, p)
	}
	if err != nil {
		return err
	}
	if p.sse {
		h.stream(w, r, c, p)
		return nil
	}
	rd, err := h.read(r.Context(), c, true, p)
	if err != nil {
		return err
	}
	write(w, r, http.StatusOK, rd)
	return nil
}

// decodeBody reads r's body into dst, for either side: as
// httpx.DecodeJSON does, up to maxBodyBytes, then refusing what PostgreSQL
// cannot store. strict refuses unknown members, for our own Company API; a
// Personal Agent's body may carry members we do not know (spec 3.3).
// optional accepts an empty body, for routes whose body has nothing
// required.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, strict, optional bool) error {
	if optional && r.ContentLength == 0 {
		return nil
	}
	if err := httpx.DecodeJSON(w, r, dst, httpx.DecodeOptions{MaxBytes: maxBodyBytes, Strict: strict}); err != nil {
		return err
	}
	return checkStorable(dst)
}

// checkStorable refuses a decoded body that PostgreSQL cannot store:
// jsonb and text refuse U+0000 (a JSON "\u0000"), and jsonb refuses
// numbers beyond numeric's range. Such a body is the client's error, not
// a 500 from the INSERT.
func checkStorable(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return invalid("the body is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return invalid("the body is not valid JSON")
		}
		switch t := tok.(type) {
		case string:
			if strings.ContainsRune(t, 0) {
				return invalid("strings must not contain U+0000")
			}
		case json.Number:
			if !storableNumber(string(t)) {
				return invalid("a number is out of range")
			}
		}
	}
}

// storableNumber keeps numbers well inside numeric's input limits
// (exponent within ±1000, scale at most 16383) and float64's range.
func storableNumber(n string) bool {
	if len(n) > 1000 {
		return false
	}
	if _, err := strconv.ParseFloat(n, 64); err != nil {
		return false
	}
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		exp, err := strconv.Atoi(n[i+1:])
		return err == nil && exp >= -1000 && exp <= 1000
	}
	return true
}
