package conversations_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/poppyhost/poppyhost/internal/conversations"
)

// A Company Agent checks each delivery to its webhook with the secret it
// was given ("whsec_…") before it reads the body.
func ExampleVerifyWebhook() {
	secret, err := conversations.DecodeWebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		fmt.Println(err)
		return
	}

	// A delivery as the platform signs it.
	sent := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"type":"conversation.event","data":{}}`)
	h := http.Header{}
	h.Set("webhook-id", "cnv_1.evt_1")
	h.Set("webhook-timestamp", fmt.Sprint(sent.Unix()))
	h.Set("webhook-signature", conversations.Signature([][]byte{secret}, "cnv_1.evt_1", fmt.Sprint(sent.Unix()), body))
	fmt.Println(h.Get("webhook-signature"))

	// The agent received it two seconds later.
	now := sent.Add(2 * time.Second)
	fmt.Println(conversations.VerifyWebhook(secret, h, body, now, conversations.WebhookTolerance))
	// A changed body, or the same delivery replayed an hour later, is refused.
	fmt.Println(conversations.VerifyWebhook(secret, h, []byte(`{"type":"forged"}`), now, conversations.WebhookTolerance))
	fmt.Println(conversations.VerifyWebhook(secret, h, body, sent.Add(time.Hour), conversations.WebhookTolerance))
	// Output:
	// v1,0REbmOOSHbZvES4wlmm9twg2Ber6IfujqU5m4P397II=
	// <nil>
	// conversations: webhook signature does not verify
	// conversations: webhook signature does not verify: timestamp too far from now
}
