package console

import (
	"encoding/csv"
	"io"
	"strings"
	"unicode/utf8"
)

// csvWriter writes an export as RFC 4180 CSV (quoted where needed) whose
// cells a spreadsheet never reads as a formula. Lines end with LF, which
// spreadsheets read as well as CRLF: encoding/csv's CRLF mode would drop
// a lone carriage return from a cell.
type csvWriter struct{ w *csv.Writer }

func newCSVWriter(w io.Writer) *csvWriter { return &csvWriter{w: csv.NewWriter(w)} }

// row writes one row of cells, each made safe (safeCell).
func (c *csvWriter) row(cells ...string) error {
	for i, s := range cells {
		cells[i] = safeCell(s)
	}
	return c.w.Write(cells)
}

// flush writes what is buffered and returns the first error of any
// write.
func (c *csvWriter) flush() error {
	c.w.Flush()
	return c.w.Error()
}

// safeCell keeps a spreadsheet from reading s as a formula (CSV
// injection, OWASP): a cell that starts with =, +, -, @, a tab or a
// carriage return, or their full-width forms, which some spreadsheets
// also read, begins with an apostrophe instead. Invalid UTF-8 is
// replaced, so the file is text. Quoting is encoding/csv's.
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
