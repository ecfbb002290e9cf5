package conversations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Defaults of the Company's conversation limits (tenant.Conversations),
// used where a setting is 0.
const (
	DefaultHandoffTimeout = 300 * time.Second
	DefaultIdleClose      = 7 * 24 * time.Hour
	DefaultRetentionDays  = 90
)

// jobBatch bounds the conversations one run changes per Company; the next
// run goes on.
const jobBatch = 500

// Sweeps are the conversations' periodic work: every minute, ending
// handoffs nobody took in the Company's handoff_timeout_seconds (spec
// 8.9) and closing conversations without activity for its
// idle_close_seconds (spec 8.12); every hour, deleting events older than
// its retention_days (spec 8.5: a cursor for them answers
// cursor_expired), then closed conversations with none left.
func Sweeps(store *Store, companies Companies) []jobs.Sweep {
	j := &sweeper{store: store, companies: companies}
	return []jobs.Sweep{
		{Name: "conversations_handoff_timeout", Every: time.Minute, Run: j.eachCompany(j.handoffTimeouts)},
		{Name: "conversations_idle_close", Every: time.Minute, Run: j.eachCompany(j.idleClose)},
		{Name: "conversations_prune", Every: time.Hour, Run: j.eachCompany(j.prune)},
	}
}

// sweeper does the conversations' sweeps.
type sweeper struct {
	store     *Store
	companies Companies
}

// perCompany is a sweep's work for one Company as of now; it returns how
// many conversations or events it ended, closed or deleted.
type perCompany func(ctx context.Context, co *companyLimits, now time.Time) (int64, error)

// eachCompany runs f for every Company; one that fails does not stop the
// others.
func (j *sweeper) eachCompany(f perCompany) func(ctx context.Context, now time.Time) (int64, error) {
	return func(ctx context.Context, now time.Time) (int64, error) {
		var errs []error
		var total int64
		after := ""
		for {
			page, err := j.companies.List(ctx, after, 100)
			if err != nil {
				return total, errors.Join(append(errs, err)...)
			}
			for _, co := range page {
				n, err := f(ctx, limitsOf(co), now)
				total += n
				if err != nil {
					errs = append(errs, fmt.Errorf("conversations: company %s: %w", co.Slug, err))
				}
			}
			if len(page) < 100 {
				return total, errors.Join(errs...)
			}
			after = page[len(page)-1].Slug
		}
	}
}

// companyLimits are one Company's limits, defaults applied.
type companyLimits struct {
	id             int64
	handoffTimeout time.Duration
	idleClose      time.Duration
	retention      time.Duration
	unavailable    string
}

func limitsOf(co *tenant.Company) *companyLimits {
	cv := co.Settings.Conversations
	l := &companyLimits{id: co.ID, handoffTimeout: DefaultHandoffTimeout, idleClose: DefaultIdleClose,
		retention: DefaultRetentionDays * 24 * time.Hour, unavailable: handoffUnavailableText(co)}
	if cv.HandoffTimeoutSeconds > 0 {
		l.handoffTimeout = time.Duration(cv.HandoffTimeoutSeconds) * time.Second
	}
	if cv.IdleCloseSeconds > 0 {
		l.idleClose = time.Duration(cv.IdleCloseSeconds) * time.Second
	}
	if cv.RetentionDays > 0 {
		l.retention = time.Duration(cv.RetentionDays) * 24 * time.Hour
	}
	return l
}
