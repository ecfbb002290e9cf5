package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestRunAgainstTheBuiltServer runs every kind for two seconds at a low
// rate against the built server: each request must succeed, every reader
// must get its messages, and the report must hold every figure.
func TestRunAgainstTheBuiltServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setup, err := Build(ctx, "../..", t.TempDir())
	require.NoError(t, err)
	setup.DatabaseURL = testdb.NewEmptyDatabase(t)
	var logs bytes.Buffer
	setup.Output = &logs
	// A run every request of which must succeed: nothing shed on a
	// loaded machine (shedding's own tests are internal/overload's).
	setup.ServerEnv = map[string]string{"POPPYHOST_OVERLOAD_DELAY": "0s"}
	rep, err := Run(ctx, Options{Setup: setup, Rate: 30, Duration: 2 * time.Second, Warmup: 500 * time.Millisecond,
		Users: 2, Chains: 4, Sessions: 4, Conversations: 2})
	require.NoError(t, err, "server output:\n%s", logs.String())

	require.Len(t, rep.Kinds, len(Kinds))
	for i, k := range rep.Kinds {
		require.Equal(t, Kinds[i], k.Kind)
		require.NotZero(t, k.Requests, "%s sent nothing", k.Kind)
		require.Equal(t, k.Requests, k.Successes, "%s: errors %v, last %q", k.Kind, k.Errors, k.LastError)
		require.Empty(t, k.Errors, k.Kind)
		require.InDelta(t, 30*DefaultMix[k.Kind], k.Rate, 1e-9)
		require.Positive(t, k.Sent, k.Kind)
		require.Positive(t, k.Throughput, k.Kind)
		require.Positive(t, k.P50, k.Kind)
		require.GreaterOrEqual(t, k.P99, k.P50, k.Kind)
		require.GreaterOrEqual(t, k.P999, k.P99, k.Kind)
		require.GreaterOrEqual(t, k.Max, k.P999, k.Kind)
	}
	require.Equal(t, 2, rep.Readers.Readers)
	require.Zero(t, rep.Readers.Errors, rep.Readers.LastError)
	require.Positive(t, rep.Readers.Polls)
	require.Positive(t, rep.Readers.Messages, "the readers got no message")
	require.Zero(t, rep.Failures())
	require.GreaterOrEqual(t, len(rep.Timeline), 2)
	total := 0
	for i, s := range rep.Timeline {
		require.Equal(t, i, s.Second)
		require.Zero(t, s.Failures)
		total += s.Requests
	}
	var sent uint64
	for _, k := range rep.Kinds {
		sent += k.Requests
	}
	require.Equal(t, int(sent), total, "the timeline counts every measured request once")

	require.Len(t, rep.Servers, 1)
	s := rep.Servers[0]
	require.Positive(t, s.PID)
	require.Positive(t, s.CPUSeconds)
	require.Positive(t, s.CPUCores)
	require.Positive(t, s.RSSStart)
	require.Positive(t, s.RSSEnd)
	require.GreaterOrEqual(t, s.RSSMax, s.RSSEnd)
	require.LessOrEqual(t, s.RSSMin, s.RSSEnd)
	require.Positive(t, s.RSSMin)
	require.Positive(t, rep.Generator.CPUSeconds)
	require.Equal(t, os.Getpid(), rep.Generator.PID)
	require.GreaterOrEqual(t, len(s.Samples), 2)
	require.Positive(t, rep.Elapsed)
	require.Positive(t, rep.LoadBefore[0]+rep.LoadBefore[1]+rep.LoadBefore[2])
	require.Positive(t, rep.CPUs)
	require.NotEmpty(t, rep.Database.Name)
	require.Positive(t, rep.Database.Backends, "no PostgreSQL backend of %s found", rep.Database.Name)
	require.GreaterOrEqual(t, rep.Database.CPUSeconds, 0.0) // a few ticks at most in so short a run
	require.Positive(t, rep.MachineBusy)

	var text bytes.Buffer
	require.NoError(t, rep.WriteText(&text))
	for _, k := range Kinds {
		require.Contains(t, text.String(), string(k))
	}
	require.Contains(t, text.String(), "CPU seconds")
	require.Contains(t, text.String(), "load generator")
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	for _, f := range []string{"rate", "duration_ns", "elapsed_ns", "replicas", "kinds", "readers", "servers", "timeline", "generator", "load_before", "database", "cpus", "machine_busy_cores", "load_after"} {
		require.Contains(t, fields, f)
	}
}

// TestFailuresAreCounted checks that an error status, no answer, an MCP
// tool error and a refresh without tokens each count as a failure by its
// cause, not as a success.
func TestFailuresAreCounted(t *testing.T) {
	p := &pools{refresh: make(chan string, 1)}
	cases := []struct {
		kind Kind
		res  vegeta.Result
		want string
	}{
		{SignedIn, vegeta.Result{Code: 429, Error: "429 Too Many Requests"}, "429"},
		{Discovery, vegeta.Result{Error: "connection refused"}, "transport"},
		{MCP, vegeta.Result{Code: 200, Body: []byte(`{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[]}}`)}, "tool_error"},
		{Refresh, vegeta.Result{Code: 200, Body: []byte(`{"access_token":"a"}`)}, "no_tokens"},
		{Refresh, vegeta.Result{Error: errNoChain + " for 10 s"}, "no_refresh_token"},
	}
	for _, c := range cases {
		kr := newKindReport(c.kind, 1)
		res := c.res
		res.Latency = time.Millisecond
		kr.add(&res, p, true)
		kr.close()
		require.Equal(t, uint64(1), kr.Requests, c.kind)
		require.Zero(t, kr.Successes, c.kind)
		require.Equal(t, map[string]int{c.want: 1}, kr.Errors, c.kind)
	}

	kr := newKindReport(Refresh, 1)
	kr.add(&vegeta.Result{Code: 200, Latency: time.Millisecond, Body: []byte(`{"access_token":"a","refresh_token":"r2"}`)}, p, true)
	kr.close()
	require.Equal(t, uint64(1), kr.Successes)
	require.Equal(t, "r2", <-p.refresh, "a refresh's new token goes back to the pool")

	// In the warm-up nothing counts, but the token still goes back.
	kr = newKindReport(Refresh, 1)
	kr.add(&vegeta.Result{Code: 429, Latency: time.Millisecond}, p, false)
	kr.add(&vegeta.Result{Code: 200, Latency: time.Millisecond, Body: []byte(`{"access_token":"a","refresh_token":"r3"}`)}, p, false)
	kr.close()
	require.Zero(t, kr.Requests)
	require.Empty(t, kr.Errors)
	require.Equal(t, "r3", <-p.refresh)

	// Refused unused (shed, or over a rate): the token sent goes back;
	// any other failure loses it, as the server may have used it.
	kr = newKindReport(Refresh, 1)
	p.refreshing.Store("a1", "r4")
	p.refreshing.Store("a2", "r5")
	p.refreshing.Store("a3", "r6")
	kr.add(&vegeta.Result{Code: 503, Latency: time.Millisecond, URL: "https://x.test/oauth/token#a1"}, p, true)
	require.Len(t, p.refresh, 1, "a shed refresh gives its token back")
	require.Equal(t, "r4", <-p.refresh)
	kr.add(&vegeta.Result{Code: 429, Latency: time.Millisecond, URL: "https://x.test/oauth/token#a2"}, p, true)
	require.Len(t, p.refresh, 1, "so does one over a rate")
	require.Equal(t, "r5", <-p.refresh)
	kr.add(&vegeta.Result{Code: 400, Latency: time.Millisecond, URL: "https://x.test/oauth/token#a3"}, p, true)
	kr.close()
	require.Equal(t, map[string]int{"503": 1, "429": 1, "400": 1}, kr.Errors)
	require.Empty(t, p.refresh, "a token the server may have used is not sent again")
	_, left := p.refreshing.Load("a3")
	require.False(t, left, "every answered refresh is forgotten")
}
