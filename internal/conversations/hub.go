package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/poppyhost/poppyhost/internal/notify"
)

// Channels of PostgreSQL notifications. An event notification carries
// "{company_id} {conversation_id}", then, when they fit, a space and the
// events its transaction added, as a JSON array of their rows (seq, type,
// body, created_at): a woken reader then answers without reading them
// (News). A text delta carries a JSON Delta, which is never stored (spec
// 8.6).
const (
	eventsChannel = "poppy_conversation_events"
	deltasChannel = "poppy_conversation_deltas"
)

// Delta is a piece of a Company message being written (spec 8.6).
type Delta struct {
	CompanyID      int64  `json:"company_id"`
	ConversationID string `json:"conversation_id"`
	MessageID      string `json:"message_id"`
	Text           string `json:"text"`
}

// Hub wakes the readers waiting on a conversation, on every replica: the
// process's notify.Listener hands it every event and delta notification,
// so a message accepted by one replica wakes a long-poll or stream on
// another.
type Hub struct {
	mu sync.Mutex
	// waiters are each conversation's, by hubKey, and each Company's
	// (WatchCompany), by its ID alone; a conversation has few.
	waiters map[string][]*Waiter

	drainOnce sync.Once
	draining  chan struct{}
	metrics   *Metrics
}

// HubOption configures a Hub.
type HubOption func(*Hub)

// HubMetrics counts the Hub's readers in m's gauges.
func HubMetrics(m *Metrics) HubOption { return func(h *Hub) { h.metrics = m } }

// NewHub returns a Hub fed by l's notifications; it wakes every waiter
// whenever l (re)connects, since notifications sent while l was not
// listening are lost.
func NewHub(l *notify.Listener, opts ...HubOption) *Hub {
	h := &Hub{waiters: map[string][]*Waiter{}, draining: make(chan struct{})}
	for _, o := range opts {
		o(h)
	}
	h.metrics = h.metrics.orDefault()
	l.Handle(eventsChannel, h.wake)
	l.Handle(deltasChannel, func(payload string) {
		d := new(Delta)
		if json.Unmarshal([]byte(payload), d) == nil {
			h.delta(d)
		}
	})
	l.OnConnect(h.wakeAll)
	return h
}

// Drain ends every long-poll (with an empty read) and stream now and from
// now on, so that a shutting-down server is not held by them: Personal
// Agents read again, reconnecting to another replica (spec 8.5, 8.6).
func (h *Hub) Drain() { h.drainOnce.Do(func() { close(h.draining) }) }

// maxQueuedDeltas bounds the text deltas a stream's waiter keeps for it;
// more mean the reader is slow, and it misses some, which a Personal
// Agent tolerates (spec 8.6).
const maxQueuedDeltas = 64

// Waiter is one reader's registration. Register it before reading, so a
// notification for events committed after the read cannot be missed.
type Waiter struct {
	// C receives a value when the conversation may have new events, when
	// the hub reconnected and could have missed some, or, for a stream's
	// waiter, when text deltas came (Take says which).
	C      chan struct{}
	key    string
	hub    *Hub
	stream bool
	// Since the last Take, under the hub's lock: whether events may have
	// come, the events the notifications carried unless one came without
	// them (partial), and the deltas that came (a stream's; none is kept
	// while none comes).
	woken   bool
	carried []Event
	partial bool
	deltas  []*Delta
}

// News is what a waiter learned of events since its last Take.
type News struct {
	// Came says events may have come.
	Came bool
	// carried are the events the notifications carried, in order; whole
	// says every wake-up since the last Take carried its events.
	carried []Event
	whole   bool
}

// After returns the events after seq that came, as the notifications
// carried them, in order and with no gap, and true; or false when they
// did not carry them all, and the events must be read. No event after seq
// with true means the notifications were of events already read.
func (n News) After(seq int64) ([]Event, bool) {
	if !n.whole {
		return nil, false
	}
	i := 0
	for i < len(n.carried) && n.carried[i].Seq <= seq {
		i++
	}
	events := n.carried[i:]
	for j, e := range events {
		if e.Seq != seq+1+int64(j) {
			return nil, false
		}
	}
	return events, true
}

func hubKey(companyID int64, conversationID string) string {
	return strconv.FormatInt(companyID, 10) + " " + conversationID
}

// Watch registers a waiter for a conversation's events, without deltas:
// a long-poll's.
func (h *Hub) Watch(companyID int64, conversationID string) *Waiter {
	return h.watch(companyID, conversationID, false)
}

// WatchDeltas registers a waiter for a conversation's events and its text
// deltas: a stream's.
func (h *Hub) WatchDeltas(companyID int64, conversationID string) *Waiter {
	return h.watch(companyID, conversationID, true)
}

// WatchCompany registers a waiter for the events of every conversation
// of a Company, without deltas: the staff console's feeds (feed.go).
func (h *Hub) WatchCompany(companyID int64) *Waiter {
	return h.add(&Waiter{C: make(chan struct{}, 1), key: strconv.FormatInt(companyID, 10), hub: h})
}

func (h *Hub) watch(companyID int64, conversationID string, stream bool) *Waiter {
	return h.add(&Waiter{C: make(chan struct{}, 1), key: hubKey(companyID, conversationID), hub: h, stream: stream})
}

func (h *Hub) add(w *Waiter) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiters[w.key] = append(h.waiters[w.key], w)
	h.metrics.readers[w.mode()].Inc()
	return w
}

// mode is the index of w's reader mode in the readers gauge.
func (w *Waiter) mode() int {
	if w.stream {
		return readerStream
	}
	return readerLongPoll
}

// Stop unregisters the waiter; stopping it again does nothing.
func (w *Waiter) Stop() {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	held := w.hub.waiters[w.key]
	n := len(held)
	rest := slices.DeleteFunc(held, func(o *Waiter) bool { return o == w })
	if len(rest) < n {
		w.hub.metrics.readers[w.mode()].Dec()
	}
	if len(rest) == 0 {
		delete(w.hub.waiters, w.key)
	} else {
		w.hub.waiters[w.key] = rest
	}
}

// Take returns the text deltas that came since the last Take, oldest
// first, and the news of events since: a stream writes the deltas, then
// the events, so that a message never overtakes its own deltas.
func (w *Waiter) Take() ([]*Delta, News) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	deltas, news := w.deltas, News{Came: w.woken, carried: w.carried, whole: w.woken && !w.partial}
	w.deltas, w.woken, w.carried, w.partial = nil, false, nil, false
	return deltas, news
}

// signal wakes w; the hub's lock is held.
func (w *Waiter) signal() {
	select {
	case w.C <- struct{}{}:
	default:
	}
}

// wake wakes the waiters of an event notification's conversation, with
// the events it carried, decoded once for them all and only if this
// replica has any, and those of its Company (WatchCompany), which read.
func (h *Hub) wake(payload string) {
	company, rest, _ := strings.Cut(payload, " ")
	id, carried, _ := strings.Cut(rest, " ")
	key := company + " " + id
	h.mu.Lock()
	readers, feeds := len(h.waiters[key]) > 0, len(h.waiters[company]) > 0
	h.mu.Unlock()
	if !readers && !feeds {
		return
	}
	var (
		events []Event
		err    = errNotCarried
	)
	if readers {
		events, err = carriedEvents(carried)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.waiters[key] {
		w.add(events, err == nil)
	}
	for _, w := range h.waiters[company] {
		w.add(nil, false)
	}
}

// add wakes w with events, whole when the notification carried them all;
// the hub's lock is held. Carried events are shared by the waiters, which
// never change them; a waiter that gathers more than a read returns reads
// them instead.
func (w *Waiter) add(events []Event, whole bool) {
	switch {
	case !whole || w.partial || len(w.carried)+len(events) > maxEventsPerRead:
		w.carried, w.partial = nil, true
	case w.carried == nil:
		w.carried = events
	default:
		w.carried = slices.Concat(w.carried, events)
	}
	w.woken = true
	w.signal()
}

// carriedEvents decodes the events an event notification carried, as
// events reads them, each written as JSON once for all the readers that
// answer with it; an error when it carried none.
func carriedEvents(raw string) ([]Event, error) {
	if raw == "" {
		return nil, errNotCarried
	}
	v, err := decodeNumbers([]byte(raw))
	if err != nil {
		return nil, err
	}
	rows, ok := v.([]any)
	if !ok {
		return nil, errNotCarried
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		row, _ := r.(map[string]any)
		seq, _ := row["seq"].(json.Number)
		typ, _ := row["type"].(string)
		at, _ := row["created_at"].(string)
		e := &events[i]
		e.Type = typ
		e.Body, _ = row["body"].(map[string]any)
		if e.Seq, err = seq.Int64(); err != nil {
			return nil, err
		}
		if e.CreatedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, err
		}
		if e.encoded, err = appendEvent(nil, e); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// errNotCarried: the notification did not carry its events (they did
// not fit).
var errNotCarried = errors.New("conversations: the notification carried no events")

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for _, w := range set {
			w.add(nil, false)
		}
	}
}

// delta queues d for the conversation's streams, all of them the same
// *Delta, which none changes.
func (h *Hub) delta(d *Delta) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.waiters[hubKey(d.CompanyID, d.ConversationID)] {
		if w.stream && len(w.deltas) < maxQueuedDeltas {
			w.deltas = append(w.deltas, d)
			w.signal()
		}
	}
}

// maxPayload keeps a notification under PostgreSQL's limit of 8000 bytes.
const maxPayload = 7900

// PublishDelta sends a text delta to the readers of a conversation on
// every replica. A delta too long for a notification is cut to fit.
func PublishDelta(ctx context.Context, pool *pgxpool.Pool, d Delta) error {
	payload, err := deltaPayload(d)
	if err != nil {
		return err
	}
	return notify.Send(ctx, pool, deltasChannel, string(payload))
}

// deltaPayload is d as a notification payload, its text cut to fit.
func deltaPayload(d Delta) ([]byte, error) {
	payload, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	// JSON escapes can make the payload up to six times the text: cut the
	// text in proportion until it fits.
	for len(payload) > maxPayload && d.Text != "" {
		keep := len(d.Text) * maxPayload / len(payload) * 9 / 10
		d.Text = strings.ToValidUTF8(d.Text[:keep], "")
		if payload, err = json.Marshal(d); err != nil {
			return nil, err
		}
	}
	if len(payload) > maxPayload {
		return nil, fmt.Errorf("conversations: text delta for %q is too large to publish", d.ConversationID)
	}
	return payload, nil
}
