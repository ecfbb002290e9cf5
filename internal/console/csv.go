package console

import (
	"bufio"
	"io"
	"strings"
	"unicode/utf8"
)

// csvWriter writes an export as RFC 4180 CSV whose cells a spreadsheet
// never reads as a formula. Every cell is quoted: a spreadsheet whose
// locale separates cells with semicolons (Excel in much of Europe) would
// otherwise split an unquoted "x;=cmd|..." into a second cell that starts
// with = and runs. Lines end with LF, which spreadsheets read as well as
// CRLF.
type csvWriter struct{ w *bufio.Writer }

func newCSVWriter(w io.Writer) *csvWriter { return &csvWriter{w: bufio.NewWriter(w)} }

// row writes one row of cells, each made safe (safeCell) and quoted.
func (c *csvWriter) row(cells ...string) error {
	for i, s := range cells {
		if i > 0 {
			_ = c.w.WriteByte(',')
		}
		_ = c.w.WriteByte('"')
		_, _ = c.w.WriteString(strings.ReplaceAll(safeCell(s), `"`, `""`))
		_ = c.w.WriteByte('"')
	}
	// bufio.Writer keeps its first error: this returns any of the row's.
	return c.w.WriteByte('\n')
}

// flush writes what is buffered and returns the first error of any
// write.
func (c *csvWriter) flush() error {
	return c.w.Flush()
}

// safeCell keeps a spreadsheet from reading s as a formula (CSV
// injection, OWASP): a cell that starts with =, +, -, @, a tab or a
// carriage return, or their full-width forms, which some spreadsheets
// also read, begins with an apostrophe instead. Invalid UTF-8 is
// replaced, so the file is text.
func safeCell(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	r, _ := utf8.DecodeRuneInString(s)
	switch r {
	case '=', '+', '-', '@', '\t', '\r', '\n', '＝', '＋', '－', '＠':
		return "'" + s
	}
	return s
}
