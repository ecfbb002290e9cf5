package db_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// sends records what a pool sends: each query on its own, and each batch
// with its statements, a round trip each.
type sends struct {
	mu   sync.Mutex
	sent [][]string
}

func (s *sends) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add([]string{d.SQL})
	return ctx
}

func (s *sends) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *sends) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	s.add(sqls)
	return ctx
}

func (s *sends) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *sends) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (s *sends) add(sqls []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, sqls)
}

func (s *sends) take() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	return out
}

// TestInTxWith: BEGIN goes in one round trip with the transaction's
// first statements; the transaction commits when fn succeeds, and rolls
// back, without running fn, when a first statement or its callback
// fails, and when fn fails or panics.
func TestInTxWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewDatabase(t))
	require.NoError(t, err)
	trace := &sends{}
	cfg.ConnConfig.Tracer = trace
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE kept (n int PRIMARY KEY)`)
	require.NoError(t, err)
	trace.take()
	count := func() (n int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n))
		return n
	}
	insert := func(n int) func(b *pgx.Batch) {
		return func(b *pgx.Batch) { b.Queue(`INSERT INTO kept VALUES ($1)`, n) }
	}

	var seen int
	require.NoError(t, db.InTxWith(ctx, pool, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO kept VALUES (1)`)
		b.Queue(`SELECT count(*) FROM kept`).QueryRow(func(row pgx.Row) error { return row.Scan(&seen) })
	}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO kept VALUES (2)`)
		return err
	}))
	require.Equal(t, 1, seen, "the callbacks ran in the transaction before fn")
	sent := trace.take()
	require.Len(t, sent, 3, "%q", sent)
	require.Equal(t, "begin", strings.ToLower(sent[0][0]), "%q", sent)
	require.Len(t, sent[0], 3, "BEGIN and the first statements in one batch: %q", sent)
	require.Equal(t, []string{"commit"}, sent[2])
	require.Equal(t, 2, count())

	called := false
	refused := errors.New("refused")
	for name, first := range map[string]func(b *pgx.Batch){
		"statement fails": insert(1),
		"callback fails": func(b *pgx.Batch) {
			b.Queue(`INSERT INTO kept VALUES (3)`).Exec(func(pgconn.CommandTag) error { return refused })
		},
	} {
		err := db.InTxWith(ctx, pool, first, func(pgx.Tx) error { called = true; return nil })
		require.Error(t, err, name)
		require.False(t, called, name)
		require.Equal(t, 2, count(), name)
	}

	require.ErrorIs(t, db.InTxWith(ctx, pool, insert(4), func(pgx.Tx) error { return refused }), refused)
	require.Equal(t, 2, count())
	require.Panics(t, func() {
		_ = db.InTxWith(ctx, pool, insert(5), func(pgx.Tx) error { panic("boom") })
	})
	require.Equal(t, 2, count(), "a panic rolls back")
	require.NoError(t, db.InTxWith(ctx, pool, insert(6), func(pgx.Tx) error { return nil }))
	require.Equal(t, 3, count(), "the connection is fine after each")
}
