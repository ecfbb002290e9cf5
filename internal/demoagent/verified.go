package demoagent

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// errNotThisDelivery: Poppy-Verified is valid but names another delivery.
var errNotThisDelivery = errors.New("demoagent: Poppy-Verified is not this delivery's")

// checkVerified checks the delivery's Poppy-Verified (see the package comment)
// and returns its claims. On failure it returns the status to answer: 401
// when the header is missing, repeated or not valid for this delivery,
// 503 when it could not be checked yet.
func (a *Agent) checkVerified(r *http.Request, d *delivery) (*verified.Claims, int, error) {
	values := r.Header.Values(verified.Header)
	if len(values) != 1 {
		return nil, http.StatusUnauthorized, fmt.Errorf("%w: %d headers", verified.ErrInvalid, len(values))
	}
	c, err := a.keys.Verify(r.Context(), values[0], a.o.Issuer, a.o.WebhookURL)
	switch {
	case errors.Is(err, verified.ErrInvalid):
		return nil, http.StatusUnauthorized, err
	case err != nil:
		return nil, http.StatusServiceUnavailable, err
	}
	event := d.Data.Event.ID
	if op := d.Data.Operation; d.Type == "conversation.operation" && op != nil {
		if c.OperationID != op.OperationID || c.Revision != op.Revision {
			return nil, http.StatusUnauthorized, errNotThisDelivery
		}
		event = op.EventID
	}
	if c.ConversationID != d.Data.Conversation.ID || c.EventID != event {
		return nil, http.StatusUnauthorized, errNotThisDelivery
	}
	return c, 0, nil
}
