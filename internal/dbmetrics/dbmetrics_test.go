package dbmetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/poppyhost/poppyhost/internal/dbmetrics"
)

// TestCollector: a scrape carries what the read emitted, with its labels;
// a read that fails after emitting some values leaves all of them out;
// the read has a deadline.
func TestCollector(t *testing.T) {
	desc := prometheus.NewDesc("test_backlog", "Backlog.", []string{"state"}, nil)
	var fail bool
	c := dbmetrics.New(func(ctx context.Context, emit dbmetrics.Emit) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the read has no deadline")
		}
		emit(desc, 3, "available")
		if fail {
			return errors.New("down")
		}
		emit(desc, 0, "running")
		return nil
	}, desc)
	want := `# HELP test_backlog Backlog.
# TYPE test_backlog gauge
test_backlog{state="available"} 3
test_backlog{state="running"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	fail = true
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("a failed read exported %d values", n)
	}
}

func TestAge(t *testing.T) {
	now := time.Now()
	past, future := now.Add(-90*time.Second), now.Add(time.Minute)
	for _, tc := range []struct {
		t    *time.Time
		want float64
	}{{nil, 0}, {&past, 90}, {&future, 0}} {
		if got := dbmetrics.Age(now, tc.t); got != tc.want {
			t.Errorf("Age(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
}

// row is a query's answer for TestCountAndAge: a count and the oldest
// time, or an error.
type row struct {
	n      int64
	oldest *time.Time
	err    error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*int64) = r.n
	*dest[1].(**time.Time) = r.oldest
	return nil
}

type querier struct {
	row  row
	args []any
}

func (q *querier) QueryRow(_ context.Context, _ string, args ...any) pgx.Row {
	q.args = args
	return q.row
}

// TestCountAndAge: the count and the oldest's age, 0 for none; the
// query's arguments are passed; a failed query exports nothing.
func TestCountAndAge(t *testing.T) {
	now := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	oldest := now.Add(-45 * time.Second)
	count := prometheus.NewDesc("test_waiting", "Waiting.", nil, nil)
	age := prometheus.NewDesc("test_waiting_oldest_seconds", "Oldest.", nil, nil)
	q := &querier{row: row{n: 4, oldest: &oldest}}
	c := dbmetrics.CountAndAge(q, func() time.Time { return now }, count, age, "SELECT", "kind")
	want := `# HELP test_waiting Waiting.
# TYPE test_waiting gauge
test_waiting 4
# HELP test_waiting_oldest_seconds Oldest.
# TYPE test_waiting_oldest_seconds gauge
test_waiting_oldest_seconds 45
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if len(q.args) != 1 || q.args[0] != "kind" {
		t.Errorf("the query got %v", q.args)
	}
	q.row = row{}
	want = strings.NewReplacer("test_waiting 4", "test_waiting 0", "seconds 45", "seconds 0").Replace(want)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	q.row = row{err: errors.New("down")}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("a failed query exported %d values", n)
	}
}
