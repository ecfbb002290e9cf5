package demoagent_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

const slug = "stormline"

// demo is a platform with the demo Company, its demo agent on its webhook,
// the platform's jobs running, and a test Personal Agent.
type demo struct {
	env   *testkit.Env
	agent *peers.Agent
	shop  *demoshop.Shop
	// ada is the seeded account's ID; token, when set, is sent with the
	// Personal Agent's requests, which declare the Operations extension.
	ada   int64
	token string
	// hook is the demo agent on the webhook at hookURL, with its secret;
	// verifiedSeen is the last Poppy-Verified the platform sent it.
	hook         *demoagent.Agent
	hookURL      string
	secret       string
	verifiedSeen atomic.Pointer[string]
}

const adaPassword = "correct horse battery staple"

func setup(t *testing.T) *demo {
	t.Helper()
	env := testkit.Setup(t)
	d := &demo{env: env, agent: env.StartAgent(t, "agent.test")}

	// The webhook listens first: the Company names its URL.
	var hook http.Handler = http.NotFoundHandler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(verified.Header)
		d.verifiedSeen.Store(&v)
		hook.ServeHTTP(w, r)
	}))
	srv.TLS = env.CA.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	env.Hosts.Add("agent.stormline.test")
	d.hookURL = "https://agent.stormline.test:" + port + "/poppy/webhook"

	env.CreateCompany(t, map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Stormline Outfitters", "domain": "stormline.example"},
		"auth": map[string]any{"scopes": map[string]any{"orders:read": "See your orders",
			"orders:write": "Exchange or return items"}},
		"conversations": map[string]any{
			"agent_webhook": d.hookURL,
		},
		"operations": map[string]any{"enabled": true},
	})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "demo agent"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	key := resp.JSON(t)["key"].(string)
	d.startShop(t, key)
	resp = env.Do(t, http.MethodPost, env.PublicURL("/company/v1/conversations/webhook-secret"), nil, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

	d.secret = resp.JSON(t)["secret"].(string)
	a, err := demoagent.New(demoagent.Options{
		Secret: d.secret, APIKey: key, BaseURL: env.PublicURL(""),
		Client: env.Client, JoinDelay: 100 * time.Millisecond,
		JWKSURL: env.PublicURL("/t/" + slug + "/oauth/jwks.json"), Issuer: env.PublicURL("/t/" + slug),
		WebhookURL: d.hookURL,
	})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	hook, d.hook = a, a

	require.NoError(t, env.Platform.Jobs.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = env.Platform.Jobs.Stop(ctx)
	})
	return d
}

// pa sends a Session-signed Personal Agent request to the demo Company's
// conversations + path and decodes the JSON answer.
func (d *demo) pa(t *testing.T, method, path string, body any, status int) map[string]any {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = strings.NewReader(string(raw))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, d.env.PublicURL("/t/"+slug+"/poppy/conversations"+path), rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.token != "" {
		req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
	}
	d.agent.Sign(t, req, peers.SessionClaims{Aud: d.env.PublicURL("/t/" + slug), AccessToken: d.token}, peers.SessionOptions{})
	resp, err := d.env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	require.Equal(t, status, resp.StatusCode, "%v", m)
	return m
}

func message(id, text string) map[string]any {
	return map[string]any{"message": map[string]any{"id": id, "author": map[string]any{"type": "agent"}, "text": text}}
}

// await reads the conversation from cursor with wait=10 until an event
// satisfies match, and returns it and the cursor just after it (an event's
// ID is a cursor, spec 8.5).
func (d *demo) await(t *testing.T, id, cursor string, match func(map[string]any) bool) (map[string]any, string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var seen []any
	for time.Now().Before(deadline) {
		rd := d.pa(t, http.MethodGet, "/"+id+"/events?wait=10&cursor="+cursor, nil, http.StatusOK)
		for _, e := range rd["events"].([]any) {
			seen = append(seen, e)
			if match(e.(map[string]any)) {
				return e.(map[string]any), e.(map[string]any)["id"].(string)
			}
		}
		cursor = rd["cursor"].(string)
	}
	all := d.pa(t, http.MethodGet, "/"+id+"/events", nil, http.StatusOK)
	t.Fatalf("no matching event after %s; saw %v; all %v", cursor, seen, all)
	return nil, ""
}

func companyMessage(e map[string]any) bool {
	m, _ := e["message"].(map[string]any)
	return e["type"] == "message" && m["role"] == "company"
}

func TestConversationWithTheDemoAgent(t *testing.T) {
	t.Parallel()
	d := setup(t)

	// An exchange, signed out: the agent needs the account.
	rd := d.pa(t, http.MethodPost, "?wait=0", message("m1", "I want to exchange my jacket"), http.StatusCreated)
	id, cursor := rd["conversation_id"].(string), rd["cursor"].(string)
	ev, cursor := d.await(t, id, cursor, func(e map[string]any) bool { return e["type"] == "authorization" })
	require.Equal(t, "orders:read orders:write", ev["scope"], "%v", ev)

	// Returns: the policy. Anything else: help.
	d.pa(t, http.MethodPost, "/"+id+"/messages", message("m2", "How do returns work?"), http.StatusAccepted)
	ev, cursor = d.await(t, id, cursor, companyMessage)
	require.Equal(t, demoagent.ReturnPolicy, ev["message"].(map[string]any)["text"])
	d.pa(t, http.MethodPost, "/"+id+"/messages", message("m3", "Hello there"), http.StatusAccepted)
	ev, cursor = d.await(t, id, cursor, companyMessage)
	require.Equal(t, demoagent.HelpText, ev["message"].(map[string]any)["text"])

	// An order, signed out: the agent needs orders:read.
	d.pa(t, http.MethodPost, "/"+id+"/messages", message("m4", "Where is my order?"), http.StatusAccepted)
	ev, cursor = d.await(t, id, cursor, func(e map[string]any) bool { return e["type"] == "authorization" })
	require.Contains(t, ev["scope"], "orders:read", "%v", ev)

	// A specialist: user_requested with a reason (spec 8.10).
	d.pa(t, http.MethodPost, "/"+id+"/messages", message("m5", "can I talk to a specialist"), http.StatusAccepted)
	ev, cursor = d.await(t, id, cursor, func(e map[string]any) bool { return e["type"] == "user_requested" })
	require.Equal(t, demoagent.UserRequestedReason, ev["reason"])

	// A person: the agent says nothing, the Personal Agent hands off, and
	// Alex joins (spec 8.9).
	d.pa(t, http.MethodPost, "/"+id+"/messages", message("m6", "I'd like to talk to a person"), http.StatusAccepted)
	rd = d.pa(t, http.MethodPost, "/"+id+"/handoff", map[string]any{}, http.StatusAccepted)
	require.Equal(t, "queued", rd["status"])
	ev, cursor = d.await(t, id, cursor, func(e map[string]any) bool {
		return companyMessage(e) || (e["type"] == "state" && e["responder"] == "human")
	})
	require.Equal(t, "state", ev["type"], "no answer to m6, the state comes first: %v", ev)
	ev, _ = d.await(t, id, cursor, companyMessage)
	msg := ev["message"].(map[string]any)
	require.Equal(t, demoagent.HelloText, msg["text"])
	require.Equal(t, map[string]any{"type": "human", "id": "alex", "name": "Alex"}, msg["author"])
}

func TestVerifyRefusesUnsignedDeliveries(t *testing.T) {
	t.Parallel()
	a, err := demoagent.New(demoagent.Options{Secret: "whsec_" + strings.Repeat("A", 43) + "=",
		JWKSURL: "https://stormline.test/oauth/jwks.json", Issuer: "https://stormline.test",
		WebhookURL: "https://agent.stormline.test/poppy/webhook"})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/poppy/webhook", strings.NewReader(`{}`))
	req.Header.Set("webhook-id", "cnv_1.evt_1")
	req.Header.Set("webhook-timestamp", "1")
	req.Header.Set("webhook-signature", "v1,AAAA")
	a.ServeHTTP(rec, req)
	require.Equal(t, http.StatusUnauthorized, rec.Code)
}
