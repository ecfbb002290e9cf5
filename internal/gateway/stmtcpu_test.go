package gateway_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/testkit"
)

// stmtCPU is a pgx tracer that charges each statement the CPU its
// PostgreSQL backend used while the statement ran: the backend's
// sum_exec_runtime (/proc/{pid}/schedstat, in nanoseconds; the server
// runs on this machine) read when pgx sends it and when its result has
// been read. A backend is idle between statements, so what it used in
// between is its statement's: parsing, planning, executing, triggers, key
// checks and, for COMMIT, the commit. Only while on.
type stmtCPU struct {
	mu    sync.Mutex
	on    bool
	costs map[string]*stmtCost
}

// stmtCost is one statement's tally.
type stmtCost struct {
	n   int
	cpu time.Duration
}

type stmtCPUKey struct{}

type stmtCPUStart struct {
	key string
	pid uint32
	cpu time.Duration
}

func newStmtCPU() *stmtCPU { return &stmtCPU{costs: map[string]*stmtCost{}} }

func (s *stmtCPU) start(ctx context.Context, conn *pgx.Conn, sql string) context.Context {
	s.mu.Lock()
	on := s.on
	s.mu.Unlock()
	if !on {
		return ctx
	}
	pid := conn.PgConn().PID()
	return context.WithValue(ctx, stmtCPUKey{}, &stmtCPUStart{key: stmtCPUName(sql), pid: pid, cpu: backendCPU(pid)})
}

func (s *stmtCPU) end(ctx context.Context) {
	st, ok := ctx.Value(stmtCPUKey{}).(*stmtCPUStart)
	if !ok {
		return
	}
	used := backendCPU(st.pid) - st.cpu
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.costs[st.key]
	if c == nil {
		c = &stmtCost{}
		s.costs[st.key] = c
	}
	c.n++
	c.cpu += used
}

// TraceQueryStart notes the backend's CPU before a statement.
func (s *stmtCPU) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return s.start(ctx, conn, d.SQL)
}

// TraceQueryEnd charges the statement.
func (s *stmtCPU) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s.end(ctx)
}

// TraceBatchStart notes the backend's CPU before a batch, charged as one.
func (s *stmtCPU) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var names []string
	for _, q := range d.Batch.QueuedQueries {
		names = append(names, stmtCPUName(q.SQL))
	}
	return s.start(ctx, conn, "batch: "+strings.Join(names, " + "))
}

// TraceBatchQuery does nothing.
func (s *stmtCPU) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd charges the batch.
func (s *stmtCPU) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	s.end(ctx)
}

// stmtCPUName names a statement by its first words.
func stmtCPUName(sql string) string {
	name := strings.Join(strings.Fields(sql), " ")
	if len(name) > 70 {
		name = name[:70]
	}
	return name
}

// backendCPU is the CPU time process pid has used, 0 when unknown.
func backendCPU(pid uint32) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/schedstat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns)
}

// BenchmarkApprovedStatements charges PostgreSQL's CPU to each statement
// of BenchmarkOperations' plain and approved calls (stmtCPU): the
// approved call's extra cost, statement by statement. Each statement's
// µs per call is logged after its first words (-test.v), and their sum
// reported. Background statements (River's, the replica heartbeat) that
// run on the pool while a call is in flight are counted too, under their
// own names.
func BenchmarkApprovedStatements(b *testing.B) {
	rec := newStmtCPU()
	g := newGatewayBench(b, testkit.Options{Tracer: rec})
	o := newOpsBench(b, g)
	run := func(b *testing.B, next func(b *testing.B) func()) {
		rec.mu.Lock()
		rec.costs = map[string]*stmtCost{}
		rec.mu.Unlock()
		for range b.N {
			call := next(b)
			rec.mu.Lock()
			rec.on = true
			rec.mu.Unlock()
			call()
			rec.mu.Lock()
			rec.on = false
			rec.mu.Unlock()
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var total time.Duration
		keys := make([]string, 0, len(rec.costs))
		for k := range rec.costs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			c := rec.costs[k]
			total += c.cpu
			b.Logf("%8.1f µs/call  %5.2f per call  %s", float64(c.cpu.Nanoseconds())/1e3/float64(b.N),
				float64(c.n)/float64(b.N), k)
		}
		b.ReportMetric(float64(total.Nanoseconds())/1e3/float64(b.N), "stmt-pg-cpu-µs/op")
	}
	b.Run("plain", func(b *testing.B) {
		run(b, func(b *testing.B) func() {
			req := o.request(b, o.notes, `{"text":"leave it at the door"}`, "")
			return func() { o.call(b, req) }
		})
	})
	b.Run("approved", func(b *testing.B) {
		run(b, func(b *testing.B) func() {
			p := o.propose(b)
			req := o.request(b, o.exchanges, p.body, p.approval)
			return func() { o.call(b, req) }
		})
	})
}
