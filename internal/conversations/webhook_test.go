package conversations_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// verifyWebhook checks a delivery as docs/company-agent.md tells a
// Company to.
func verifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := conversations.DecodeWebhookSecret(secret)
	if err != nil {
		return err
	}
	return conversations.VerifyWebhook(key, h, body, now, conversations.WebhookTolerance)
}

func decodeSecret(t *testing.T, secret string) []byte {
	t.Helper()
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	return raw
}

// verifiedClaims checks a Poppy-Verified JWT against the Company's key
// set at {issuer}/oauth/jwks.json, as the Company would, and returns its
// claims.
func verifiedClaims(t *testing.T, cs *companySide, token string) map[string]any {
	t.Helper()
	issuer := cs.env.PublicURL("/t/" + coSlug)
	resp := cs.env.Do(t, http.MethodGet, issuer+"/oauth/jwks.json", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	set, err := jwk.Parse(resp.Body)
	require.NoError(t, err)
	return checkVerified(t, set, issuer, cs.hook.URL, token)
}

// checkVerified checks a Poppy-Verified JWT of issuer for the webhook
// hookURL against the key set and returns its claims.
func checkVerified(t *testing.T, set jwk.Set, issuer, hookURL, token string) map[string]any {
	t.Helper()
	payload, err := jws.Verify([]byte(token), jws.WithKeySet(set))
	require.NoError(t, err)
	msg, err := jws.Parse([]byte(token))
	require.NoError(t, err)
	require.Equal(t, "poppy-verified+jwt", msg.Signatures()[0].ProtectedHeaders().Type())
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	require.Equal(t, issuer, claims["iss"])
	require.Equal(t, hookURL, claims["aud"], "bound to the webhook")
	iat, exp := int64(claims["iat"].(float64)), int64(claims["exp"].(float64))
	require.Equal(t, int64(300), exp-iat, "five minutes")
	require.WithinDuration(t, time.Now(), time.Unix(iat, 0), time.Minute)
	require.NotEmpty(t, claims["jti"])
	return claims
}

// payloadOf decodes a delivery's body.
func payloadOf(t *testing.T, d peers.WebhookDelivery) (conv, event map[string]any) {
	t.Helper()
	var p struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
		Data      struct {
			Conversation map[string]any `json:"conversation"`
			Event        map[string]any `json:"event"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(d.Body, &p), "%s", d.Body)
	require.Equal(t, "conversation.event", p.Type)
	require.Equal(t, p.Data.Event["created_at"], p.Timestamp)
	return p.Data.Conversation, p.Data.Event
}

// hookIDs lists the webhook-id of each delivery.
func hookIDs(ds []peers.WebhookDelivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Header.Get("webhook-id")
	}
	return out
}

func TestWebhookDelivers(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{webhook: true})
	secret := cs.api(t, http.MethodPost, "/webhook-secret", nil).JSON(t)["secret"].(string)

	// A new conversation is working: the Company Agent prepares a reply.
	id := cs.paStart(t, "msg_1", "Can I return the jacket?")
	require.Equal(t, "working", cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["status"])
	setVerified(t, cs, id, 1, map[string]any{"client_id": cs.agent.ClientID, "sid": "sid_1", "user_id": "usr_test",
		"agent_id": "agt_1", "account": "42", "scopes": []string{"orders:read"}})
	startJobs(t, cs.env)

	ds := cs.hook.Wait(t, 2)
	require.Equal(t, []string{id + ".evt_1", id + ".evt_2"}, hookIDs(ds))
	for _, d := range ds {
		require.NoError(t, verifyWebhook(secret, d.Header, d.Body, time.Now()))
		require.Equal(t, "application/json", d.Header.Get("Content-Type"))
		require.Error(t, verifyWebhook("whsec_"+base64.StdEncoding.EncodeToString(make([]byte, 32)), d.Header, d.Body, time.Now()))
		require.Error(t, verifyWebhook(secret, d.Header, append(d.Body, ' '), time.Now()), "the body is signed")
		require.Error(t, verifyWebhook(secret, d.Header, d.Body, time.Now().Add(10*time.Minute)), "a late replay")
	}
	conv, event := payloadOf(t, ds[0])
	require.Equal(t, id, conv["id"])
	require.Equal(t, map[string]any{"client_id": cs.agent.ClientID, "user_id": "usr_test", "account": ""}, conv["owner"])
	require.Equal(t, map[string]any{"locale": "en-US", "user_available": true}, conv["context"])
	require.Equal(t, "evt_1", event["id"])
	require.Equal(t, "message", event["type"])
	require.Equal(t, "Can I return the jacket?", event["message"].(map[string]any)["text"])
	_, event = payloadOf(t, ds[1])
	require.Equal(t, map[string]any{"type": "state", "status": "working", "responder": "agent"}, withoutMeta(event))

	// Poppy-Verified: the facts verified on that message, else only the
	// owner, never more.
	claims := verifiedClaims(t, cs, ds[0].Header.Get("Poppy-Verified"))
	for k, want := range map[string]any{"client_id": cs.agent.ClientID, "sid": "sid_1", "user_id": "usr_test", "agent_id": "agt_1",
		"account": "42", "scopes": []any{"orders:read"}, "conversation_id": id, "event_id": "evt_1"} {
		require.Equal(t, want, claims[k], k)
	}
	claims = verifiedClaims(t, cs, ds[1].Header.Get("Poppy-Verified"))
	for k, want := range map[string]any{"client_id": cs.agent.ClientID, "sid": "", "user_id": "usr_test", "agent_id": "",
		"account": "", "scopes": []any{}, "event_id": "evt_2"} {
		require.Equal(t, want, claims[k], k)
	}

	// The Company's own changes do not come back; the Personal Agent's
	// next message does. A rotated secret signs next to the old one.
	resp := cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"author": map[string]any{"type": "agent"}, "text": "Yes, within 30 days."}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	newSecret := cs.api(t, http.MethodPost, "/webhook-secret", nil).JSON(t)["secret"].(string)
	sent := cs.pa(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_2", "author": map[string]any{"type": "human"}, "text": "Great, thanks"}})
	require.Equal(t, http.StatusAccepted, sent.Status, "%s", sent.Body)
	ds = cs.hook.Wait(t, 4)
	require.Equal(t, []string{id + ".evt_1", id + ".evt_2", id + ".evt_5", id + ".evt_6"}, hookIDs(ds))
	require.Len(t, strings.Fields(ds[2].Header.Get("webhook-signature")), 2)
	require.NoError(t, verifyWebhook(secret, ds[2].Header, ds[2].Body, time.Now()))
	require.NoError(t, verifyWebhook(newSecret, ds[2].Header, ds[2].Body, time.Now()))
	conv, _ = payloadOf(t, ds[3])
	require.Equal(t, "evt_6", conv["cursor"])

	// A Direct Conversation: its events, and the parent's direct_opened.
	require.Equal(t, http.StatusCreated, cs.api(t, http.MethodPost, "/"+id+"/user-requested", map[string]any{"reason": "r"}).Status)
	direct := cs.pa(t, http.MethodPost, "", map[string]any{"parent_conversation_id": id, "user_requested_event_id": "evt_7"})
	require.Equal(t, http.StatusCreated, direct.Status, "%s", direct.Body)
	directID := direct.JSON(t)["conversation_id"].(string)
	ds = peers.Succeeded(cs.hook.Wait(t, 6))
	require.ElementsMatch(t, []string{directID + ".evt_1", id + ".evt_8"}, hookIDs(ds[4:]))
	for _, d := range ds[4:] {
		if _, event := payloadOf(t, d); event["type"] == "direct_opened" {
			require.Equal(t, directID, event["conversation_id"])
		}
	}

	// Everything delivered is recorded.
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, cs.env.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM conversations WHERE delivered_seq <> last_seq`).Scan(&pending))
		return pending == 0
	}, 10*time.Second, 50*time.Millisecond)
}

func TestWebhookRetriesInOrder(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{webhook: true})
	secret := cs.api(t, http.MethodPost, "/webhook-secret", nil).JSON(t)["secret"].(string)
	a := cs.paStart(t, "msg_a1", "First")
	b := cs.paStart(t, "msg_b1", "Other")
	for i := 2; i <= 3; i++ {
		resp := cs.pa(t, http.MethodPost, "/"+a+"/messages", map[string]any{"message": map[string]any{
			"id": "msg_a" + strconv.Itoa(i), "author": map[string]any{"type": "agent"}, "text": "More " + strconv.Itoa(i)}})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	}
	// The webhook fails once, then answers slowly while messages keep
	// coming.
	cs.hook.Set(1, 0)
	startJobs(t, cs.env)
	cs.hook.Wait(t, 1)
	cs.hook.Set(0, 30*time.Millisecond)
	for i := 4; i <= 7; i++ {
		resp := cs.pa(t, http.MethodPost, "/"+a+"/messages", map[string]any{"message": map[string]any{
			"id": "msg_a" + strconv.Itoa(i), "author": map[string]any{"type": "agent"}, "text": "More"}})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	}
	var last int64
	require.NoError(t, cs.env.Pool.QueryRow(context.Background(),
		`SELECT last_seq FROM conversations WHERE id = $1`, a).Scan(&last))
	require.Equal(t, int64(8), last, "7 messages and the state that set working")

	all := cs.hook.Wait(t, 10)
	require.Equal(t, http.StatusInternalServerError, all[0].Status)
	failedConv, failedEvt, _ := strings.Cut(all[0].Header.Get("webhook-id"), ".")
	require.Equal(t, "evt_1", failedEvt)
	var perConv = map[string][]string{}
	for _, d := range peers.Succeeded(all) {
		require.NoError(t, verifyWebhook(secret, d.Header, d.Body, time.Now()))
		conv, evt, _ := strings.Cut(d.Header.Get("webhook-id"), ".")
		perConv[conv] = append(perConv[conv], evt)
	}
	// A retry keeps the webhook-id, so the Company can drop a repeat.
	require.Equal(t, "evt_1", perConv[failedConv][0])
	var want []string
	for i := 1; i <= 8; i++ {
		want = append(want, "evt_"+strconv.Itoa(i))
	}
	require.Equal(t, want, perConv[a], "every event once, in order")
	require.Equal(t, []string{"evt_1", "evt_2"}, perConv[b])
	require.Len(t, all, 11)
}

func TestWebhookWaitsForItsSecret(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{webhook: true})
	id := cs.paStart(t, "msg_1", "Hello")
	startJobs(t, cs.env)
	// Without a secret nothing is sent; the job waits to retry.
	require.Eventually(t, func() bool {
		var state string
		err := cs.env.Pool.QueryRow(context.Background(), `SELECT state FROM river_job
			WHERE kind = 'conversations_deliver' AND args->>'conversation_id' = $1`, id).Scan(&state)
		return err == nil && state == "retryable"
	}, 20*time.Second, 50*time.Millisecond)
	require.Zero(t, cs.hook.Count())
	secret := cs.api(t, http.MethodPost, "/webhook-secret", nil).JSON(t)["secret"].(string)
	ds := cs.hook.Wait(t, 2)
	require.Equal(t, []string{id + ".evt_1", id + ".evt_2"}, hookIDs(ds))
	require.NoError(t, verifyWebhook(secret, ds[0].Header, ds[0].Body, time.Now()))
}

// deliverySide is a database of its own with acme, a Delivery built as
// the platform builds it, its worker, and a store that makes
// conversations without enqueuing their delivery: the tests run the
// delivery job themselves.
type deliverySide struct {
	pool     *pgxpool.Pool
	acme     *tenant.Company
	store    *conversations.Store
	delivery *conversations.Delivery
	keys     *signing.Keys
	urls     tenant.URLs
	workers  *river.Workers
	hook     *peers.Webhook
}

// newDeliverySide makes acme, with an agent webhook served by a test
// receiver when webhook is set.
func newDeliverySide(t *testing.T, webhook bool) *deliverySide {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	hosts := &peers.Hosts{}
	d := &deliverySide{pool: testdb.NewPool(t), urls: tenant.URLs{Public: &url.URL{Scheme: "https", Host: "poppy.test"}}}
	settings := tenant.Settings{Organization: tenant.Organization{Name: "Acme", Domain: "acme.example"}}
	if webhook {
		d.hook = peers.StartWebhook(t, ca, "")
		hosts.Add(d.hook.Host)
		settings.Conversations.AgentWebhook = d.hook.URL
	}
	companies := tenant.NewStore(d.pool)
	d.acme, err = companies.Create(context.Background(), coSlug, settings)
	require.NoError(t, err)
	d.keys = signing.NewKeys(d.pool, testdb.Sealer(d.pool), signing.Options{})
	d.delivery = conversations.NewDelivery(conversations.DeliveryOptions{
		Pool: d.pool, Jobs: testdb.Inserter(t, d.pool), Companies: companies, Keys: d.keys, Sealer: testdb.Sealer(d.pool), URLs: d.urls,
		Client: safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: hosts}),
	})
	d.workers = river.NewWorkers()
	d.delivery.AddWorkers(d.workers)
	d.store = conversations.NewStore(d.pool, conversations.StoreOptions{})
	return d
}

// start starts a conversation with a Personal Agent message: two events.
func (d *deliverySide) start(t *testing.T, msgID, text string) string {
	t.Helper()
	c, err := d.store.Start(context.Background(), d.acme.ID, conversations.Owner{ClientID: "https://agent.test/", UserID: "user_1"},
		conversations.StartRequest{Message: &conversations.Message{
			ID: msgID, Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &text}}, conversations.Policy{})
	require.NoError(t, err)
	return c.ID
}

// deliver runs the delivery job of a conversation.
func (d *deliverySide) deliver(t *testing.T, companyID int64, id string) {
	t.Helper()
	testdb.RunJob(t, d.pool, d.workers, conversations.DeliverArgs{CompanyID: companyID, ConversationID: id})
}

// seqs returns how far a conversation's events were delivered, and its
// last event.
func (d *deliverySide) seqs(t *testing.T, id string) (delivered, last int64) {
	t.Helper()
	require.NoError(t, d.pool.QueryRow(context.Background(),
		`SELECT delivered_seq, last_seq FROM conversations WHERE id = $1`, id).Scan(&delivered, &last))
	return delivered, last
}

func TestDeliveryWithoutWebhookSkips(t *testing.T) {
	t.Parallel()
	d := newDeliverySide(t, false)
	id := d.start(t, "msg_1", "Hello")
	d.deliver(t, d.acme.ID, id)
	delivered, _ := d.seqs(t, id)
	require.Equal(t, int64(2), delivered, "nothing to send them to: marked done")
	// A job for a conversation or Company that is gone completes too.
	d.deliver(t, d.acme.ID, "cnv_gone")
	d.deliver(t, 1<<40, id)
}

func TestDeliveryJobSendsThroughRunJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDeliverySide(t, true)
	secret, _, err := d.delivery.RotateSecret(ctx, d.acme.ID)
	require.NoError(t, err)
	id := d.start(t, "msg_1", "Hello")
	d.deliver(t, d.acme.ID, id)
	ds := d.hook.Wait(t, 2)
	require.Equal(t, []string{id + ".evt_1", id + ".evt_2"}, hookIDs(ds))
	require.NoError(t, verifyWebhook(secret, ds[1].Header, ds[1].Body, time.Now()))
	set, err := d.keys.PublicSet(ctx, d.acme.ID)
	require.NoError(t, err)
	checkVerified(t, set, d.urls.Identifier(d.acme), d.hook.URL, ds[1].Header.Get("Poppy-Verified"))

	// Events older than a day are not sent any more: no stale backlog.
	old := d.start(t, "msg_2", "Yesterday")
	_, err = d.pool.Exec(ctx, `UPDATE conversation_events SET created_at = created_at - interval '25 hours'
		WHERE conversation_id = $1`, old)
	require.NoError(t, err)
	d.deliver(t, d.acme.ID, old)
	require.Equal(t, 2, d.hook.Count())
	delivered, last := d.seqs(t, old)
	require.Equal(t, last, delivered)
}

// TestDeliveryRotationOverlap: after a rotation, deliveries carry a
// signature by each secret (Standard Webhooks' space-separated "v1,"
// signatures) until the old secret's day is over, then by the new one
// only; a further rotation drops the oldest at once.
func TestDeliveryRotationOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDeliverySide(t, true)
	// requireSigned checks that deliveries carry a "v1," signature by
	// each secret of good, and none by bad.
	requireSigned := func(ds []peers.WebhookDelivery, good []string, bad ...string) {
		t.Helper()
		for _, dl := range ds {
			sigs := strings.Fields(dl.Header.Get("webhook-signature"))
			require.Len(t, sigs, len(good))
			for _, sig := range sigs {
				require.True(t, strings.HasPrefix(sig, "v1,"), sig)
			}
			for _, s := range good {
				require.NoError(t, verifyWebhook(s, dl.Header, dl.Body, time.Now()))
			}
			for _, s := range bad {
				require.Error(t, verifyWebhook(s, dl.Header, dl.Body, time.Now()))
			}
		}
	}
	first, _, err := d.delivery.RotateSecret(ctx, d.acme.ID)
	require.NoError(t, err)
	second, _, err := d.delivery.RotateSecret(ctx, d.acme.ID)
	require.NoError(t, err)
	require.NotEqual(t, first, second)

	id := d.start(t, "msg_1", "Hello")
	d.deliver(t, d.acme.ID, id)
	requireSigned(d.hook.Wait(t, 2), []string{second, first})

	// The day of the old secret is over.
	_, err = d.pool.Exec(ctx, `UPDATE conversation_webhook_secrets SET previous_until = now() - interval '1 second'
		WHERE company_id = $1`, d.acme.ID)
	require.NoError(t, err)
	id = d.start(t, "msg_2", "Again")
	d.deliver(t, d.acme.ID, id)
	requireSigned(d.hook.Wait(t, 4)[2:], []string{second}, first)

	// A third secret: the second signs next to it, the first not at all.
	third, _, err := d.delivery.RotateSecret(ctx, d.acme.ID)
	require.NoError(t, err)
	id = d.start(t, "msg_3", "Once more")
	d.deliver(t, d.acme.ID, id)
	requireSigned(d.hook.Wait(t, 6)[4:], []string{third, second}, first)
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	cur, prev, other := []byte("current-secret-32-bytes-long...."), []byte("previous-secret-32-bytes-long..."), []byte("another")
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"conversation.event"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	header := func(ts string, secrets ...[]byte) http.Header {
		h := http.Header{}
		h.Set("webhook-id", "cnv_1.evt_1")
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", conversations.Signature(secrets, "cnv_1.evt_1", ts, body))
		return h
	}
	tol := conversations.WebhookTolerance
	require.NoError(t, conversations.VerifyWebhook(cur, header(ts, cur), body, now, tol))
	// During a rotation both secrets sign: either verifies.
	require.NoError(t, conversations.VerifyWebhook(cur, header(ts, cur, prev), body, now, tol))
	require.NoError(t, conversations.VerifyWebhook(prev, header(ts, cur, prev), body, now, tol))
	require.NoError(t, conversations.VerifyWebhook(cur, header(ts, cur), body, now.Add(tol), tol))

	for name, err := range map[string]error{
		"tampered body": conversations.VerifyWebhook(cur, header(ts, cur), []byte(`{"type":"other"}`), now, tol),
		"wrong secret":  conversations.VerifyWebhook(other, header(ts, cur, prev), body, now, tol),
		"stale":         conversations.VerifyWebhook(cur, header(ts, cur), body, now.Add(tol+time.Second), tol),
		"future":        conversations.VerifyWebhook(cur, header(ts, cur), body, now.Add(-tol-time.Second), tol),
		"no timestamp":  conversations.VerifyWebhook(cur, header("", cur), body, now, tol),
		"unsigned":      conversations.VerifyWebhook(cur, http.Header{"Webhook-Id": {"x"}, "Webhook-Timestamp": {ts}}, body, now, tol),
	} {
		require.ErrorIs(t, err, conversations.ErrWebhookSignature, name)
	}
	// The timestamp is signed: moving it breaks the signature.
	h := header(ts, cur)
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10))
	require.ErrorIs(t, conversations.VerifyWebhook(cur, h, body, now, tol), conversations.ErrWebhookSignature)

	key, err := conversations.DecodeWebhookSecret(conversations.WebhookSecretPrefix + base64.StdEncoding.EncodeToString(cur))
	require.NoError(t, err)
	require.Equal(t, cur, key)
	_, err = conversations.DecodeWebhookSecret(base64.StdEncoding.EncodeToString(cur))
	require.Error(t, err)
}
