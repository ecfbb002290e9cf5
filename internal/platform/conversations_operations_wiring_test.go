package platform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Operations in conversations (extension 4, 6, 7 "Conversations"): the
// Company Agent proposes through the Company API, the Personal Agent
// approves in a message, the origin performs at most once, and the
// outcome reaches the agent webhook. The platform's wiring: the gateway
// checks a proposal's request and the engine performs it through the
// origin; conversations' own tests are internal/conversations'.

const (
	convOpsSlug     = "outfitters"
	convOpsPassword = "correct horse battery staple"
)

// convOpsSide is a running platform with Company outfitters (operations
// on, an agent webhook with its secret, accounts ada and bob, API orders
// on a test origin), a test Personal Agent that declares operations v3,
// and River running.
type convOpsSide struct {
	env   *testkit.Env
	agent *peers.Agent
	id    int64
	key   string
	// webhookKey is the agent webhook's secret, decoded.
	webhookKey []byte
	hook       *peers.Webhook
	origin     *peers.Origin
	x          *convJacketOrigin
	issuer     string
}

// convJacketOrigin performs exchanges once per Idempotency-Key, or declines
// them, as a Company's origin does under the origin contract.
type convJacketOrigin struct {
	performed atomic.Int32
	decline   atomic.Bool
	// newTerms: the price changed, the origin proposes again.
	newTerms atomic.Bool
	// fails is how many calls answer 500 first: the outcome unknown.
	fails atomic.Int32
	mu    sync.Mutex
	keys  map[string]string
}

func (x *convJacketOrigin) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c := peers.OriginClaims(r)
	if x.fails.Add(-1) >= 0 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if x.newTerms.Swap(false) {
		w.Header().Set("Content-Type", "application/poppy-proposal+json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"action_key": "exchange o1 itm_4Qa", "summary": "Now $80.00 more.",
			"terms": {"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m",
				"price_difference": {"amount": "80.00", "currency": "USD"}}}`)
		return
	}
	if x.decline.Load() {
		w.Header().Set("Content-Type", "application/poppy-decline+json")
		_, _ = io.WriteString(w, `{"reason": "This order can no longer be exchanged.",
			"alternative": {"instructions": "Return it instead.", "references": [{"type": "web", "url": "https://outfitters.example/returns"}]}}`)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	answer, ok := x.keys[key]
	if !ok {
		n := x.performed.Add(1)
		answer = fmt.Sprintf(`{"exchange_id": "ex_%d", "operation_id": %q, "approver": %q}`, n, c.OperationID, c.Approver)
		x.keys[key] = answer
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/o1/exchanges/ex_1")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

// convOpsOptions shape newConvOpsSide.
type convOpsOptions struct {
	undeclared  bool // the agent does not declare operations
	opsDisabled bool // operations.enabled stays off
	timeout     int  // the API's timeout_seconds [10]
}

// convOrdersOpenAPI declares the exchange for anyone, and refunds for an
// access token with orders:refund.
const convOrdersOpenAPI = `{"openapi": "3.1.0", "info": {"title": "Orders", "version": "1"},
  "paths": {
    "/orders/{id}/exchanges": {"post": {"security": [],
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "responses": {"201": {"description": "the exchange"}}}},
    "/orders/{id}/refunds": {"post": {"security": [{"orders_oauth": ["orders:refund"]}],
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "responses": {"201": {"description": "the refund"}}}}
  },
  "components": {"securitySchemes": {"orders_oauth": {"type": "oauth2", "flows": {"authorizationCode": {
    "authorizationUrl": "https://outfitters.example/authorize", "tokenUrl": "https://outfitters.example/token",
    "scopes": {"orders:write": "Change your orders", "orders:refund": "Refund your orders"}}}}}}
}`

func newConvOpsSide(t *testing.T, name string, o convOpsOptions) *convOpsSide {
	t.Helper()
	env := testkit.Setup(t)
	if o.timeout == 0 {
		o.timeout = 10
	}
	s := &convOpsSide{env: env, agent: env.StartAgent(t, "agent-"+name+".test"), x: &convJacketOrigin{keys: map[string]string{}},
		issuer: env.PublicURL("/t/" + convOpsSlug)}
	if !o.undeclared {
		md := s.agent.Metadata()
		md["extensions"] = map[string]any{"operations": map[string]any{"version": "3"}}
		s.agent.SetMetadata(md)
	}
	s.hook = peers.StartWebhook(t, env.CA, "")
	env.Hosts.Add(s.hook.Host)
	env.CreateCompany(t, map[string]any{
		"slug":          convOpsSlug,
		"organization":  map[string]any{"name": "Outfitters", "domain": "outfitters.example"},
		"auth":          map[string]any{"scopes": map[string]any{"orders:write": "Change your orders"}},
		"conversations": map[string]any{"agent_webhook": s.hook.URL},
	})
	if !o.opsDisabled {
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+convOpsSlug, map[string]any{"operations": map[string]any{"enabled": true}})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	for _, user := range []string{"ada", "bob"} {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+convOpsSlug+"/accounts",
			map[string]any{"username": user, "password": convOpsPassword})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	key := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+convOpsSlug+"/api-keys", map[string]any{"name": "agent"})
	require.Equal(t, http.StatusCreated, key.Status, "%s", key.Body)
	s.key = key.JSON(t)["key"].(string)
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, convOpsSlug).Scan(&s.id))
	resp := s.api(t, http.MethodPost, "/webhook-secret", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	var err error
	s.webhookKey, err = conversations.DecodeWebhookSecret(resp.JSON(t)["secret"].(string))
	require.NoError(t, err)
	s.origin = env.StartOrigin(t, "origin-"+name+".test", s.issuer, s.issuer)
	s.origin.Handle(http.MethodPost, "/orders/o1/exchanges", s.x.serve)
	_, err = registry.NewStore(env.Pool).PutAPI(context.Background(), s.id, &registry.API{Name: "orders",
		Origin: s.origin.BaseURL(), OpenAPI: json.RawMessage(convOrdersOpenAPI),
		TimeoutSeconds: max(o.timeout, 1), MaxRequestBytes: registry.DefaultMaxRequestBytes, MaxResponseBytes: registry.DefaultMaxResponseBytes}, time.Now())
	require.NoError(t, err)
	require.NoError(t, env.Platform.Jobs.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = env.Platform.Jobs.Stop(ctx)
	})
	return s
}

// convOpsReq shapes a Personal Agent request. Zero values send a signed
// request as User usr_test of the test agent, signed out, in a new
// Session.
type convOpsReq struct {
	Sub   string // User ID ["usr_test"]
	Token string // access token
	// Header holds name, value pairs.
	Header []string
}

// convPAMsg is a Personal Agent message with text.
func convPAMsg(id, text string) map[string]any {
	return map[string]any{"id": id, "author": map[string]any{"type": "agent"}, "text": text}
}

// requireConvError checks a spec 8.13 error body.
func requireConvError(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	require.Equal(t, code, resp.JSON(t)["error"], "%s", resp.Body)
}

// convByMessage indexes outcomes by the message that carried the approval.
func convByMessage(outs []map[string]any) map[string]map[string]any {
	m := map[string]map[string]any{}
	for _, o := range outs {
		m[o["message_id"].(string)] = o
	}
	return m
}

// api calls the Company API at /company/v1/conversations + path.
func (s *convOpsSide) api(t *testing.T, method, path string, body any) *peers.Response {
	t.Helper()
	return s.env.Do(t, method, s.env.PublicURL("/company/v1/conversations"+path), body, "Authorization", "Bearer "+s.key)
}

// pa sends a Personal Agent request to the conversation endpoint + path.
func (s *convOpsSide) pa(t *testing.T, method, path string, body any, o convOpsReq) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, method, s.issuer+"/poppy/conversations"+path, body)
	s.agent.Sign(t, req, peers.SessionClaims{Aud: s.issuer, Sub: o.Sub, AccessToken: o.Token}, peers.SessionOptions{})
	for i := 0; i+1 < len(o.Header); i += 2 {
		req.Header.Set(o.Header[i], o.Header[i+1])
	}
	return peers.Send(t, s.env.Client, req)
}

func (s *convOpsSide) signIn(t *testing.T, user string) string {
	t.Helper()
	return s.env.SignIn(t, s.agent, s.issuer, user, convOpsPassword, []string{"orders:write"}, "").AccessToken
}

// start starts a conversation and returns its ID.
func (s *convOpsSide) start(t *testing.T, o convOpsReq) string {
	t.Helper()
	resp := s.pa(t, http.MethodPost, "", map[string]any{"message": convPAMsg("msg_start", "I'd like the insulated jacket instead.")}, o)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return resp.JSON(t)["conversation_id"].(string)
}

// convProposal is the Company Agent's proposal of the jacket exchange.
func convProposal(sku string) map[string]any {
	return map[string]any{
		"action_key": "exchange o1 itm_4Qa",
		"summary":    "Exchange the Stormline Jacket (M) for the " + sku + ", for $70.00 more.",
		"terms": map[string]any{"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": sku,
			"price_difference": map[string]any{"amount": "70.00", "currency": "USD"}},
		"perform": map[string]any{"api": "orders", "method": "POST", "path": "/orders/o1/exchanges",
			"body": map[string]any{"item_id": "itm_4Qa", "replacement_sku": sku}},
	}
}

// convOfferMsg is a Company message carrying ops in extensions.operations.
func convOfferMsg(id string, ops map[string]any) map[string]any {
	m := map[string]any{"author": map[string]any{"type": "agent"},
		"text":       "I can exchange it for the insulated version for $70 more. I'll do it once you approve.",
		"extensions": map[string]any{"operations": ops}}
	if id != "" {
		m["id"] = id
	}
	return map[string]any{"message": m}
}

// propose has the Company Agent propose in conversation id and returns
// the operation the Personal Agent is sent.
func (s *convOpsSide) propose(t *testing.T, id string, p map[string]any) map[string]any {
	t.Helper()
	resp := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", map[string]any{"proposal": p}))
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	op := resp.JSON(t)["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)["operation"].(map[string]any)
	require.NotEmpty(t, op["operation_id"])
	require.NotEmpty(t, op["revision"])
	return op
}

// convApprovalMsg is a Personal Agent message approving op.
func convApprovalMsg(id string, op map[string]any, extra map[string]any) map[string]any {
	a := map[string]any{"operation_id": op["operation_id"], "revision": op["revision"], "approver": "user",
		"approved_at": 1791487260, "input_type": "tap"}
	for k, v := range extra {
		a[k] = v
	}
	return map[string]any{"message": map[string]any{"id": id, "author": map[string]any{"type": "agent"},
		"text": "The user approved the exchange.", "extensions": map[string]any{"operations": map[string]any{"approval": a}}}}
}

// outcomes returns the conversation.operation deliveries once n arrived.
func (s *convOpsSide) outcomes(t *testing.T, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		var out []map[string]any
		for _, d := range peers.Succeeded(s.hook.Deliveries()) {
			var p struct {
				Type string `json:"type"`
				Data struct {
					Operation map[string]any `json:"operation"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(d.Body, &p))
			if p.Type == "conversation.operation" {
				require.NoError(t, conversations.VerifyWebhook(s.webhookKey, d.Header, d.Body, time.Now(), conversations.WebhookTolerance))
				out = append(out, p.Data.Operation)
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d outcomes arrived", len(out), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settled waits until n perform jobs completed.
func (s *convOpsSide) settled(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var done int
		require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'conversations_perform_operation' AND state = 'completed'`).Scan(&done))
		return done >= n
	}, 30*time.Second, 50*time.Millisecond)
}

// eventCount is the number of events of conversation id.
func (s *convOpsSide) eventCount(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2`, s.id, id).Scan(&n))
	return n
}

func TestOperationsConversationJacketExchange(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-jacket", convOpsOptions{})
	token := s.signIn(t, "ada")
	id := s.start(t, convOpsReq{Token: token})

	// The Company Agent proposes; the Personal Agent sees the operation,
	// never the proposal or the request that performs it.
	op := s.propose(t, id, convProposal("stormline-insulated-m"))
	require.Equal(t, map[string]any{"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m",
		"price_difference": map[string]any{"amount": "70.00", "currency": "USD"}}, op["terms"])
	require.NotEmpty(t, op["expires_at"])
	read := s.pa(t, http.MethodGet, "/"+id+"/events", nil, convOpsReq{Token: token})
	require.Equal(t, http.StatusOK, read.Status, "%s", read.Body)
	for _, hidden := range []string{"proposal", "perform", "/orders/o1/exchanges", "action_key"} {
		require.NotContains(t, string(read.Body), hidden)
	}
	var rd struct {
		Events []struct {
			Message *struct {
				Extensions struct {
					Operations struct {
						Operation map[string]any `json:"operation"`
					} `json:"operations"`
				} `json:"extensions"`
			} `json:"message"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(read.Body, &rd))
	var sent []map[string]any
	for _, e := range rd.Events {
		if e.Message != nil && e.Message.Extensions.Operations.Operation != nil {
			sent = append(sent, e.Message.Extensions.Operations.Operation)
		}
	}
	require.Equal(t, []map[string]any{op}, sent)
	require.Zero(t, len(s.origin.Received()), "nothing performed before the approval")

	// The approval, with a member the Company does not know.
	resp := s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, map[string]any{"future": 1}), convOpsReq{Token: token})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "performed", out["status"], "%v", out)
	require.Equal(t, op["operation_id"], out["operation_id"])
	require.Equal(t, op["revision"], out["revision"])
	require.Equal(t, "msg_ok", out["message_id"])
	response := out["response"].(map[string]any)
	require.Equal(t, float64(http.StatusCreated), response["status"])
	require.Equal(t, "/orders/o1/exchanges/ex_1", response["location"])
	require.Equal(t, map[string]any{"exchange_id": "ex_1", "operation_id": op["operation_id"], "approver": "user"}, response["body"])
	require.Equal(t, int32(1), s.x.performed.Load())
	got := s.origin.Last()
	require.Equal(t, op["operation_id"].(string)+"."+op["revision"].(string), got.Header.Get("Idempotency-Key"))
	require.Equal(t, op["operation_id"], got.Claims.OperationID)
	require.Equal(t, op["revision"], got.Claims.Revision)
	require.Equal(t, "user", got.Claims.Approver)
	require.NotEmpty(t, got.Claims.Account, "the approving Session's account")
	require.JSONEq(t, `{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}`, string(got.Body))

	// The message itself reached the Company Agent before its outcome.
	var kinds []string
	for _, d := range peers.Succeeded(s.hook.Deliveries()) {
		kinds = append(kinds, d.Header.Get("webhook-id"))
	}
	require.Equal(t, id+".op."+op["operation_id"].(string)+"."+op["revision"].(string)+".performed", kinds[len(kinds)-1])
	require.Contains(t, kinds, id+".evt_5", "the approval message, delivered first")

	// The same message retried: the original response, nothing performed
	// or scheduled again.
	retry := s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, map[string]any{"future": 1}), convOpsReq{Token: token})
	require.Equal(t, http.StatusAccepted, retry.Status, "%s", retry.Body)
	// A new message repeating the approval adds nothing.
	again := s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok_again", op, nil), convOpsReq{Token: token})
	require.Equal(t, http.StatusAccepted, again.Status, "%s", again.Body)
	s.settled(t, 2)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, s.outcomes(t, 1), 1, "no second outcome")
	require.Equal(t, int32(1), s.x.performed.Load())
	var jobs int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
		WHERE kind = 'conversations_perform_operation'`).Scan(&jobs))
	require.Equal(t, 2, jobs, "the retried message scheduled nothing")
}

// startWith starts a conversation whose first message is msg.
func (s *convOpsSide) startWith(t *testing.T, msg map[string]any, o convOpsReq) string {
	t.Helper()
	resp := s.pa(t, http.MethodPost, "", msg, o)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return resp.JSON(t)["conversation_id"].(string)
}

func TestOperationsConversationChecks(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-checks", convOpsOptions{})
	ada, bob := s.signIn(t, "ada"), s.signIn(t, "bob")
	id := s.start(t, convOpsReq{Token: ada})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))
	events := s.eventCount(t, id)

	// extension 6: approver is required; a malformed approval stores
	// nothing.
	noApprover := convApprovalMsg("msg_bad", op, nil)
	delete(noApprover["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)["approval"].(map[string]any), "approver")
	requireConvError(t, s.pa(t, http.MethodPost, "/"+id+"/messages", noApprover, convOpsReq{Token: ada}), http.StatusBadRequest, "invalid_request")
	badID := convApprovalMsg("msg_bad", map[string]any{"operation_id": 7, "revision": op["revision"]}, nil)
	requireConvError(t, s.pa(t, http.MethodPost, "/"+id+"/messages", badID, convOpsReq{Token: ada}), http.StatusBadRequest, "invalid_request")
	require.Equal(t, events, s.eventCount(t, id))

	// A signed-out request to the account's conversation: a challenge,
	// nothing stored (spec 8.2).
	out := s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_out", op, nil), convOpsReq{})
	require.Equal(t, http.StatusUnauthorized, out.Status, "%s", out.Body)
	require.Contains(t, out.Header.Get("WWW-Authenticate"), "Bearer")
	require.Equal(t, events, s.eventCount(t, id))

	// Check 1: another User, another account; a signed-out Session of the
	// same User; check 3: another conversation of the same owner, a
	// revision that is not the operation's.
	other := s.startWith(t, convApprovalMsg("msg_other_user", op, nil), convOpsReq{Sub: "usr_other"})
	bobs := s.startWith(t, convApprovalMsg("msg_bob", op, nil), convOpsReq{Token: bob})
	signedOut := s.startWith(t, convApprovalMsg("msg_signed_out", op, nil), convOpsReq{})
	second := s.startWith(t, convApprovalMsg("msg_second", op, nil), convOpsReq{Token: ada})
	wrong := convApprovalMsg("msg_wrong_rev", map[string]any{"operation_id": op["operation_id"], "revision": "rev_not_ours"}, nil)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", wrong, convOpsReq{Token: ada}).Status)

	// An expired revision.
	short := convProposal("stormline-parka-m")
	short["action_key"], short["expires_in"] = "exchange o1 parka", 1
	expiring := s.propose(t, id, short)
	time.Sleep(1100 * time.Millisecond)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_late", expiring, nil), convOpsReq{Token: ada}).Status)

	got := convByMessage(s.outcomes(t, 6))
	for msg, want := range map[string]string{"msg_other_user": "unapproved", "msg_bob": "unapproved",
		"msg_signed_out": "needs_account", "msg_second": "stale", "msg_wrong_rev": "stale", "msg_late": "stale"} {
		require.Equal(t, want, got[msg]["status"], "%s: %v", msg, got[msg])
		require.Nil(t, got[msg]["response"])
	}
	require.Zero(t, s.x.performed.Load())
	require.Empty(t, s.origin.Received(), "nothing was sent to the origin")
	for _, c := range []string{other, bobs, signedOut, second} {
		require.NotEqual(t, id, c)
	}

	// Another Company never performs it: the operation is not its own.
	s.env.CreateCompany(t, map[string]any{"slug": "rival-outfitters",
		"organization": map[string]any{"name": "Rival", "domain": "rival-outfitters.example"}})
	patched := s.env.Admin(t, http.MethodPatch, "/admin/v1/companies/rival-outfitters", map[string]any{"operations": map[string]any{"enabled": true}})
	require.Equal(t, http.StatusOK, patched.Status, "%s", patched.Body)
	rivalIssuer := s.env.PublicURL("/t/rival-outfitters")
	req := peers.NewRequest(t, http.MethodPost, rivalIssuer+"/poppy/conversations", convApprovalMsg("msg_rival", op, nil))
	s.agent.Sign(t, req, peers.SessionClaims{Aud: rivalIssuer}, peers.SessionOptions{})
	started := peers.Send(t, s.env.Client, req)
	require.Equal(t, http.StatusCreated, started.Status, "%s", started.Body)
	require.Eventually(t, func() bool {
		var status string
		err := s.env.Pool.QueryRow(context.Background(), `SELECT o.status FROM conversation_operation_outcomes o
			JOIN companies c ON c.id = o.company_id WHERE c.slug = 'rival-outfitters'`).Scan(&status)
		return err == nil && status == "stale"
	}, 30*time.Second, 50*time.Millisecond)
	require.Empty(t, s.origin.Received())

	// None of them used the approval up: the owner's, in its conversation.
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{Token: ada}).Status)
	got = convByMessage(s.outcomes(t, 7))
	require.Equal(t, "performed", got["msg_ok"]["status"])
	require.Equal(t, int32(1), s.x.performed.Load())
}

func TestOperationsConversationDecline(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-decline", convOpsOptions{})
	id := s.start(t, convOpsReq{})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))

	// The origin declines at perform time: nothing performed.
	s.x.decline.Store(true)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{}).Status)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "declined", out["status"], "%v", out)
	require.Equal(t, map[string]any{"reason": "This order can no longer be exchanged.",
		"alternative": map[string]any{"instructions": "Return it instead.",
			"references": []any{map[string]any{"type": "web", "url": "https://outfitters.example/returns"}}}}, out["decline"])
	require.Zero(t, s.x.performed.Load())
	require.Len(t, s.origin.Received(), 1)

	// The same approval is never accepted again, even once the origin
	// would perform.
	s.x.decline.Store(false)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_again", op, nil), convOpsReq{}).Status)
	got := convByMessage(s.outcomes(t, 2))
	require.Equal(t, "stale", got["msg_again"]["status"])
	require.Len(t, s.origin.Received(), 1)

	// The Company Agent passes the decline on (extension 6).
	declined := map[string]any{"operation_id": op["operation_id"], "revision": op["revision"],
		"reason": "This order can no longer be exchanged.", "unknown": true,
		"alternative": map[string]any{"references": []any{map[string]any{"type": "web", "url": "https://outfitters.example/returns"}}}}
	resp := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", map[string]any{"declined": declined}))
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	sent := resp.JSON(t)["message"].(map[string]any)["extensions"].(map[string]any)["operations"].(map[string]any)
	delete(declined, "unknown")
	require.Equal(t, map[string]any{"declined": declined}, sent)

	events := s.eventCount(t, id)
	for name, bad := range map[string]map[string]any{
		"http alternative": {"operation_id": op["operation_id"], "revision": op["revision"],
			"alternative": map[string]any{"references": []any{map[string]any{"type": "web", "url": "http://outfitters.example/returns"}}}},
		"no revision":  {"operation_id": op["operation_id"]},
		"control char": {"operation_id": op["operation_id"], "revision": op["revision"], "reason": "no\u0001"},
	} {
		resp := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", map[string]any{"declined": bad}))
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s: %s", name, resp.Body)
		require.Equal(t, "invalid_request", resp.JSON(t)["error"], name)
	}
	require.Equal(t, events, s.eventCount(t, id))
}

func TestOperationsConversationProposals(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-proposals", convOpsOptions{})
	id := s.start(t, convOpsReq{})
	events := s.eventCount(t, id)
	with := func(change func(p, perform map[string]any)) map[string]any {
		p := convProposal("stormline-insulated-m")
		change(p, p["perform"].(map[string]any))
		return map[string]any{"proposal": p}
	}
	for name, ops := range map[string]map[string]any{
		"no perform":       with(func(p, _ map[string]any) { delete(p, "perform") }),
		"unknown api":      with(func(_, f map[string]any) { f["api"] = "billing" }),
		"no api":           with(func(_, f map[string]any) { delete(f, "api") }),
		"method":           with(func(_, f map[string]any) { f["method"] = "TRACE" }),
		"relative path":    with(func(_, f map[string]any) { f["path"] = "orders/o1" }),
		"dot segment":      with(func(_, f map[string]any) { f["path"] = "/orders/../admin" }),
		"escaped dots":     with(func(_, f map[string]any) { f["path"] = "/orders/%2e%2e/admin" }),
		"query in path":    with(func(_, f map[string]any) { f["path"] = "/orders/o1?admin=1" }),
		"network path":     with(func(_, f map[string]any) { f["path"] = "//evil.example/x" }),
		"fragment query":   with(func(_, f map[string]any) { f["query"] = "a=1#x" }),
		"bad escape":       with(func(_, f map[string]any) { f["path"] = "/orders/%zz" }),
		"terms not object": with(func(p, _ map[string]any) { p["terms"] = []any{1} }),
		"no action_key":    with(func(p, _ map[string]any) { delete(p, "action_key") }),
		"expires_in":       with(func(p, _ map[string]any) { p["expires_in"] = -5 }),
		"undeclared path":  with(func(_, f map[string]any) { f["path"] = "/orders/o1/cancel" }),
		"wrong method":     with(func(_, f map[string]any) { f["method"] = "PUT" }),
		"operation itself": {"operation": map[string]any{"operation_id": "op_1", "revision": "r1", "terms": map[string]any{}}},
		"both":             {"proposal": convProposal("x"), "declined": map[string]any{"operation_id": "op_1", "revision": "r1"}},
		"neither":          {},
	} {
		resp := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", ops))
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s: %s", name, resp.Body)
		require.Equal(t, "invalid_request", resp.JSON(t)["error"], name)
	}
	// The one path rule (safehttp.ValidPath) is the proposal's own: a
	// path-parameter dot segment was left to the gateway before, and
	// control characters reached the origin.
	for _, path := range []string{"/orders/..;/exchanges", "/orders/%2e%2e;x/exchanges", "/orders/o1/.;",
		"/orders/o1%0A/exchanges", "/orders/o1%00/exchanges"} {
		ops := with(func(_, f map[string]any) { f["path"] = path })
		resp := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", ops))
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s: %s", path, resp.Body)
		require.Contains(t, resp.JSON(t)["error_description"], "proposal.perform.path must be", path)
	}
	require.Equal(t, events, s.eventCount(t, id), "nothing stored")
	var proposed int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operations WHERE company_id = $1`, s.id).Scan(&proposed))
	require.Zero(t, proposed, "nothing proposed")

	// A query is kept with the request; a retry of a message with the same
	// ID and content answers the first post; other terms are a conflict.
	p := convProposal("stormline-insulated-m")
	p["perform"].(map[string]any)["query"] = "notify=email&lang=en"
	first := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("msg_offer", map[string]any{"proposal": p}))
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	retry := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("msg_offer", map[string]any{"proposal": p}))
	require.Equal(t, http.StatusOK, retry.Status, "%s", retry.Body)
	require.JSONEq(t, string(first.Body), string(retry.Body))
	changed := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("msg_offer", map[string]any{"proposal": convProposal("stormline-parka-m")}))
	require.Equal(t, http.StatusConflict, changed.Status, "%s", changed.Body)
	require.Equal(t, "message_id_conflict", changed.JSON(t)["error"])
	var query string
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT request->>'query' FROM operation_revisions
		WHERE company_id = $1`, s.id).Scan(&query))
	require.Equal(t, "notify=email&lang=en", query)
}

func TestOperationsConversationRefused(t *testing.T) {
	t.Parallel()
	// Operations off: the Company API refuses a proposal, and a Personal
	// Agent's approval is ignored as an unlisted extension's content.
	off := newConvOpsSide(t, "conv-off", convOpsOptions{opsDisabled: true})
	id := off.start(t, convOpsReq{})
	resp := off.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", map[string]any{"proposal": convProposal("x")}))
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.JSON(t)["error_description"], "operations.enabled")
	fake := map[string]any{"operation_id": "op_x", "revision": "rev_x"}
	require.Equal(t, http.StatusAccepted, off.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_a", fake, nil), convOpsReq{}).Status)

	// An agent that does not declare version 3: 409, and its approvals
	// are ignored (extension 2).
	undeclared := newConvOpsSide(t, "conv-undeclared", convOpsOptions{undeclared: true})
	id2 := undeclared.start(t, convOpsReq{})
	resp = undeclared.api(t, http.MethodPost, "/"+id2+"/messages", convOfferMsg("", map[string]any{"proposal": convProposal("x")}))
	require.Equal(t, http.StatusConflict, resp.Status, "%s", resp.Body)
	require.Equal(t, http.StatusAccepted, undeclared.pa(t, http.MethodPost, "/"+id2+"/messages", convApprovalMsg("msg_a", fake, nil), convOpsReq{}).Status)
	rd := undeclared.pa(t, http.MethodGet, "/"+id2+"/events", nil, convOpsReq{})
	require.NotContains(t, string(rd.Body), "op_x", "the content was dropped")

	for _, s := range []*convOpsSide{off, undeclared} {
		var jobs int
		require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'conversations_perform_operation'`).Scan(&jobs))
		require.Zero(t, jobs)
	}
}

func TestOperationsConversationPerforming(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-performing", convOpsOptions{timeout: 1})
	id := s.start(t, convOpsReq{})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))

	// The origin fails: the outcome is unknown, never a failure
	// (extension 7); the settle job finishes it and the Company Agent is
	// told once it is known.
	s.x.fails.Store(1)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{}).Status)
	first := s.outcomes(t, 1)[0]
	require.Equal(t, "performing", first["status"], "%v", first)
	// Meanwhile the same action gets no second operation.
	busy := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", map[string]any{"proposal": convProposal("stormline-insulated-m")}))
	require.Equal(t, http.StatusConflict, busy.Status, "%s", busy.Body)
	require.Contains(t, string(busy.Body), "is being performed")
	outs := s.outcomes(t, 2)
	require.Equal(t, "performed", outs[1]["status"], "%v", outs[1])
	require.Equal(t, map[string]any{"exchange_id": "ex_1", "operation_id": op["operation_id"], "approver": "user"},
		outs[1]["response"].(map[string]any)["body"])
	require.Equal(t, int32(1), s.x.performed.Load())
}

func TestOperationsConversationNewTerms(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-new-terms", convOpsOptions{})
	id := s.start(t, convOpsReq{})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))

	// The price changed before the approval arrived: nothing performed,
	// and the Company Agent gets the new revision.
	s.x.newTerms.Store(true)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{}).Status)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "new_terms", out["status"], "%v", out)
	fresh := out["operation"].(map[string]any)
	require.Equal(t, op["operation_id"], fresh["operation_id"])
	require.NotEqual(t, op["revision"], fresh["revision"], "never the revision the approval named")
	require.Equal(t, "80.00", fresh["terms"].(map[string]any)["price_difference"].(map[string]any)["amount"])
	require.Zero(t, s.x.performed.Load())

	// The Company Agent proposes the new terms: the Personal Agent gets
	// that revision, and its approval performs the proposal's request.
	p := convProposal("stormline-insulated-m")
	p["terms"].(map[string]any)["price_difference"] = map[string]any{"amount": "80.00", "currency": "USD"}
	again := s.propose(t, id, p)
	require.Equal(t, fresh["revision"], again["revision"])
	// The old approval first, and its outcome known before the new one is
	// sent: once the operation is performed, check 2 comes before check 3,
	// and the old approval would get the stored answer.
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_old", op, nil), convOpsReq{}).Status)
	s.outcomes(t, 2)
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_new", again, nil), convOpsReq{}).Status)
	got := convByMessage(s.outcomes(t, 3))
	require.Equal(t, "stale", got["msg_old"]["status"])
	require.Equal(t, "performed", got["msg_new"]["status"])
	require.Equal(t, int32(1), s.x.performed.Load())
	require.Equal(t, op["operation_id"].(string)+"."+again["revision"].(string), s.origin.Last().Header.Get("Idempotency-Key"))

	// The operation was performed by the new revision's approval: the
	// first revision's state says it was replaced, never performed.
	store := operations.NewStore(s.env.Pool)
	old, err := store.State(context.Background(), s.id, op["operation_id"].(string), op["revision"].(string))
	require.NoError(t, err)
	require.Equal(t, "proposed", old.Status)
	require.Nil(t, old.Response)
	require.True(t, old.Replaced)
	cur, err := store.State(context.Background(), s.id, op["operation_id"].(string), again["revision"].(string))
	require.NoError(t, err)
	require.Equal(t, "performed", cur.Status)
	require.NotNil(t, cur.Response)
}
