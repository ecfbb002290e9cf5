package plancheck

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScans: the scans of an EXPLAIN (FORMAT JSON) plan, nested plans
// and bitmap scans included, the table written left out.
func TestScans(t *testing.T) {
	raw := `[{"Plan": {"Node Type": "ModifyTable", "Relation Name": "oauth_tokens", "Plan Rows": 0, "Plans": [
		{"Node Type": "Nested Loop", "Plan Rows": 1, "Plans": [
			{"Node Type": "Index Scan", "Relation Name": "oauth_tokens", "Index Name": "oauth_tokens_pkey", "Plan Rows": 1},
			{"Node Type": "Bitmap Heap Scan", "Relation Name": "sessions", "Plan Rows": 3, "Plans": [
				{"Node Type": "Bitmap Index Scan", "Index Name": "sessions_pkey", "Plan Rows": 3}]},
			{"Node Type": "Seq Scan", "Relation Name": "companies", "Plan Rows": 40}]}]}}]`
	var out []struct{ Plan node }
	require.NoError(t, json.Unmarshal([]byte(raw), &out))
	require.Equal(t, []Scan{
		{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_pkey", Rows: 1},
		{Node: "Bitmap Heap Scan", Table: "sessions", Index: "sessions_pkey", Rows: 3},
		{Node: "Seq Scan", Table: "companies", Rows: 40},
	}, out[0].Plan.scans(nil))
}

// TestScansSort: a sort is reported, with the rows it sorts.
func TestScansSort(t *testing.T) {
	raw := `[{"Plan": {"Node Type": "Limit", "Plan Rows": 50, "Plans": [
		{"Node Type": "Sort", "Plan Rows": 900, "Plans": [
			{"Node Type": "Index Scan", "Relation Name": "conversations", "Index Name": "conversations_pkey", "Plan Rows": 900}]}]}}]`
	var out []struct{ Plan node }
	require.NoError(t, json.Unmarshal([]byte(raw), &out))
	require.Equal(t, []Scan{
		{Node: "Sort", Rows: 900},
		{Node: "Index Scan", Table: "conversations", Index: "conversations_pkey", Rows: 900},
	}, out[0].Plan.scans(nil))
}

// TestProblems: each way a plan can differ from what a statement needs.
func TestProblems(t *testing.T) {
	want := Want{Index: map[string]string{"oauth_tokens": "oauth_tokens_pkey"}}
	pk := Scan{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_pkey", Rows: 1}
	for _, c := range []struct {
		name  string
		scans []Scan
		want  Want
		fails bool
	}{
		{"the index", []Scan{pk}, want, false},
		{"no scan", nil, want, false},
		{"through the index's bitmap", []Scan{{Node: "Bitmap Heap Scan", Table: "oauth_tokens", Index: "oauth_tokens_pkey", Rows: 1}}, want, false},
		{"another index", []Scan{{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_request", Rows: 1}}, want, true},
		{"another index, allowed", []Scan{{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_request", Rows: 1}},
			Want{Index: want.Index, Also: map[string][]string{"oauth_tokens": {"oauth_tokens_request"}}}, false},
		{"a sequential scan", []Scan{{Node: "Seq Scan", Table: "oauth_tokens", Rows: 1}}, want, true},
		{"a bitmap of several indexes", []Scan{{Node: "Bitmap Heap Scan", Table: "oauth_tokens", Rows: 1}}, want, true},
		{"a table not named", []Scan{pk, {Node: "Index Scan", Table: "sessions", Index: "sessions_pkey", Rows: 1}}, want, true},
		{"more rows than one", []Scan{{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_pkey", Rows: 2}}, want, true},
		{"within a larger bound", []Scan{{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_pkey", Rows: 80}},
			Want{Index: want.Index, MaxRows: 100}, false},
		{"a sort, not asked about", []Scan{pk, {Node: "Sort", Rows: 1}}, want, false},
		{"in the index's order", []Scan{{Node: "Index Scan", Table: "oauth_tokens", Index: "oauth_tokens_pkey", Rows: 5000}},
			Want{Index: want.Index, Ordered: true}, false},
		{"sorted, not in the index's order", []Scan{{Node: "Sort", Rows: 5000}, pk}, Want{Index: want.Index, Ordered: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems := Problems(c.scans, c.want)
			require.Equal(t, c.fails, len(problems) > 0, "%v", problems)
		})
	}
}
