package audit

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/jobs"
)

// Entry is one change as the API shows it.
type Entry struct {
	// ID is the entry's cursor: a page's next is the last entry's ID.
	ID      string    `json:"id"`
	At      time.Time `json:"at"`
	Company string    `json:"company,omitempty"`
	Actor   Actor     `json:"actor"`
	// Action is the method and the route, such as
	// "PATCH /admin/v1/companies/{slug}"; Path is the request's path.
	Action string   `json:"action"`
	Path   string   `json:"path"`
	Fields []string `json:"fields"`
}

// Store reads and sweeps the audit log.
type Store struct {
	db        db.Executor
	retention time.Duration
}

// DefaultRetention is how long entries are kept unless configured.
const DefaultRetention = 90 * 24 * time.Hour

// NewStore returns a Store on exec keeping entries for retention
// [DefaultRetention when zero].
func NewStore(exec db.Executor, retention time.Duration) *Store {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Store{db: exec, retention: retention}
}

// List returns up to limit entries, newest first, older than the entry
// before (every entry when before is 0): of one Company, or of every
// Company and the operator's own changes when companyID is 0.
func (s *Store) List(ctx context.Context, companyID, before int64, limit int) ([]Entry, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	// Two statements, not one with "$1 = 0 OR company_id = $1": a generic
	// plan of that could not use audit_log_company for one Company's page.
	const columns = `SELECT id, at, company_slug, actor_kind, actor_id, actor_prefix, actor_name,
		action, path, fields FROM audit_log`
	var (
		rows pgx.Rows
		err  error
	)
	if companyID == 0 {
		rows, err = s.db.Query(ctx, columns+` WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, limit)
	} else {
		rows, err = s.db.Query(ctx, columns+` WHERE company_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`,
			companyID, before, limit)
	}
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var (
			e  Entry
			id int64
		)
		err := row.Scan(&id, &e.At, &e.Company, &e.Actor.Kind, &e.Actor.ID, &e.Actor.Prefix, &e.Actor.Name,
			&e.Action, &e.Path, &e.Fields)
		e.ID = strconv.FormatInt(id, 10)
		return e, err
	})
}

// ServeList answers a GET of the audit log of the Company companyID (of
// everything when 0): {"entries": [...], "next": cursor}, newest first,
// paged by ?before=cursor and ?limit= (1 to 500, 100 by default).
func (s *Store) ServeList(w http.ResponseWriter, r *http.Request, companyID int64) {
	limit, err := httpx.QueryInt(r, "limit", 100, 1, 500)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var before int64
	if raw := r.URL.Query().Get("before"); raw != "" {
		before, err = strconv.ParseInt(raw, 10, 64)
		if err != nil || before <= 0 {
			httpx.WriteError(w, r, httpx.Invalid(httpx.FieldError{Field: "before", Message: "must be the next of an earlier page"}))
			return
		}
	}
	entries, err := s.List(r.Context(), companyID, before, int(limit))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := struct {
		Entries []Entry `json:"entries"`
		Next    string  `json:"next,omitempty"`
	}{Entries: entries}
	if out.Entries == nil {
		out.Entries = []Entry{}
	}
	if len(entries) == int(limit) {
		out.Next = entries[len(entries)-1].ID
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// Sweep deletes the entries older than the retention as of now, in
// batches.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.db, "audit_log", "audit_log.at < $1", now.Add(-s.retention))
}

// Sweeps are the package's periodic work: forgetting entries past the
// retention, every hour.
func Sweeps(s *Store) []jobs.Sweep {
	return []jobs.Sweep{{Name: "audit_sweep", Every: time.Hour, Run: s.Sweep}}
}
