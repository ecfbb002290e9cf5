package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// check checks the invariants on what the load recorded so far.
func (l *chaosLoad) check(t *testing.T, round int) {
	t.Helper()
	l.mu.Lock()
	ops, reads, unexpected := slices.Clone(l.ops), slices.Clone(l.reads), slices.Clone(l.unexpected)
	l.mu.Unlock()
	for _, u := range unexpected {
		t.Errorf("round %d: an answer no fault explains: %s", round, u)
	}
	l.checkOperations(t, ops)
	l.checkMessages(t)
	l.checkReaders(t)
	l.checkReads(t, reads)
}

// query runs q on the database, again while PostgreSQL is still coming
// back from a restart.
func (e *chaosEnv) query(t *testing.T, what string, q func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := q(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// storedOperation is an operation as the database holds it.
type storedOperation struct {
	status, actionKey, body string
}

// checkOperations: no exchange was performed twice; every operation got a
// success answer, was performed exactly once with that answer and is
// stored as performed with it; every exchange the origin performed is
// stored as performed.
func (l *chaosLoad) checkOperations(t *testing.T, ops []*chaosOp) {
	t.Helper()
	stored := map[string]storedOperation{} // by operation ID
	l.e.query(t, "read the operations", func(ctx context.Context) error {
		rows, err := l.e.pool.Query(ctx, `SELECT id, status, action_key, coalesce(response->>'body', '') FROM operations`)
		if err != nil {
			return err
		}
		clear(stored)
		var id string
		var op storedOperation
		_, err = pgx.ForEachRow(rows, []any{&id, &op.status, &op.actionKey, &op.body}, func() error {
			stored[id] = op
			return nil
		})
		return err
	})
	// A settle job that the killed replica had fetched stays running until
	// River rescues it, an hour later (docs/operations-extension.md,
	// "Settling"): when it had not concluded its operation, that stays
	// performing meanwhile, which is safe, and not something a round can
	// wait for. (Jobs that had concluded theirs but whose completion River
	// had not written yet stay running too, harmlessly.)
	orphaned := map[string]bool{}
	l.e.query(t, "read the settle jobs", func(ctx context.Context) error {
		rows, err := l.e.pool.Query(ctx, `SELECT o.id FROM river_job j JOIN operations o ON o.id = j.args->>'operation_id'
			WHERE j.kind = 'gateway_settle_operation' AND j.state = 'running'
			AND j.attempted_at < now() - interval '30 seconds' AND o.status = 'performing'`)
		if err != nil {
			return err
		}
		clear(orphaned)
		var id string
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error { orphaned[id] = true; return nil })
		return err
	})
	for id := range orphaned {
		t.Logf("operation %s (order %s) waits for River to rescue its settle job, left running by the killed replica",
			id, strings.TrimPrefix(stored[id].actionKey, "exchange "))
	}
	performedOrders := map[string]bool{}
	for id, op := range stored {
		order := strings.TrimPrefix(op.actionKey, "exchange ")
		switch op.status {
		case "performed":
			performedOrders[order] = true
			if n := len(l.e.origin.exchanges(order)); n != 1 {
				t.Errorf("operation %s (order %s) is stored as performed; the origin performed it %d times", id, order, n)
			}
		case "performing":
			if !orphaned[id] {
				t.Errorf("operation %s (order %s) is still performing after the round settled", id, order)
			}
		case "unknown":
			t.Errorf("operation %s (order %s) is unknown: its settle job gave up", id, order)
		}
	}
	for _, op := range ops {
		performed := l.e.origin.exchanges(op.order)
		switch {
		case len(performed) > 1:
			t.Errorf("order %s: the exchange was performed %d times: %v", op.order, len(performed), performed)
		case !op.answered && orphaned[op.id]:
		case !op.answered:
			t.Errorf("order %s: operation %q got no success answer within %s (stored: %+v)", op.order, op.id,
				chaosSettleWithin, stored[op.id])
		case len(performed) == 0:
			t.Errorf("order %s: answered with success (%s) but never performed", op.order, op.answer)
		default:
			for key, answer := range performed {
				if key != op.id+"."+op.revision {
					t.Errorf("order %s: performed with Idempotency-Key %s, approved %s.%s", op.order, key, op.id, op.revision)
				}
				if answer != op.answer {
					t.Errorf("order %s: the origin answered %s, the Personal Agent got %s", op.order, answer, op.answer)
				}
				body, _ := base64.StdEncoding.DecodeString(stored[op.id].body)
				if s := stored[op.id]; s.status != "performed" || string(body) != answer {
					t.Errorf("order %s: stored as %s with %q, the origin answered %s", op.order, s.status, body, answer)
				}
			}
		}
	}
	for id := range orphaned {
		// Stored as performed once its settle job runs again.
		performedOrders[strings.TrimPrefix(stored[id].actionKey, "exchange ")] = true
	}
	for order := range l.e.origin.performedOrders() {
		if !performedOrders[order] {
			t.Errorf("order %s: the origin performed the exchange; no operation is stored as performed", order)
		}
	}
}

// checkMessages: every accepted message is stored exactly once.
func (l *chaosLoad) checkMessages(t *testing.T) {
	t.Helper()
	for _, c := range l.convs {
		counts := map[string]int{}
		l.e.query(t, "read the messages", func(ctx context.Context) error {
			rows, err := l.e.pool.Query(ctx, `SELECT body->'message'->>'id', count(*) FROM conversation_events
				WHERE conversation_id = $1 AND type = 'message' GROUP BY 1`, c.id)
			if err != nil {
				return err
			}
			clear(counts)
			var id string
			var n int
			_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { counts[id] = n; return nil })
			return err
		})
		c.mu.Lock()
		accepted := slices.Clone(c.accepted)
		c.mu.Unlock()
		for _, id := range accepted {
			if counts[id] != 1 {
				t.Errorf("conversation %s: message %s was accepted and is stored %d times", c.id, id, counts[id])
			}
		}
		for id, n := range counts {
			if n > 1 {
				t.Errorf("conversation %s: message %s is stored %d times", c.id, id, n)
			}
		}
	}
}

// checkReaders: once they caught up, each reader received every event of
// its conversation exactly once, in order.
func (l *chaosLoad) checkReaders(t *testing.T) {
	t.Helper()
	for _, c := range l.convs {
		var events []string
		l.e.query(t, "read the events", func(ctx context.Context) error {
			rows, err := l.e.pool.Query(ctx, `SELECT 'evt_' || seq FROM conversation_events
				WHERE conversation_id = $1 ORDER BY seq`, c.id)
			if err != nil {
				return err
			}
			events, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		for _, reader := range chaosReaders {
			deadline := time.Now().Add(20 * time.Second)
			got := c.received(reader)
			for len(got) < len(events) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				got = c.received(reader)
			}
			if !slices.Equal(got, events) {
				t.Errorf("conversation %s: the %s reader received %s; the conversation's events are %s",
					c.id, reader, firstDifference(got, events), summary(events))
			}
		}
	}
}

// firstDifference describes how got differs from want.
func firstDifference(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d events, the %dth %s where %s was due (before it: %s)", len(got), i+1, got[i], want[i],
				strings.Join(got[max(0, i-3):i], " "))
		}
	}
	return fmt.Sprintf("%d events (%s), %d stored", len(got), summary(got), len(want))
}

// summary names the first and last few of ids.
func summary(ids []string) string {
	if len(ids) <= 6 {
		return strings.Join(ids, " ")
	}
	return strings.Join(ids[:3], " ") + " ... " + strings.Join(ids[len(ids)-3:], " ")
}

// checkReads: every signed-in call answered with success reached the
// origin, in a Session the database holds and has not ended.
func (l *chaosLoad) checkReads(t *testing.T, reads []chaosRead) {
	t.Helper()
	live := map[string]bool{}
	l.e.query(t, "read the Sessions", func(ctx context.Context) error {
		rows, err := l.e.pool.Query(ctx, `SELECT sid FROM sessions WHERE ended_at IS NULL`)
		if err != nil {
			return err
		}
		clear(live)
		var sid string
		_, err = pgx.ForEachRow(rows, []any{&sid}, func() error { live[sid] = true; return nil })
		return err
	})
	for _, r := range reads {
		if l.e.origin.readsOf(r.path) == 0 {
			t.Errorf("signed-in call %s answered with success; the origin never got it", r.path)
		}
		if !live[r.sid] {
			t.Errorf("signed-in call %s answered with success; its Session %s is not in the database", r.path, r.sid)
		}
	}
}
