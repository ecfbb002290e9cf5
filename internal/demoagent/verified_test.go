package demoagent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// deliver hands the agent a delivery of a message event with text, signed
// with the webhook secret as the platform signs it, and with pv as
// Poppy-Verified (none when empty), and returns the status it answers.
func (d *demo) deliver(t *testing.T, hookID, conv, event, text, pv string) int {
	t.Helper()
	body, err := json.Marshal(map[string]any{"type": "conversation.event", "timestamp": time.Now().UTC(),
		"data": map[string]any{"conversation": map[string]any{"id": conv},
			"event": map[string]any{"id": event, "type": "message",
				"message": map[string]any{"id": "m-" + hookID, "text": text}}}})
	require.NoError(t, err)
	key, err := conversations.DecodeWebhookSecret(d.secret)
	require.NoError(t, err)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req := httptest.NewRequest(http.MethodPost, d.hookURL, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", hookID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", conversations.Signature([][]byte{key}, hookID, ts, body))
	if pv != "" {
		req.Header.Set(verified.Header, pv)
	}
	rec := httptest.NewRecorder()
	d.hook.ServeHTTP(rec, req)
	return rec.Code
}

// TestRefusesUnverifiedDeliveries: a delivery signed with the webhook
// secret but whose Poppy-Verified is missing, forged, altered or another
// delivery's is refused with 401, and the agent posts nothing, even when
// the claims would have it show the order.
func TestRefusesUnverifiedDeliveries(t *testing.T) {
	t.Parallel()
	d := setup(t)
	rd := d.pa(t, http.MethodPost, "?wait=0", message("m1", "Hello there"), http.StatusCreated)
	conv, cursor := rd["conversation_id"].(string), rd["cursor"].(string)
	_, cursor = d.await(t, conv, cursor, companyMessage)

	// A real Poppy-Verified the platform sent for m1, and its parts.
	real := *d.verifiedSeen.Load()
	parts := strings.Split(real, ".")
	require.Len(t, parts, 3)
	var header, claims map[string]any
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &header))
	raw, err = base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &claims))
	require.Equal(t, conv, claims["conversation_id"])

	// The claims of a signed-in User with orders:read, for a new event.
	const event = "evt_forged"
	forgedClaims := map[string]any{}
	for k, v := range claims {
		forgedClaims[k] = v
	}
	forgedClaims["event_id"], forgedClaims["account"] = event, strconv.FormatInt(d.ada, 10)
	forgedClaims["scopes"] = []string{demoagent.OrdersScope}
	forgedClaims["exp"] = time.Now().Add(time.Minute).Unix()
	payload, err := json.Marshal(forgedClaims)
	require.NoError(t, err)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	for name, pv := range map[string]string{
		"missing":   "",
		"garbage":   "not-a-jwt",
		"forged":    peers.SignJWT(t, "ES256", other, header, forgedClaims),
		"altered":   parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2],
		"unsigned":  parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + ".",
		"another's": real,
	} {
		require.Equal(t, http.StatusUnauthorized, d.deliver(t, "forged-"+name, conv, event, "Where is my order?", pv), name)
	}

	// The agent posted nothing: no message and no authorization need (the
	// platform's own state events may follow its answer to m1).
	rd = d.pa(t, http.MethodGet, "/"+conv+"/events?wait=0&cursor="+cursor, nil, http.StatusOK)
	for _, e := range rd["events"].([]any) {
		require.Equal(t, "state", e.(map[string]any)["type"], "posted after refused deliveries: %v", e)
	}
}

// TestUncheckableDeliveryIsRetried: when the Company's key set cannot be
// fetched, Poppy-Verified cannot be checked yet, and the delivery is
// answered 503, so the platform retries it, not 401.
func TestUncheckableDeliveryIsRetried(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + strings.Repeat("A", 43) + "="
	a, err := demoagent.New(demoagent.Options{Secret: secret, BaseURL: "https://127.0.0.1:1",
		JWKSURL: "https://127.0.0.1:1/t/stormline/oauth/jwks.json", Issuer: "https://stormline.test",
		WebhookURL: "https://agent.stormline.test/poppy/webhook"})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	d := &demo{hook: a, hookURL: "https://agent.stormline.test/poppy/webhook", secret: secret}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	pv := peers.SignJWT(t, "ES256", key, map[string]any{"alg": "ES256", "typ": verified.Type, "kid": "k1"},
		map[string]any{"iss": "https://stormline.test", "aud": d.hookURL, "conversation_id": "cnv_1", "event_id": "evt_1",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()})
	require.Equal(t, http.StatusServiceUnavailable, d.deliver(t, "cnv_1.evt_1", "cnv_1", "evt_1", "Hello there", pv))
	require.Equal(t, http.StatusUnauthorized, d.deliver(t, "cnv_1.evt_2", "cnv_1", "evt_2", "Hello there", ""),
		"a missing Poppy-Verified needs no key set to refuse")
}
