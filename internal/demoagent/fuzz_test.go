package demoagent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// fuzzCompany is what the demo agent talks to in FuzzDelivery: the
// Company's key set and a Company API that records what the agent posts.
type fuzzCompany struct {
	mu    sync.Mutex
	posts []fuzzPost
}

type fuzzPost struct {
	path string
	body []byte
}

func (c *fuzzCompany) take() []fuzzPost {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.posts
	c.posts = nil
	return p
}

// FuzzDelivery feeds webhook deliveries to the demo agent, as the platform
// sends them: the body signed with the webhook secret, with a
// Poppy-Verified for the delivery's conversation and event and the facts
// given (or forged, when forged is not empty). The agent never fails
// (5xx but the 502 of a Company API refusal, or a panic), answers 400
// to a body that is not JSON, and posts only JSON to its own
// conversation's routes of the Company API.
func FuzzDelivery(f *testing.F) {
	delivery := func(typ, conv, event, evType, text string, extra map[string]any) []byte {
		ev := map[string]any{"id": event, "type": evType, "status": "queued",
			"message": map[string]any{"id": "m1", "text": text}}
		data := map[string]any{"conversation": map[string]any{"id": conv}, "event": ev}
		for k, v := range extra {
			data[k] = v
		}
		b, _ := json.Marshal(map[string]any{"type": typ, "timestamp": time.Now().UTC(), "data": data})
		return b
	}
	op := func(status string, resp any) map[string]any {
		return map[string]any{"operation": map[string]any{"operation_id": "exc_1", "revision": "r1", "status": status,
			"event_id": "evt_2", "response": resp, "decline": map[string]any{"reason": "No.", "alternative": map[string]any{"instructions": "Call."}}}}
	}
	for _, seed := range []struct {
		body                 []byte
		account, scopes, pv  string
		operations, hookOnce bool
	}{
		{body: delivery("conversation.event", "cnv_1", "evt_1", "message", "Where is my order?", nil)},
		{body: delivery("conversation.event", "cnv_1", "evt_1", "message", "Where is my order?", nil), account: "42", scopes: "orders:read"},
		{body: delivery("conversation.event", "cnv/../x", "evt_1", "message", "I want to exchange my jacket", nil), account: "42",
			scopes: "orders:read orders:write", operations: true},
		{body: delivery("conversation.event", "cnv_1", "evt_1", "message", "A specialist, please", nil)},
		{body: delivery("conversation.event", "cnv_1", "evt_1", "state", "", nil)},
		{body: delivery("conversation.operation", "cnv_1", "evt_1", "message", "", op("performed", map[string]any{"status": 422, "body": map[string]any{"error_description": "Out of stock"}}))},
		{body: delivery("conversation.operation", "cnv_1", "evt_1", "message", "", op("declined", nil))},
		{body: delivery("conversation.operation", "cnv_1", "evt_1", "message", "", op("performing", nil))},
		{body: delivery("conversation.event", "cnv_1", "evt_1", "message", "return", nil), pv: "not-a-jwt"},
		{body: []byte(`{"type": "conversation.event", "data": {"event": {"message": null}}}`)},
		{body: []byte(`{"data": {"event": {"message": {"text": 5}}}}`)},
		{body: []byte(`not json`)},
	} {
		f.Add(seed.body, seed.account, seed.scopes, seed.operations, seed.pv)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	pub, err := jwk.FromRaw(key.Public())
	if err != nil {
		f.Fatal(err)
	}
	_ = pub.Set(jwk.KeyIDKey, "k1")
	_ = pub.Set(jwk.AlgorithmKey, "ES256")
	set := jwk.NewSet()
	_ = set.AddKey(pub)
	jwks, _ := json.Marshal(set)

	company := &fuzzCompany{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/jwks.json" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(jwks)
			return
		}
		body, _ := io.ReadAll(r.Body)
		company.mu.Lock()
		company.posts = append(company.posts, fuzzPost{r.URL.EscapedPath(), body})
		company.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	f.Cleanup(srv.Close)

	const (
		issuer  = "https://stormline.test/t/stormline"
		hookURL = "https://agent.stormline.test/poppy/webhook"
	)
	secret := "whsec_" + strings.Repeat("A", 43) + "="
	hmacKey, err := conversations.DecodeWebhookSecret(secret)
	if err != nil {
		f.Fatal(err)
	}
	a, err := demoagent.New(demoagent.Options{Secret: secret, APIKey: "phk_test", BaseURL: srv.URL, Client: srv.Client(),
		JoinDelay: time.Nanosecond, JWKSURL: srv.URL + "/jwks.json", Issuer: issuer, WebhookURL: hookURL})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(a.Close)

	var n int
	f.Fuzz(func(t *testing.T, body []byte, account, scopes string, operations bool, forged string) {
		// What binds Poppy-Verified to the delivery, read leniently.
		var d struct {
			Type string `json:"type"`
			Data struct {
				Conversation struct {
					ID string `json:"id"`
				} `json:"conversation"`
				Event struct {
					ID     string `json:"id"`
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"event"`
				Operation *struct {
					OperationID string `json:"operation_id"`
					Revision    string `json:"revision"`
					EventID     string `json:"event_id"`
				} `json:"operation"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &d)
		pv := forged
		if pv == "" {
			claims := map[string]any{"iss": issuer, "aud": hookURL, "iat": time.Now().Unix(),
				"exp": time.Now().Add(time.Minute).Unix(), "jti": "j", "conversation_id": d.Data.Conversation.ID,
				"event_id": d.Data.Event.ID, "account": account, "scopes": strings.Fields(scopes)}
			if operations {
				claims["extensions"] = map[string]string{"operations": "3"}
			}
			if o := d.Data.Operation; d.Type == "conversation.operation" && o != nil {
				claims["event_id"], claims["operation_id"], claims["revision"] = o.EventID, o.OperationID, o.Revision
			}
			pv = peers.SignJWT(t, "ES256", key, map[string]any{"alg": "ES256", "typ": verified.Type, "kid": "k1"}, claims)
		}
		n++
		hookID := "msg_" + strconv.Itoa(n)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req := httptest.NewRequest(http.MethodPost, hookURL, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", hookID)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", conversations.Signature([][]byte{hmacKey}, hookID, ts, body))
		req.Header.Set(verified.Header, pv)
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, req)

		switch code := rec.Code; {
		case code >= 500 && code != http.StatusBadGateway:
			t.Fatalf("answered %d", code)
		case !json.Valid(body) && code != http.StatusBadRequest:
			t.Fatalf("answered %d to %q, not JSON", code, body)
		}
		// A queued conversation is joined after JoinDelay, from another
		// goroutine: wait for it, so it is not taken for the next
		// delivery's.
		posts := company.take()
		if rec.Code == http.StatusNoContent && (d.Type != "conversation.operation" || d.Data.Operation == nil) &&
			d.Data.Event.Type == "state" && d.Data.Event.Status == "queued" {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if posts = append(posts, company.take()...); len(posts) > 0 {
					break
				}
			}
		}
		prefix := "/company/v1/conversations/" + url.PathEscape(d.Data.Conversation.ID) + "/"
		for _, p := range posts {
			route, ok := strings.CutPrefix(p.path, prefix)
			if !ok || (route != "messages" && route != "authorization" && route != "user-requested" && route != "join") {
				t.Fatalf("posted to %s for conversation %q", p.path, d.Data.Conversation.ID)
			}
			if !json.Valid(p.body) {
				t.Fatalf("posted %q to %s", p.body, p.path)
			}
		}
	})
}
