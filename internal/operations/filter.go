package operations

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// maxFilterText bounds the client_id and target a filter names: neither
// can be longer where it is stored.
const maxFilterText = 2048

// ParseFilter reads a Filter from the query of an audit, the Company
// API's GET /operations and the console's list: status, interface,
// client_id, target, since and until, each optional. since and until are
// RFC 3339 times or dates (YYYY-MM-DD, UTC), a date until including its
// whole day. Its error is an *httpx.Error naming every bad parameter.
func ParseFilter(q url.Values) (Filter, error) {
	var (
		f      Filter
		fields httpx.Fields
	)
	f.Status = strings.TrimSpace(q.Get("status"))
	if f.Status != "" && !slices.Contains(Statuses, f.Status) {
		fields.Add("status", "must be one of %s", strings.Join(Statuses, ", "))
	}
	f.Interface = strings.TrimSpace(q.Get("interface"))
	if f.Interface != "" && !slices.Contains(Interfaces, f.Interface) {
		fields.Add("interface", "must be one of %s", strings.Join(Interfaces, ", "))
	}
	f.ClientID, f.Target = strings.TrimSpace(q.Get("client_id")), strings.TrimSpace(q.Get("target"))
	fields.Text("client_id", f.ClientID, false, maxFilterText, false)
	fields.Text("target", f.Target, false, maxFilterText, false)
	var ok bool
	if f.Since, ok = parseWhen(q.Get("since"), false); !ok {
		fields.Add("since", "must be a date (YYYY-MM-DD) or an RFC 3339 time")
	}
	if f.Until, ok = parseWhen(q.Get("until"), true); !ok {
		fields.Add("until", "must be a date (YYYY-MM-DD) or an RFC 3339 time")
	}
	return f, fields.Err()
}

// parseWhen reads a time or a date of a filter; end takes a date to the
// start of the next day, so that until includes it.
func parseWhen(s string, end bool) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, true
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			t = t.AddDate(0, 0, 1)
		}
		return t, true
	}
	t, err := time.Parse(time.RFC3339, s)
	// PostgreSQL's timestamps span years 4713 BC to 294276 AD.
	return t.UTC(), err == nil && t.Year() >= 1 && t.Year() <= 9999
}
