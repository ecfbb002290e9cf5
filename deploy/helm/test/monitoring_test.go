package test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// exportedMetricsFile lists the metric names the server exports that the
// dashboard and alerts may use; internal/platform's TestExportedMetricsList
// checks it against a running server.
const exportedMetricsFile = "testdata/exported-metrics.txt"

// scrapeMetrics are the series Prometheus itself makes for every target.
var scrapeMetrics = []string{"up"}

func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(exportedMetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			names[line] = true
		}
	}
	for _, n := range scrapeMetrics {
		names[n] = true
	}
	return names
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers  = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords  = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
	promFuncStart = regexp.MustCompile(`^\s*\(`)
)

// metricNames returns the metric names a PromQL expression reads: its
// identifiers once strings, label matchers, ranges and grouping clauses
// are taken out, less keywords and function calls. It errs on the side of
// reporting too much, which the test then refuses.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the exponent or unit of a number, as in 1e9
		}
		if slices.Contains(promKeywords, strings.ToLower(id)) || promFuncStart.MatchString(e[loc[1]:]) {
			continue
		}
		names = append(names, id)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`sum by (class, le) (label_replace(rate(a_bucket{job=~"$job",x="b{c}"}[5m]), "class", "$1", "route", "(x)")) / on (pod) b > 1e9 and c offset 5m`)
	if !slices.Equal(got, []string{"a_bucket", "b", "c"}) {
		t.Errorf("metricNames = %v", got)
	}
}

// checkExpr fails unless expr reads at least one metric and only metrics
// the server exports.
func checkExpr(t *testing.T, where, expr string, exported map[string]bool) {
	t.Helper()
	names := metricNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: reads no metric: %s", where, expr)
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("%s: %s is not a metric the server exports (%s): %s", where, n, exportedMetricsFile, expr)
		}
	}
}

func monitoringValues() map[string]any {
	return merge(required(), map[string]any{
		"grafanaDashboard": map[string]any{"enabled": true, "annotations": map[string]any{"grafana_folder": "poppyhost"}},
		"prometheusRule":   map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
	})
}

// TestDashboard: the dashboard renders only when enabled, in a ConfigMap
// the Grafana sidecar loads, as JSON whose every query reads metrics the
// server exports.
func TestDashboard(t *testing.T) {
	if m := render(t, required()); m.dashboard != nil {
		t.Fatal("dashboard rendered although disabled")
	}
	m := render(t, monitoringValues())
	cm := m.dashboard
	if cm == nil {
		t.Fatal("dashboard not rendered although enabled")
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "poppyhost" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("dashboard ConfigMap holds %d files", len(cm.Data))
	}
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(strings.NewReader(cm.Data["poppyhost.json"]))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" {
		t.Error("dashboard has no uid")
	}
	exported := exportedMetrics(t)
	var queries int
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr, exported)
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			checkExpr(t, "variable "+v.Name, strings.TrimSuffix(strings.TrimPrefix(q["query"].(string), "label_values("), ", job)"), exported)
		}
	}
	// Each panel the chart promises: requests, errors, latency, pool,
	// replicas, jobs, webhooks, operations, keys.
	for _, want := range []string{"poppyhost_http_requests_total", "poppyhost_http_request_duration_seconds_bucket",
		"pgxpool_acquired_conns", "poppyhost_replicas_live", "poppyhost_jobs", "poppyhost_jobs_available_oldest_seconds",
		"poppyhost_webhook_delivery_lag_seconds", "poppyhost_operations_outcomes_total", "poppyhost_operations_unsettled_oldest_seconds",
		"poppyhost_signing_key_oldest_seconds"} {
		var found bool
		for _, p := range dash.Panels {
			for _, q := range p.Targets {
				found = found || slices.Contains(metricNames(q.Expr), want)
			}
		}
		if !found {
			t.Errorf("no panel reads %s", want)
		}
	}
	t.Logf("%d panels, %d queries", len(dash.Panels), queries)
}

// TestPrometheusRule: the alerts render only when enabled, each reading
// only metrics the server exports, scoped to this release's operations
// Service, with a severity and a pointer to its explanation.
func TestPrometheusRule(t *testing.T) {
	if m := render(t, required()); m.prometheusRule != nil {
		t.Fatal("PrometheusRule rendered although disabled")
	}
	m := render(t, monitoringValues())
	pr := m.prometheusRule
	if pr == nil {
		t.Fatal("PrometheusRule not rendered although enabled")
	}
	if pr.GetLabels()["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels = %v", pr.GetLabels())
	}
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if len(groups) != 1 {
		t.Fatalf("groups = %v", groups)
	}
	rules, _, _ := unstructured.NestedSlice(groups[0].(map[string]any), "rules")
	exported := exportedMetrics(t)
	docs, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	scope := `namespace="` + namespace + `",job="` + m.opsService.Name + `"`
	var alerts []string
	for _, r := range rules {
		rule := r.(map[string]any)
		name, _ := rule["alert"].(string)
		expr, _ := rule["expr"].(string)
		alerts = append(alerts, name)
		checkExpr(t, "alert "+name, expr, exported)
		if n := strings.Count(expr, "{"); n == 0 || n != strings.Count(expr, scope) {
			t.Errorf("alert %s: not every selector is scoped to %s: %s", name, scope, expr)
		}
		if sev, _, _ := unstructured.NestedString(rule, "labels", "severity"); sev != "critical" && sev != "warning" {
			t.Errorf("alert %s: severity %q", name, sev)
		}
		if _, ok := rule["for"].(string); !ok {
			t.Errorf("alert %s: no for", name)
		}
		if !strings.Contains(string(docs), "#### "+name) {
			t.Errorf("alert %s is not explained in docs/operations.md (a \"#### %s\" heading)", name, name)
		}
	}
	want := []string{"PoppyhostErrorRate", "PoppyhostLatencyP99", "PoppyhostTargetDown", "PoppyhostDatabasePoolSaturated",
		"PoppyhostJobsWaiting", "PoppyhostWebhookDeliveryLag", "PoppyhostOperationsStuck", "PoppyhostSigningKeyNotRotated", "PoppyhostShedding"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts = %v, want %v", alerts, want)
	}
}
