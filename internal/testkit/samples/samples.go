// Package samples reads a Prometheus text exposition, as a server's
// /metrics answers it, into its samples, for tests that check what a
// server counted.
package samples

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Parse returns every sample of body keyed by name and labels as exposed
// (name{label="value",...}); it fails t on a line it cannot read.
func Parse(t testing.TB, body []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			t.Fatalf("not a sample: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("not a sample: %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Families returns the metric names of samples, histogram series
// (_bucket, _sum, _count) as exposed.
func Families(samples map[string]float64) map[string]bool {
	out := map[string]bool{}
	for s := range samples {
		name, _, _ := strings.Cut(s, "{")
		out[name] = true
	}
	return out
}

// List reads a list of metric names, one a line, blank lines and lines
// starting with # left out: deploy/helm/test/testdata/exported-metrics.txt.
func List(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	return names
}
