package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// TestWorked: each job worked is counted by its kind and how it ended;
// a failure is retryable until its last attempt, then discarded.
func TestWorked(t *testing.T) {
	reg := prometheus.NewRegistry()
	w, err := newWorked(reg)
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("failed")
	for _, tc := range []struct {
		kind     string
		attempt  int
		err      error
		expected string
	}{
		{"a", 1, nil, "completed"},
		{"a", 1, failed, "retryable"},
		{"a", 3, failed, "discarded"},
		{"a", 1, river.JobCancel(failed), "cancelled"},
		{"b", 1, river.JobSnooze(time.Minute), "snoozed"},
		{"b", 2, nil, "completed"},
	} {
		job := &rivertype.JobRow{Kind: tc.kind, Attempt: tc.attempt, MaxAttempts: 3}
		got := w.Work(context.Background(), job, func(context.Context) error { return tc.err })
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: Work returned %v, not the job's %v", tc.expected, got, tc.err)
		}
	}
	want := `# HELP poppyhost_jobs_worked_total River jobs worked on this replica, by kind and result: completed, retryable (failed, to be retried), discarded (failed its last attempt), cancelled, snoozed.
# TYPE poppyhost_jobs_worked_total counter
`
	for _, kind := range []string{"a", "b"} {
		for _, r := range []string{"cancelled", "completed", "discarded", "retryable", "snoozed"} {
			n := "0"
			switch kind + " " + r {
			case "a cancelled", "a completed", "a discarded", "a retryable", "b completed", "b snoozed":
				n = "1"
			}
			want += `poppyhost_jobs_worked_total{kind="` + kind + `",result="` + r + `"} ` + n + "\n"
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
