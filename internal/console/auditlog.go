package console

import (
	"net/http"
	"strconv"

	"github.com/poppyhost/poppyhost/internal/audit"
)

// The audit log page: the Company's entries (internal/audit), newest
// first, a page at a time, as GET /company/v1/audit answers them. An
// entry names who made the change (an API key, an operator token or a
// staff member), the route, and the fields it changed, never values.

// auditPageSize is how many entries a page shows.
const auditPageSize = 50

type auditData struct {
	Entries []auditEntryView
	// Next is the URL of the page of older entries, "" on the last.
	Next string
	// First is the URL of the newest page, "" when this is it.
	First string
}

// auditEntryView is an entry as the page shows it.
type auditEntryView struct {
	audit.Entry
	// Who names the actor for people.
	Who string
}

// actorText names an entry's actor for people.
func actorText(a audit.Actor) string {
	id := strconv.FormatInt(a.ID, 10)
	switch a.Kind {
	case audit.KindStaff:
		return "staff " + a.Name + " (#" + id + ")"
	case audit.KindAPIKey:
		return "API key " + a.Name + " " + a.Prefix + "… (#" + id + ")"
	case audit.KindOperatorToken:
		return "platform operator " + a.Name + " (#" + id + ")"
	}
	return a.Kind + " #" + id
}

// auditPage shows a page of the Company's audit log, older than the entry
// ?before= names (the newest when absent); a ?before= that names no entry
// is a page that does not exist, as on the Feedback and Agents pages.
func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	var before int64
	if s := r.URL.Query().Get("before"); s != "" {
		var err error
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before <= 0 {
			c.renderError(w, r, http.StatusBadRequest, "That page of the audit log does not exist.")
			return
		}
	}
	entries, err := audit.NewStore(c.opts.Pool, 0).List(r.Context(), m.CompanyID, before, auditPageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := auditData{Entries: make([]auditEntryView, 0, len(entries))}
	for _, e := range entries {
		d.Entries = append(d.Entries, auditEntryView{Entry: e, Who: actorText(e.Actor)})
	}
	if len(entries) == auditPageSize {
		d.Next = c.base(m.CompanySlug) + "/audit?before=" + entries[len(entries)-1].ID
	}
	if before != 0 {
		d.First = c.base(m.CompanySlug) + "/audit"
	}
	c.render(w, r, http.StatusOK, "audit", d)
}
