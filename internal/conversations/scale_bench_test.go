package conversations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// The scaling benchmark (issue 26, docs/benchmarks.md): the same work on
// a small database and a large one, interleaved, reported as ratios.

// Statuses of the listed Company's newest conversations, the same in both
// databases; the rest of its conversations are closed.
var listedStatuses = []string{"working", "working", "working", "idle", "idle", "idle", "queued", "queued"}

// scaleSide is one database of the scaling benchmark: the listed Company
// with its conversations, other Companies with a history of their own,
// and a store on a pool of one connection, whose PostgreSQL backend's CPU
// time is thus the store's.
type scaleSide struct {
	pool    *pgxpool.Pool
	store   *conversations.Store
	sweeps  []jobs.Sweep
	pid     int32
	listed  int64
	newest  string // the listed Company's newest conversation
	matches map[string]int
}

// newScaleSide makes a database with the listed Company holding listed
// conversations and others Companies holding 10 conversations of 2
// events each, nothing due.
func newScaleSide(b *testing.B, listed, others int) *scaleSide {
	b.Helper()
	ctx := context.Background()
	admin := testdb.NewPool(b)
	s := &scaleSide{listed: testdb.InsertCompanies(b, admin, "listed", 1, `{}`)[0], matches: map[string]int{}}
	// The listed Company's conversations, newest first: listedStatuses,
	// then closed ones; 3 events each.
	_, err := admin.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
			created_at, last_activity_at, queued_at, closed_at, last_seq)
		SELECT $1, 'cnv_l' || g, 'https://agent.test/', 'usr_' || (g % 50),
			coalesce(($2::text[])[g], 'closed'), 'agent', now() - g * interval '1 second', now(),
			CASE WHEN ($2::text[])[g] = 'queued' THEN now() END, CASE WHEN g > cardinality($2) THEN now() END, 3
		FROM generate_series(1, $3::int) g`, s.listed, listedStatuses, listed)
	require.NoError(b, err)
	_, err = admin.Exec(ctx, `INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
		SELECT company_id, id, seq, 'message', '{"message": {"text": "Hello"}}', now()
		FROM conversations, generate_series(1, 3) seq WHERE company_id = $1`, s.listed)
	require.NoError(b, err)
	_, err = admin.Exec(ctx, `UPDATE conversations SET first_event_at = now() WHERE company_id = $1`, s.listed)
	require.NoError(b, err)
	s.newest = "cnv_l1"
	for i := range listed {
		st := "closed"
		if i < len(listedStatuses) {
			st = listedStatuses[i]
		}
		s.matches[st]++
	}
	s.matches[""] = listed
	if others > 0 {
		ids := testdb.InsertCompanies(b, admin, "idle", others, `{}`)
		_, err = admin.Exec(ctx, `INSERT INTO conversations (company_id, id, client_id, user_id, status, responder,
				created_at, last_activity_at, closed_at, last_seq, first_event_at)
			SELECT c, 'cnv_' || c || '_' || g, 'https://agent.test/', 'usr_1', CASE WHEN g % 2 = 0 THEN 'closed' ELSE 'idle' END,
				'agent', now() - g * interval '1 minute', now(), CASE WHEN g % 2 = 0 THEN now() END, 2, now()
			FROM unnest($1::bigint[]) c, generate_series(1, 10) g`, ids)
		require.NoError(b, err)
		_, err = admin.Exec(ctx, `INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
			SELECT company_id, id, seq, 'message', '{"message": {"text": "Hello"}}', now()
			FROM conversations, generate_series(1, 2) seq WHERE company_id <> $1`, s.listed)
		require.NoError(b, err)
	}
	_, err = admin.Exec(ctx, `VACUUM ANALYZE`)
	require.NoError(b, err)

	cfg := admin.Config().Copy()
	cfg.MaxConns, cfg.MinConns = 1, 1
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(s.pool.Close)
	require.NoError(b, s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&s.pid))
	s.store = conversations.NewStore(s.pool, conversations.StoreOptions{})
	s.sweeps = conversations.Sweeps(s.store)
	return s
}

// cost is what a side's share of the iterations used.
type cost struct{ wall, goCPU, pgCPU time.Duration }

// measure runs f, adding its wall, Go and PostgreSQL backend time to c.
func (s *scaleSide) measure(b *testing.B, c *cost, f func() error) {
	pg, cpu, start := backendTime(s.pid), processTime(), time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	c.wall += time.Since(start)
	c.goCPU += processTime() - cpu
	c.pgCPU += backendTime(s.pid) - pg
}

// compare runs op on the small side and the large side, alternately,
// and reports each side's costs per op and their ratios.
func compare(b *testing.B, small, large *scaleSide, op func(s *scaleSide) error) {
	var cs, cl cost
	for b.Loop() {
		small.measure(b, &cs, func() error { return op(small) })
		large.measure(b, &cl, func() error { return op(large) })
	}
	n := float64(b.N)
	b.ReportMetric(float64(cs.wall.Microseconds())/n, "small-µs/op")
	b.ReportMetric(float64(cl.wall.Microseconds())/n, "large-µs/op")
	b.ReportMetric(cl.wall.Seconds()/cs.wall.Seconds(), "wall-ratio")
	b.ReportMetric(cl.goCPU.Seconds()/cs.goCPU.Seconds(), "go-cpu-ratio")
	if cs.pgCPU > 0 && cl.pgCPU > 0 {
		b.ReportMetric(float64(cs.pgCPU.Microseconds())/n, "small-pg-cpu-µs/op")
		b.ReportMetric(float64(cl.pgCPU.Microseconds())/n, "large-pg-cpu-µs/op")
		b.ReportMetric(cl.pgCPU.Seconds()/cs.pgCPU.Seconds(), "pg-cpu-ratio")
	}
}

// BenchmarkScale compares one idle Company holding 10 conversations with
// 10,001 Companies, one of them holding 10,000 conversations and each of
// the others 10 (110,000 conversations, 230,000 events): a minute's
// background work (each conversations sweep once, with its count of what
// is left: the prune really runs once an hour) when nothing is due, the
// Company API's list with each filter, one full page each, and what a
// change of the retention costs the Company's conversations.
func BenchmarkScale(b *testing.B) {
	small := newScaleSide(b, 10, 0)
	large := newScaleSide(b, 10_000, 10_000)
	ctx := context.Background()

	b.Run("background", func(b *testing.B) {
		compare(b, small, large, func(s *scaleSide) error {
			for _, sw := range s.sweeps {
				now := time.Now()
				n, unfinished, err := jobs.RunSweep(ctx, sw, now)
				if err != nil || n != 0 || unfinished {
					return fmt.Errorf("%s: %d rows, unfinished %v: %w", sw.Name, n, unfinished, err)
				}
				if left, err := sw.Left(ctx, now); err != nil || left != 0 {
					return fmt.Errorf("%s: %d left: %w", sw.Name, left, err)
				}
			}
			return nil
		})
	})
	for _, status := range []string{"", "working", "idle", "queued", "closed"} {
		b.Run("list/status="+status, func(b *testing.B) {
			// A full page in both: as many as the small side has.
			limit := small.matches[status]
			compare(b, small, large, func(s *scaleSide) error {
				views, err := s.store.CompanyList(ctx, s.listed, conversations.ListFilter{Status: status, Limit: limit})
				if err == nil && len(views) != limit {
					err = fmt.Errorf("%d conversations, not %d", len(views), limit)
				}
				return err
			})
		})
	}
	// Linear by nature: every conversation of the Company gets its
	// deadlines again, in the transaction of the settings change.
	b.Run("retention-change", func(b *testing.B) {
		before := &tenant.Company{Settings: tenant.Settings{Conversations: tenant.Conversations{RetentionDays: 90}}}
		after := &tenant.Company{Settings: tenant.Settings{Conversations: tenant.Conversations{RetentionDays: 30}}}
		compare(b, small, large, func(s *scaleSide) error {
			after.ID = s.listed
			return db.InTx(ctx, s.pool, func(tx pgx.Tx) error { return s.store.SettingsChanged(ctx, tx, before, after) })
		})
	})
	b.Run("get", func(b *testing.B) {
		compare(b, small, large, func(s *scaleSide) error {
			v, err := s.store.CompanyGet(ctx, s.listed, s.newest)
			if err == nil && v == nil {
				err = fmt.Errorf("%s not found", s.newest)
			}
			return err
		})
	})
}
