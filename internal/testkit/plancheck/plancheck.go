package plancheck

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// Statement is one statement a store ran, with its arguments.
type Statement struct {
	SQL  string
	Args []any
	// Trip numbers the round trip that sent it, from 1 in each recording:
	// a batch's statements share theirs.
	Trip int
}

// String is the statement on one line, for failure messages.
func (s Statement) String() string { return strings.Join(strings.Fields(s.SQL), " ") }

// Recorder records the statements run on the pools it traces, while
// recording, with the round trip of each. It implements pgx.QueryTracer
// and pgx.BatchTracer.
type Recorder struct {
	mu        sync.Mutex
	recording bool
	stmts     []Statement
	trips     int
}

// tripKey is the context key of a batch's round trip.
type tripKey struct{}

// TraceQueryStart records a statement, sent in a round trip of its own.
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args, 0)
	return ctx
}

// TraceQueryEnd does nothing.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart takes the round trip that sends the batch, whose
// statements come one by one.
func (r *Recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips++
	return context.WithValue(ctx, tripKey{}, r.trips)
}

// TraceBatchQuery records a statement of a batch.
func (r *Recorder) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	trip, _ := ctx.Value(tripKey{}).(int)
	r.add(d.SQL, d.Args, trip)
}

// TraceBatchEnd does nothing.
func (r *Recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// add records a statement of round trip trip, or of a new one when 0.
func (r *Recorder) add(sql string, args []any, trip int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if trip == 0 {
		r.trips++
		trip = r.trips
	}
	if r.recording {
		r.stmts = append(r.stmts, Statement{SQL: sql, Args: append([]any(nil), args...), Trip: trip})
	}
}

// Record runs f and returns the statements run on the traced pools
// meanwhile, but transaction control, advisory locks and settings.
func (r *Recorder) Record(f func()) []Statement {
	r.mu.Lock()
	r.recording, r.stmts, r.trips = true, nil, 0
	r.mu.Unlock()
	f()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recording = false
	var out []Statement
	for _, s := range r.stmts {
		switch strings.ToUpper(strings.TrimSpace(s.SQL)) {
		case "BEGIN", "COMMIT", "ROLLBACK", "BEGIN ISOLATION LEVEL READ COMMITTED":
			continue
		}
		// Locks and settings of the transaction read no table.
		if strings.Contains(s.SQL, "pg_advisory_xact_lock(") || strings.Contains(s.SQL, "set_config(") {
			continue
		}
		out = append(out, s)
	}
	return out
}

// NewDatabase gives the test a fresh migrated database (testdb): a pool
// on it whose statements the returned Recorder records, and a connection
// of its own to explain them on. Both are closed when the test ends.
func NewDatabase(t testing.TB) (*pgxpool.Pool, *pgx.Conn, *Recorder) {
	t.Helper()
	url := testdb.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return pool, conn, rec
}

// Want is what a statement's plan must be: for each table it reads, the
// index it reads it through, and how many rows any scan may be estimated
// to return.
type Want struct {
	// Index maps a table to its index. A table the plan scans that is
	// not here fails the check; an INSERT without a scan checks nothing.
	Index map[string]string
	// MaxRows bounds every scan's estimated rows (0: 1).
	MaxRows float64
	// Also maps a table to other indexes accepted for it: ties the
	// caller has decided to allow (docs/decisions.md says which).
	Also map[string][]string
	// Ordered is a statement with ORDER BY and LIMIT whose index gives
	// the order: the plan must not sort, and a scan's estimate (every row
	// that matches) bounds nothing, since the LIMIT ends the scan.
	Ordered bool
}

// Scan is one table scan of a plan, or a sort (Node "Sort", no Table).
type Scan struct {
	Node, Table, Index string
	Rows               float64
}

// String says what the scan reads, how, and how many rows it expects.
func (s Scan) String() string {
	return fmt.Sprintf("%s on %s using %q (%.0f rows)", s.Node, s.Table, s.Index, s.Rows)
}

// Checked is a recorded statement, named for failure messages, and what
// its plan must be.
type Checked struct {
	Name string
	Statement
	Want Want
}

// Pair names the statements of a path and pairs each with its want, in
// order; it fails t when the path ran more or fewer statements than it
// has wants, printing them, so a new statement is listed before it runs.
func Pair(t testing.TB, name string, stmts []Statement, wants []Want) []Checked {
	t.Helper()
	if len(stmts) != len(wants) {
		for _, s := range stmts {
			t.Logf("  %s", s)
		}
		t.Errorf("%s ran %d statements, the test lists %d", name, len(stmts), len(wants))
		return nil
	}
	out := make([]Checked, len(stmts))
	for i, s := range stmts {
		out[i] = Checked{Name: name, Statement: s, Want: wants[i]}
	}
	return out
}

// Phases checks each statement in three phases, subtests named for them:
// "new", the tables as they are (a few rows, never analyzed), where
// Want.Also is accepted; "loaded", after load added many rows, still
// never analyzed; and "analyzed", after ANALYZE of the whole database.
func Phases(t *testing.T, conn *pgx.Conn, checks []Checked, load func(t *testing.T)) {
	t.Helper()
	run := func(phase string) {
		t.Run(phase, func(t *testing.T) {
			for i, c := range checks {
				want := c.Want
				if phase != "new" {
					want.Also = nil
				}
				t.Run(fmt.Sprintf("%s/%d", c.Name, i), func(t *testing.T) { Check(t, conn, c.Statement, want) })
			}
		})
	}
	run("new")
	load(t)
	run("loaded")
	if _, err := conn.Exec(context.Background(), "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	run("analyzed")
}

// Modes are the two ways a statement is planned: with its arguments'
// values, and as a prepared statement's generic plan.
var Modes = []string{"force_custom_plan", "force_generic_plan"}

// Check explains s on conn in both Modes and fails t unless every scan
// matches want.
func Check(t testing.TB, conn *pgx.Conn, s Statement, want Want) {
	t.Helper()
	for _, mode := range Modes {
		scans, err := Explain(context.Background(), conn, s, mode)
		if err != nil {
			t.Errorf("%s: %s: %v", mode, s, err)
			continue
		}
		for _, problem := range Problems(scans, want) {
			t.Errorf("%s: %s\n  %s", mode, s, problem)
		}
	}
}

// OnlyIndexes explains each of stmts on conn as a custom plan and fails t
// for every scan that does not read its table through one of the indexes
// allowed lists for it: for a page's statements, which may read many of
// a Company's rows but never through an index of every Company's. Unlike
// Check, it bounds no row counts and leaves generic plans out.
func OnlyIndexes(t testing.TB, conn *pgx.Conn, stmts []Statement, allowed map[string][]string) {
	t.Helper()
	for _, s := range stmts {
		scans, err := Explain(context.Background(), conn, s, "force_custom_plan")
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		for _, sc := range scans {
			if sc.Node == "Sort" {
				// A sort reads no table; Explain lists it for Problems.
				continue
			}
			if !indexed[sc.Node] || !slices.Contains(allowed[sc.Table], sc.Index) {
				t.Errorf("%s\n  %s, want an index scan using one of %q", s, sc, allowed[sc.Table])
			}
		}
	}
}

// indexed are the scans that read a table through one index.
var indexed = map[string]bool{"Index Scan": true, "Index Only Scan": true, "Bitmap Heap Scan": true}

// Problems lists how scans differ from want.
func Problems(scans []Scan, want Want) []string {
	limit := want.MaxRows
	if limit == 0 {
		limit = 1
	}
	var out []string
	for _, sc := range scans {
		if sc.Node == "Sort" {
			if want.Ordered {
				out = append(out, fmt.Sprintf("a sort of %.0f rows, want them in an index's order", sc.Rows))
			}
			continue
		}
		index, ok := want.Index[sc.Table]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("unexpected %s", sc))
		case !indexed[sc.Node] || sc.Index == "" || sc.Index != index && !slices.Contains(want.Also[sc.Table], sc.Index):
			out = append(out, fmt.Sprintf("%s, want an index scan using %q", sc, index))
		case sc.Rows > limit && !want.Ordered:
			out = append(out, fmt.Sprintf("%s, want at most %.0f rows", sc, limit))
		}
	}
	return out
}

// Explain prepares s on conn and returns the scans of its plan in mode
// (a plan_cache_mode).
func Explain(ctx context.Context, conn *pgx.Conn, s Statement, mode string) ([]Scan, error) {
	const name = "plancheck_statement"
	sd, err := conn.Prepare(ctx, name, s.SQL)
	if err != nil {
		return nil, err
	}
	defer conn.Deallocate(context.WithoutCancel(ctx), name)
	if len(sd.ParamOIDs) != len(s.Args) {
		return nil, fmt.Errorf("%d parameters, %d arguments", len(sd.ParamOIDs), len(s.Args))
	}
	lits := make([]string, len(s.Args))
	for i, a := range s.Args {
		if lits[i], err = literal(conn, sd.ParamOIDs[i], a); err != nil {
			return nil, fmt.Errorf("argument %d: %w", i+1, err)
		}
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		return nil, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
	sql := "EXPLAIN (FORMAT JSON) EXECUTE " + name
	if len(lits) > 0 {
		sql += "(" + strings.Join(lits, ", ") + ")"
	}
	var out []struct{ Plan node }
	var raw []byte
	if err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&raw); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return nil, fmt.Errorf("explain output: %v", err)
	}
	return out[0].Plan.scans(nil), nil
}

// node is a plan node of EXPLAIN (FORMAT JSON).
type node struct {
	Type     string  `json:"Node Type"`
	Relation string  `json:"Relation Name"`
	Index    string  `json:"Index Name"`
	Rows     float64 `json:"Plan Rows"`
	Plans    []node  `json:"Plans"`
}

func (n node) scans(out []Scan) []Scan {
	switch {
	case n.Type == "Bitmap Heap Scan":
		// Read through the one index of its Bitmap Index Scan; a
		// BitmapAnd or BitmapOr of several is reported without one.
		sc := Scan{Node: n.Type, Table: n.Relation, Rows: n.Rows}
		if len(n.Plans) == 1 && n.Plans[0].Type == "Bitmap Index Scan" {
			sc.Index = n.Plans[0].Index
		}
		return append(out, sc)
	case n.Relation != "" && n.Type != "ModifyTable":
		out = append(out, Scan{Node: n.Type, Table: n.Relation, Index: n.Index, Rows: n.Rows})
	case n.Type == "Sort" || n.Type == "Incremental Sort":
		out = append(out, Scan{Node: "Sort", Rows: n.Rows})
	}
	for _, c := range n.Plans {
		out = c.scans(out)
	}
	return out
}

// literal is a as an SQL literal of the type oid, encoded as pgx would
// send it.
func literal(conn *pgx.Conn, oid uint32, a any) (string, error) {
	t, ok := conn.TypeMap().TypeForOID(oid)
	if !ok {
		return "", fmt.Errorf("no type with OID %d", oid)
	}
	typ := pgx.Identifier{t.Name}.Sanitize()
	if a == nil {
		return "NULL::" + typ, nil
	}
	buf, err := conn.TypeMap().Encode(oid, pgtype.TextFormatCode, a, nil)
	if err != nil {
		return "", err
	}
	if buf == nil {
		return "NULL::" + typ, nil
	}
	return "'" + strings.ReplaceAll(string(buf), "'", "''") + "'::" + typ, nil
}
