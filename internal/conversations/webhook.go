package conversations

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The Company Agent's webhook (DESIGN.md, origin contract): every event
// the Personal Agent side or the platform adds to a conversation is POSTed
// to conversations.agent_webhook, in order, one request per event, signed
// the Standard Webhooks way with the Company's webhook secret and carrying
// Poppy-Verified. River delivers it and retries with backoff. See
// docs/company-agent.md for what the Company receives and how it checks it.

// Webhook settings.
const (
	// WebhookSecretPrefix starts a webhook secret as the Company sees it,
	// then the secret's 32 bytes in standard base64 (Standard Webhooks).
	WebhookSecretPrefix = "whsec_"
	// previousSecretGrace is how long a replaced secret keeps signing
	// next to the new one.
	previousSecretGrace = 24 * time.Hour
	// maxDeliveryAge: older events are not delivered any more, so a
	// webhook that comes back, or is set, gets no stale backlog.
	maxDeliveryAge = 24 * time.Hour
	// deliveryAttempts and River's backoff (n⁴ seconds after the nth
	// failure) retry a failing webhook for about 17 hours.
	deliveryAttempts = 13
	deliverBatch     = 20
	secretLen        = 32
)

// Companies finds Companies for background work (tenant.Store).
type Companies interface {
	Get(ctx context.Context, slug string) (*tenant.Company, error)
}

// DeliveryOptions configure a Delivery.
type DeliveryOptions struct {
	Pool *pgxpool.Pool
	// Jobs inserts the delivery jobs, and those of operations
	// (NewOperations): the platform's River client.
	Jobs      Inserter
	Companies Companies
	// Keys sign Poppy-Verified.
	Keys verified.Signer
	// Sealer seals the webhook secrets at rest (sealing.Sealer).
	Sealer Sealer
	URLs   tenant.URLs
	// Client posts to webhooks; its options are the platform's fetch
	// options (AllowPrivate only in development and tests).
	Client *safehttp.Client
	Logger *slog.Logger
	// Metrics counts the deliveries; nil counts them unregistered.
	Metrics *Metrics
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Delivery delivers conversation events to Company Agent webhooks. It is
// the Store's Enqueuer and the worker of DeliverArgs (AddWorkers).
type Delivery struct {
	opts DeliveryOptions
}

// Sealer seals and opens a Company's secrets, bound to their column and
// row (sealing.Sealer).
type Sealer interface {
	Seal(ctx context.Context, companyID int64, purpose sealing.Purpose, row string, plaintext []byte) ([]byte, error)
	Open(ctx context.Context, companyID int64, purpose sealing.Purpose, row string, sealed []byte) ([]byte, error)
}

// Inserter inserts River jobs in a transaction.
type Inserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// NewDelivery returns a Delivery.
func NewDelivery(opts DeliveryOptions) *Delivery {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Metrics = opts.Metrics.orDefault()
	return &Delivery{opts: opts}
}

// AddWorkers registers the delivery job's worker.
func (d *Delivery) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &deliverWorker{d: d})
}

// DeliverArgs is the job that delivers a conversation's new events. One
// waits or runs per conversation at a time, which keeps them in order.
type DeliverArgs struct {
	CompanyID      int64  `json:"company_id"`
	ConversationID string `json:"conversation_id"`
}

// Kind names the job in River.
func (DeliverArgs) Kind() string { return "conversations_deliver" }

// InsertOpts makes the job unique per conversation while it waits, runs or
// waits to retry: an event added meanwhile is delivered by that job.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: deliveryAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// EnqueueConversation schedules delivery of c's new events, in tx, with
// its parent's when c has a parent with undelivered events too (a Direct
// Conversation opening or closing adds an event to its parent).
func (d *Delivery) EnqueueConversation(ctx context.Context, tx pgx.Tx, c *Conversation) error {
	return d.enqueue(ctx, tx, c.CompanyID, c.ID, c.ParentID != "")
}

// skips says that the request's Company is at hand and has no webhook:
// there is nothing to deliver (Personal Agent messages are the hot path).
// Events are then left undelivered, and a webhook set later gets at most
// maxDeliveryAge of them. Platform jobs have no Company in ctx and
// enqueue as before.
func (d *Delivery) skips(ctx context.Context, companyID int64) bool {
	co := tenant.FromContext(ctx)
	return co != nil && co.ID == companyID && co.Settings.Conversations.AgentWebhook == ""
}

func (d *Delivery) enqueue(ctx context.Context, tx pgx.Tx, companyID int64, conversationID string, parent bool) error {
	if d.skips(ctx, companyID) {
		return nil
	}
	if _, err := d.opts.Jobs.InsertTx(ctx, tx, DeliverArgs{CompanyID: companyID, ConversationID: conversationID}, nil); err != nil {
		return fmt.Errorf("conversations: enqueue delivery: %w", err)
	}
	if !parent {
		return nil
	}
	parentID, err := undeliveredParent(ctx, tx, companyID, conversationID)
	if err != nil || parentID == "" {
		return err
	}
	if _, err := d.opts.Jobs.InsertTx(ctx, tx, DeliverArgs{CompanyID: companyID, ConversationID: parentID}, nil); err != nil {
		return fmt.Errorf("conversations: enqueue delivery: %w", err)
	}
	return nil
}

type deliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	d *Delivery
}

// Timeout leaves room for a batch of slow webhooks; each delivered event
// is recorded at once, so a timeout loses nothing.
func (w *deliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration { return 5 * time.Minute }

func (w *deliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	return w.d.work(ctx, job)
}

// errNoSecret: the Company has a webhook but has not made its secret yet;
// River retries, so events wait for it.
var errNoSecret = errors.New("conversations: the Company has an agent webhook but no webhook secret yet " +
	"(POST /company/v1/conversations/webhook-secret)")

// pendingEvent is an event to deliver.
type pendingEvent struct {
	Event
	verified *verified.Facts
}

func (d *Delivery) work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	a := job.Args
	co, err := d.company(ctx, a.CompanyID)
	if err != nil || co == nil {
		return err
	}
	url := co.Settings.Conversations.AgentWebhook
	for {
		view, events, err := d.pending(ctx, a.CompanyID, a.ConversationID, url != "")
		if err != nil || view == nil {
			return err
		}
		if len(events) == 0 {
			done, err := d.finish(ctx, job, url != "")
			if err != nil || done {
				return err
			}
			continue
		}
		secrets, err := d.secrets(ctx, a.CompanyID)
		if err != nil {
			return err
		}
		if len(secrets) == 0 {
			return errNoSecret
		}
		for _, e := range events {
			if err := d.post(ctx, co, url, secrets, view, e); err != nil {
				return fmt.Errorf("conversations: deliver %s of %s to the agent webhook of %s: %w",
					eventID(e.Seq), view.ID, co.Slug, err)
			}
			if err := markDelivered(ctx, d.opts.Pool, a.CompanyID, view.ID, e.Seq); err != nil {
				return err
			}
		}
	}
}

// company returns the Company with id, or nil when it is gone.
func (d *Delivery) company(ctx context.Context, id int64) (*tenant.Company, error) {
	slug, err := companySlug(ctx, d.opts.Pool, id)
	if err != nil || slug == "" {
		return nil, err
	}
	co, err := d.opts.Companies.Get(ctx, slug)
	if errors.Is(err, tenant.ErrNotFound) {
		return nil, nil
	}
	return co, err
}

// pending returns the conversation and its next events to deliver: not
// the Company's own, and not older than maxDeliveryAge. Without a webhook
// there are none. A deleted conversation is nil.
func (d *Delivery) pending(ctx context.Context, companyID int64, id string, webhook bool) (*ConversationView, []pendingEvent, error) {
	view, err := loadView(ctx, d.opts.Pool, companyID, id)
	if err != nil || view == nil || !webhook {
		return view, nil, err
	}
	events, err := pendingEvents(ctx, d.opts.Pool, companyID, id, view.deliveredSeq, d.opts.Now().Add(-maxDeliveryAge), deliverBatch)
	return view, events, err
}

// finish completes the job once nothing is left to deliver, in one
// transaction with the conversation locked: an event added before sees
// the check find it, and one added after finds the job completed and
// inserts another. It reports false when events arrived meanwhile.
func (d *Delivery) finish(ctx context.Context, job *river.Job[DeliverArgs], webhook bool) (bool, error) {
	a := job.Args
	done := false
	err := db.InTx(ctx, d.opts.Pool, func(tx pgx.Tx) error {
		delivered, err := lockDelivered(ctx, tx, a.CompanyID, a.ConversationID)
		if db.IsNotFound(err) {
			done = true
			return nil
		}
		if err != nil {
			return err
		}
		if webhook {
			more, err := hasPending(ctx, tx, a.CompanyID, a.ConversationID, delivered, d.opts.Now().Add(-maxDeliveryAge))
			if err != nil || more {
				return err
			}
		}
		if err := markAllDelivered(ctx, tx, a.CompanyID, a.ConversationID); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		done = true
		return nil
	})
	return done, err
}

// webhookPayload is the body of a delivery (Standard Webhooks' shape).
type webhookPayload struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      webhookData `json:"data"`
}

type webhookData struct {
	// Conversation is the conversation's state now, which may be later
	// than the event's.
	Conversation *ConversationView `json:"conversation"`
	Event        Event             `json:"event"`
}

// post delivers one event.
func (d *Delivery) post(ctx context.Context, co *tenant.Company, url string, secrets [][]byte, view *ConversationView, e pendingEvent) error {
	body, err := json.Marshal(webhookPayload{Type: "conversation.event", Timestamp: e.CreatedAt.UTC(),
		Data: webhookData{Conversation: view, Event: e.Event}})
	if err != nil {
		return err
	}
	// Facts stored with the event, or else only what the conversation
	// itself proves: its owner, with no Session, account or scopes.
	v := e.verified
	if v == nil {
		v = &verified.Facts{ClientID: view.Owner.ClientID, UserID: view.Owner.UserID}
	}
	return d.send(ctx, co, url, secrets, view.ID+"."+eventID(e.Seq), body,
		verified.Claims{Facts: *v, ConversationID: view.ID, EventID: eventID(e.Seq)})
}

// send posts one signed delivery, msgID its webhook-id, with claims in
// Poppy-Verified, bound to the Company and the webhook.
func (d *Delivery) send(ctx context.Context, co *tenant.Company, url string, secrets [][]byte, msgID string, body []byte,
	claims verified.Claims) error {
	now := d.opts.Now()
	claims.Issuer, claims.Audience = d.opts.URLs.Identifier(co), url
	jwt, err := verified.Sign(ctx, d.opts.Keys, co.ID, claims, now)
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("webhook-id", msgID)
	header.Set("webhook-timestamp", ts)
	header.Set("webhook-signature", Signature(secrets, msgID, ts, body))
	header.Set(verified.Header, jwt)
	_, err = d.opts.Client.Post(ctx, safehttp.PostRequest{URL: url, Header: header, Body: body})
	d.opts.Metrics.delivered(err)
	return err
}

// Signature is the webhook-signature header of Standard Webhooks: for
// each secret, "v1," and the base64 HMAC-SHA256 of "{id}.{timestamp}.{body}",
// separated by spaces.
func Signature(secrets [][]byte, msgID, timestamp string, body []byte) string {
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		sigs[i] = webhookSignature(s, msgID, timestamp, body)
	}
	return strings.Join(sigs, " ")
}

// webhookSignature is one secret's signature in webhook-signature.
func webhookSignature(secret []byte, msgID, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(msgID + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// WebhookTolerance is how far from now a delivery's webhook-timestamp may
// be (Standard Webhooks' recommendation, docs/company-agent.md section 3).
const WebhookTolerance = 5 * time.Minute

// ErrWebhookSignature: a delivery is not signed by the secret, or its
// timestamp is missing or too far from now.
var ErrWebhookSignature = errors.New("conversations: webhook signature does not verify")

// DecodeWebhookSecret returns the bytes of a webhook secret as the Company
// sees it ("whsec_" and base64).
func DecodeWebhookSecret(s string) ([]byte, error) {
	raw, ok := strings.CutPrefix(s, WebhookSecretPrefix)
	if !ok {
		return nil, errors.New("conversations: a webhook secret starts with " + WebhookSecretPrefix)
	}
	return base64.StdEncoding.DecodeString(raw)
}

// VerifyWebhook checks a delivery as a Company Agent does (Standard
// Webhooks, docs/company-agent.md section 3): one of webhook-signature's
// signatures is secret's over id, timestamp and body, and the timestamp is
// within tolerance of now. During a rotation a delivery carries a
// signature per secret, so either secret verifies it.
func VerifyWebhook(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return ErrWebhookSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp too far from now", ErrWebhookSignature)
	}
	want := []byte(webhookSignature(secret, id, ts, body))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return ErrWebhookSignature
}

// secrets returns the Company's webhook secrets that sign now: the current
// one, and the one it replaced during its grace period.
func (d *Delivery) secrets(ctx context.Context, companyID int64) ([][]byte, error) {
	st, err := webhookSecrets(ctx, d.opts.Pool, companyID, false)
	if err != nil {
		return nil, err
	}
	cur, err := d.unseal(ctx, companyID, sealing.WebhookSecret, st.cur, st.curSealed)
	if err != nil || cur == nil {
		return nil, err
	}
	out := [][]byte{cur}
	if st.until != nil && d.opts.Now().Before(*st.until) {
		prev, err := d.unseal(ctx, companyID, sealing.PreviousWebhookSecret, st.prev, st.prevSealed)
		if err != nil {
			return nil, err
		}
		if prev != nil {
			out = append(out, prev)
		}
	}
	return out, nil
}

// unseal returns a stored secret: opened when sealed, else as stored
// before migration 00025 until sealing.SealPlaintext seals it; nil for
// none.
func (d *Delivery) unseal(ctx context.Context, companyID int64, purpose sealing.Purpose, plain, sealed []byte) ([]byte, error) {
	if sealed == nil {
		return plain, nil
	}
	return d.opts.Sealer.Open(ctx, companyID, purpose, "", sealed)
}

// RotateSecret makes the Company a new webhook secret and returns it, as
// "whsec_" and its base64, with when it was made. The secret it replaces
// keeps signing next to it for a day; one replaced before stops at once.
func (d *Delivery) RotateSecret(ctx context.Context, companyID int64) (string, time.Time, error) {
	secret := make([]byte, secretLen)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	sealed, err := d.opts.Sealer.Seal(ctx, companyID, sealing.WebhookSecret, "", secret)
	if err != nil {
		return "", time.Time{}, err
	}
	now := d.opts.Now()
	err = db.InTx(ctx, d.opts.Pool, func(tx pgx.Tx) error {
		for {
			st, err := webhookSecrets(ctx, tx, companyID, true)
			if err != nil {
				return err
			}
			if st.cur == nil && st.curSealed == nil {
				// The first; a racing first one makes this one a rotation.
				if stored, err := insertWebhookSecret(ctx, tx, companyID, sealed, now); err != nil || stored {
					return err
				}
				continue
			}
			prev, err := d.unseal(ctx, companyID, sealing.WebhookSecret, st.cur, st.curSealed)
			if err != nil {
				return err
			}
			// Sealed again for its new column.
			prevSealed, err := d.opts.Sealer.Seal(ctx, companyID, sealing.PreviousWebhookSecret, "", prev)
			if err != nil {
				return err
			}
			return replaceWebhookSecret(ctx, tx, companyID, sealed, prevSealed, now, now.Add(previousSecretGrace))
		}
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(secret), now, nil
}
