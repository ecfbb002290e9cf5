package opstest

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Hook is a Company's approval hook on a test origin: it answers as Mode
// says and keeps every request's body.
type Hook struct {
	Origin *peers.Origin
	// URL is the origin's base URL: peers.Origin checks aud against it.
	URL string
	// Mode is "ok", a decline, an error or "hang": see Serve.
	Mode   atomic.Value
	mu     sync.Mutex
	bodies [][]byte
}

// StartHook starts an approval hook on host for the Company of issuer,
// answering "ok". The Company's settings name it as the caller's test
// needs.
func StartHook(t testing.TB, env *testkit.Env, host, issuer string) *Hook {
	t.Helper()
	h := &Hook{Origin: env.StartOrigin(t, host, issuer, issuer)}
	h.Mode.Store("ok")
	h.URL = h.Origin.BaseURL()
	h.Origin.Handle(http.MethodPost, "/", h.Serve)
	return h
}

// Serve answers a request.
func (h *Hook) Serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.bodies = append(h.bodies, raw)
	h.mu.Unlock()
	switch h.Mode.Load() {
	case "ok":
		w.WriteHeader(http.StatusNoContent)
	case "decline":
		w.Header().Set("Content-Type", "application/poppy-decline+json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"reason": "Exchanges over $50 need the account holder.", "ignored": true,
			"alternative": {"instructions": "Exchange it in the app.",
				"references": [{"type": "web", "url": "https://shop.example/exchanges"}]}}`)
	case "decline-http":
		w.Header().Set("Content-Type", "application/poppy-decline+json; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"reason": "Not today.",
			"alternative": {"references": [{"type": "web", "url": "http://shop.example/exchanges"}]}}`)
	case "decline-garbage":
		w.Header().Set("Content-Type", "application/poppy-decline+json")
		_, _ = io.WriteString(w, `{"reason": 12, "alternative": "call us"`)
	case "fail":
		http.Error(w, "hook down", http.StatusInternalServerError)
	case "redirect":
		http.Redirect(w, r, "https://elsewhere.example/hook", http.StatusFound)
	case "json":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"approved": true}`)
	case "forbidden":
		http.Error(w, "no", http.StatusForbidden)
	case "hang":
		// Longer than the platform waits for a hook.
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// Calls returns the bodies of the requests so far.
func (h *Hook) Calls() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]byte(nil), h.bodies...)
}
