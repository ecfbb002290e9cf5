package conversations

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/poppyhost/poppyhost/internal/notify"
)

// Channels of PostgreSQL notifications. An event notification carries
// "{company_id} {conversation_id}"; a text delta carries a JSON Delta,
// which is never stored (spec 8.6).
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
	mu      sync.Mutex
	waiters map[string]map[*Waiter]struct{}

	drainOnce sync.Once
	draining  chan struct{}
}

// NewHub returns a Hub fed by l's notifications; it wakes every waiter
// whenever l (re)connects, since notifications sent while l was not
// listening are lost.
func NewHub(l *notify.Listener) *Hub {
	h := &Hub{waiters: map[string]map[*Waiter]struct{}{}, draining: make(chan struct{})}
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

// Waiter is one reader's registration. Register it before reading, so a
// notification for events committed after the read cannot be missed.
type Waiter struct {
	// C receives a value when the conversation may have new events, or
	// when the hub reconnected and could have missed some.
	C chan struct{}
	// Deltas receives text deltas (WatchDeltas; nil otherwise, and none
	// are sent); full means the reader is slow and misses some, which a
	// Personal Agent tolerates (8.6).
	Deltas chan *Delta
	key    string
	hub    *Hub
}

func hubKey(companyID int64, conversationID string) string {
	return strconv.FormatInt(companyID, 10) + " " + conversationID
}

// Watch registers a waiter for a conversation's events, without deltas:
// a long-poll's.
func (h *Hub) Watch(companyID int64, conversationID string) *Waiter {
	return h.watch(companyID, conversationID, nil)
}

// WatchDeltas registers a waiter for a conversation's events and its text
// deltas, with room for 64 deltas: a stream's.
func (h *Hub) WatchDeltas(companyID int64, conversationID string) *Waiter {
	return h.watch(companyID, conversationID, make(chan *Delta, 64))
}

func (h *Hub) watch(companyID int64, conversationID string, deltas chan *Delta) *Waiter {
	w := &Waiter{C: make(chan struct{}, 1), Deltas: deltas, key: hubKey(companyID, conversationID), hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[w.key]
	if set == nil {
		set = map[*Waiter]struct{}{}
		h.waiters[w.key] = set
	}
	set[w] = struct{}{}
	return w
}

// Stop unregisters the waiter.
func (w *Waiter) Stop() {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	set := w.hub.waiters[w.key]
	delete(set, w)
	if len(set) == 0 {
		delete(w.hub.waiters, w.key)
	}
}

func (h *Hub) wake(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[key] {
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for w := range set {
			select {
			case w.C <- struct{}{}:
			default:
			}
		}
	}
}

// delta hands d to the conversation's streams, all of them the same
// *Delta, which none changes.
func (h *Hub) delta(d *Delta) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[hubKey(d.CompanyID, d.ConversationID)] {
		select {
		case w.Deltas <- d:
		default:
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
