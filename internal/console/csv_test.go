package console

import (
	"encoding/csv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCSVCells: cells that a spreadsheet would run as formulas start with
// an apostrophe; commas, quotes and newlines are quoted so the file reads
// back cell for cell, carriage returns included.
func TestCSVCells(t *testing.T) {
	var b strings.Builder
	w := newCSVWriter(&b)
	cells := []string{`=HYPERLINK("https://evil.example","x")`, "+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "＝1",
		"a,b", `say "hi"`, "two\nlines", "plain", "", "\xff"}
	require.NoError(t, w.row(append([]string(nil), cells...)...))
	require.NoError(t, w.flush())

	got, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{{`'=HYPERLINK("https://evil.example","x")`, "'+1", "'-2+3", "'@SUM(A1)", "'\tx",
		"'\rx", "'＝1", "a,b", `say "hi"`, "two\nlines", "plain", "", "\uFFFD"}}, got)
}
