package peers

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
)

// Webhook is a Company Agent's webhook: an HTTPS server that records every
// request and can fail or stall. It answers 204 to POST /poppy/webhook,
// 404 to anything else.
type Webhook struct {
	// Host is the webhook's host name: add it to the Hosts that resolve
	// the fetches of the server under test.
	Host string
	// URL is https://{Host}:{port}/poppy/webhook.
	URL string

	mu    sync.Mutex
	got   []WebhookDelivery
	fails int           // answer 500 to this many more requests
	delay time.Duration // before answering
}

// WebhookDelivery is one request the webhook received, and its answer.
type WebhookDelivery struct {
	Header http.Header
	Body   []byte
	Status int
}

// StartWebhook starts a webhook on host (default hooks.test) until the
// test ends.
func StartWebhook(t testing.TB, ca *devca.CA, host string) *Webhook {
	t.Helper()
	if host == "" {
		host = "hooks.test"
	}
	h := &Webhook{Host: host}
	srv := Start(t, ca, http.HandlerFunc(h.serve))
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	h.URL = "https://" + host + ":" + port + "/poppy/webhook"
	return h
}

func (h *Webhook) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	delay := h.delay
	status := http.StatusNoContent
	if r.Method != http.MethodPost || r.URL.Path != "/poppy/webhook" {
		status = http.StatusNotFound
	} else if h.fails > 0 {
		h.fails--
		status = http.StatusInternalServerError
	}
	h.got = append(h.got, WebhookDelivery{Header: r.Header.Clone(), Body: body, Status: status})
	h.mu.Unlock()
	time.Sleep(delay)
	w.WriteHeader(status)
}

// Set has the webhook answer 500 to the next fails requests, and wait
// delay before every answer.
func (h *Webhook) Set(fails int, delay time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails, h.delay = fails, delay
}

// Wait returns the requests received once n were answered 2xx, failing
// the test after 45 seconds.
func (h *Webhook) Wait(t testing.TB, n int) []WebhookDelivery {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		got := h.Deliveries()
		if len(Succeeded(got)) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries arrived", len(Succeeded(got)), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Deliveries returns the requests received so far.
func (h *Webhook) Deliveries() []WebhookDelivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]WebhookDelivery(nil), h.got...)
}

// Count is how many requests arrived.
func (h *Webhook) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// Succeeded keeps the deliveries answered 2xx.
func Succeeded(ds []WebhookDelivery) []WebhookDelivery {
	var out []WebhookDelivery
	for _, d := range ds {
		if d.Status < 300 {
			out = append(out, d)
		}
	}
	return out
}
