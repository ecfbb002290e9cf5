package dbmetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
