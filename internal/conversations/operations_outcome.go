package conversations

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Outcome statuses, as the Company Agent's webhook receives them
// (docs/operations-extension.md, "Conversations").
const (
	// OutcomePerformed: performed now or before; response is the origin's
	// answer.
	OutcomePerformed = "performed"
	// OutcomeDeclined: the approval hook or the origin declined; nothing
	// was performed and the revision is never accepted again.
	OutcomeDeclined = "declined"
	// OutcomePerforming: the outcome is not known yet; another
	// conversation.operation follows once it is.
	OutcomePerforming = "performing"
	// OutcomeNewTerms: the origin proposed new terms when asked to
	// perform; nothing was performed.
	OutcomeNewTerms = "new_terms"
	// OutcomeStale: not this conversation's operation, or a revision
	// expired, replaced or declined (check 3); nothing was performed.
	OutcomeStale = "stale"
	// OutcomeUnapproved: the Session cannot approve the operation
	// (check 1): another Personal Agent, User or account.
	OutcomeUnapproved = "unapproved"
	// OutcomeNeedsAccount: a signed-out Session approved an account's
	// operation; nothing was performed.
	OutcomeNeedsAccount = "needs_account"
	// OutcomeNotAllowed: the proposal's request is not one the gateway
	// would forward for the approving Session (its API no longer declares
	// it, or the Session's sign-in and scopes do not allow it); nothing
	// was performed. Description says why.
	OutcomeNotAllowed = "not_allowed"
	// OutcomeFailedToCheck: the approval could not be checked or
	// performed (the approval hook not answering, the API removed, the
	// origin's answer unusable); nothing was performed and the Personal
	// Agent may approve again. Description says why.
	OutcomeFailedToCheck = "failed_to_check"
)

// OperationOutcome is what became of an approval a Personal Agent sent in
// a message.
type OperationOutcome struct {
	OperationID string `json:"operation_id"`
	Revision    string `json:"revision"`
	Status      string `json:"status"`
	// MessageID and EventID name the message that carried the approval.
	MessageID string                `json:"message_id"`
	EventID   string                `json:"event_id"`
	Response  *OutcomeResponse      `json:"response,omitempty"`
	Decline   *operations.Decline   `json:"decline,omitempty"`
	Operation *operations.Operation `json:"operation,omitempty"`
	// Description says why, for not_allowed and failed_to_check.
	Description string `json:"description,omitempty"`
}

// OutcomeResponse is the origin's answer to a performed operation: its
// body as JSON when it is JSON, else as text when it is text.
type OutcomeResponse struct {
	Status      int             `json:"status"`
	ContentType string          `json:"content_type,omitempty"`
	Location    string          `json:"location,omitempty"`
	Body        json.RawMessage `json:"body,omitempty"`
}

func newOutcome(a PerformArgs, status string) *OperationOutcome {
	return &OperationOutcome{OperationID: a.Approval.OperationID, Revision: a.Approval.Revision, Status: status,
		MessageID: a.MessageID, EventID: a.EventID}
}

// outcomeOf is the outcome the performer gave.
func outcomeOf(a PerformArgs, out *operations.Outcome) *OperationOutcome {
	oc := newOutcome(a, "")
	switch out.Kind {
	case operations.OutcomePerformed:
		oc.Status, oc.Response = OutcomePerformed, responseOf(out.Response)
	case operations.OutcomeDeclined:
		oc.Status, oc.Decline = OutcomeDeclined, out.Decline
	case operations.OutcomePerforming:
		oc.Status = OutcomePerforming
	case operations.OutcomeNewTerms:
		oc.Status, oc.Operation = OutcomeNewTerms, out.Operation
	case operations.OutcomeStale:
		oc.Status = OutcomeStale
	case operations.OutcomeNeedsAccount:
		oc.Status = OutcomeNeedsAccount
	default:
		oc.Status = OutcomeUnapproved
	}
	return oc
}

// maxOutcomeBody bounds the origin's answer a webhook delivery carries.
const maxOutcomeBody = 64 << 10

// responseOf is the origin's stored answer as the Company Agent gets it.
// A body that jsonb cannot hold (U+0000), that is neither JSON nor text,
// or that is larger than maxOutcomeBody is left out; status, Location and
// content type still say what was done.
func responseOf(r *operations.Response) *OutcomeResponse {
	if r == nil {
		return nil
	}
	out := &OutcomeResponse{Status: r.Status, ContentType: r.ContentType, Location: r.Location}
	body := bytes.TrimSpace(r.Body)
	isJSON := httpx.IsJSON(r.ContentType)
	switch {
	case len(body) == 0 || len(body) > maxOutcomeBody || bytes.Contains(body, []byte(`\u0000`)) || bytes.IndexByte(body, 0) >= 0:
	case isJSON && json.Valid(body):
		out.Body = body
	case utf8.Valid(body):
		out.Body, _ = json.Marshal(string(body))
	}
	return out
}

// recordOutcome keeps oc once per operation, revision and status in the
// conversation, and schedules its delivery in the same transaction; an
// outcome already told (a new message repeating a used approval) adds
// nothing, nor does performing after any other. A performing outcome is
// watched until it is known.
func (o *Operations) recordOutcome(ctx context.Context, a PerformArgs, oc *OperationOutcome) error {
	body, err := json.Marshal(oc)
	if err != nil {
		return err
	}
	return db.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		added, err := insertOutcome(ctx, tx, a, oc, body, o.now())
		if err != nil || !added {
			return err
		}
		if _, err := o.jobs.InsertTx(ctx, tx, OutcomeArgs{CompanyID: a.CompanyID, ConversationID: a.ConversationID,
			OperationID: oc.OperationID, Revision: oc.Revision, Status: oc.Status}, nil); err != nil {
			return err
		}
		if oc.Status != OutcomePerforming {
			return nil
		}
		_, err = o.jobs.InsertTx(ctx, tx, WatchArgs{a}, &river.InsertOpts{ScheduledAt: o.now().Add(watchFirst)})
		return err
	})
}

// OutcomeArgs is the job that delivers one recorded outcome to the Company
// Agent's webhook, after the message that carried the approval.
type OutcomeArgs struct {
	CompanyID      int64  `json:"company_id"`
	ConversationID string `json:"conversation_id"`
	OperationID    string `json:"operation_id"`
	Revision       string `json:"revision"`
	Status         string `json:"status"`
}

// Kind names the job in River.
func (OutcomeArgs) Kind() string { return "conversations_deliver_operation_outcome" }

// InsertOpts retries as event deliveries do.
func (OutcomeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: deliveryAttempts}
}

// outcomePayload is the body of an outcome's delivery.
type outcomePayload struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      outcomeData `json:"data"`
}

type outcomeData struct {
	Conversation *ConversationView `json:"conversation"`
	Operation    json.RawMessage   `json:"operation"`
}

// deliverOutcome posts an outcome as a conversation.operation delivery,
// signed as event deliveries are, once the approval's message was
// delivered. Without a webhook, or past maxDeliveryAge, it is not sent.
func (d *Delivery) deliverOutcome(ctx context.Context, a OutcomeArgs) error {
	stored, err := loadOutcome(ctx, d.opts.Pool, a)
	if err != nil || stored == nil || stored.deliveredAt != nil || d.opts.Now().Sub(stored.createdAt) > maxDeliveryAge {
		return err
	}
	body, facts, createdAt := stored.body, stored.facts, stored.createdAt
	co, err := d.company(ctx, a.CompanyID)
	if err != nil || co == nil || co.Settings.Conversations.AgentWebhook == "" {
		return err
	}
	url := co.Settings.Conversations.AgentWebhook
	view, err := loadView(ctx, d.opts.Pool, a.CompanyID, a.ConversationID)
	if err != nil || view == nil {
		return err
	}
	var oc OperationOutcome
	if err := json.Unmarshal(body, &oc); err != nil {
		return err
	}
	if seq, _ := parseEventID(oc.EventID); view.deliveredSeq < seq {
		// Wait for the message that carried the approval, ever longer, but
		// never late by more than a quarter of the wait: that message is
		// usually on its way.
		return river.JobSnooze(backoff(d.opts.Now().Sub(createdAt) / 4))
	}
	secrets, err := d.secrets(ctx, a.CompanyID)
	if err != nil {
		return err
	}
	if len(secrets) == 0 {
		return errNoSecret
	}
	payload, err := json.Marshal(outcomePayload{Type: "conversation.operation", Timestamp: createdAt.UTC(),
		Data: outcomeData{Conversation: view, Operation: body}})
	if err != nil {
		return err
	}
	if facts == nil {
		facts = &verified.Facts{ClientID: view.Owner.ClientID, UserID: view.Owner.UserID}
	}
	msgID := view.ID + ".op." + oc.OperationID + "." + oc.Revision + "." + oc.Status
	if err := d.send(ctx, co, url, secrets, msgID, payload, verified.Claims{Facts: *facts, ConversationID: view.ID,
		EventID: oc.EventID, OperationID: oc.OperationID, Revision: oc.Revision}); err != nil {
		return err
	}
	return markOutcomeDelivered(ctx, d.opts.Pool, a, d.opts.Now())
}
