package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Operations page (docs/console.md, "Operations"): the Company's
// operations, filtered and paged as the Company API's GET /operations
// (operations.ParseFilter, Store.Search), one with its revisions,
// approvals and outcome, the resolution of an unknown outcome by the
// Company API's rules (Store.ResolveUnknown), and a CSV export.

// operationsPageSize is how many operations a page of the list shows.
const operationsPageSize = 50

// operationsRoutes are the Operations page's: every role reads them;
// owners and admins resolve.
func (c *Console) operationsRoutes(r chi.Router) {
	r.Use(c.allow(RoleAdmin, RoleAgent, RoleAuditor))
	r.Get("/operations", c.operationsList)
	r.Get("/operations/export.csv", c.operationsExport)
	r.Get("/operations/{id}", c.operationDetail)
	r.With(c.allow(RoleAdmin)).Post("/operations/{id}/resolve", c.operationResolve)
}

// operationFilter is the list's filter form, as the member typed it.
type operationFilter struct {
	Status, Interface, ClientID, Target, Since, Until string
}

// operationsView is the data of the list.
type operationsView struct {
	Filter                operationFilter
	Statuses, Interfaces  []string
	Errors                map[string]string
	Operations            []*operations.Record
	Next, Export, Cleared string
}

// fieldErrors maps each field of an invalid_request error to its
// message, to show beside the field; nil for any other error.
func fieldErrors(err error) map[string]string {
	e, ok := errors.AsType[*httpx.Error](err)
	if !ok || e.Code != httpx.CodeInvalidRequest || len(e.Fields) == 0 {
		return nil
	}
	out := make(map[string]string, len(e.Fields))
	for _, f := range e.Fields {
		if _, seen := out[f.Field]; !seen {
			out[f.Field] = f.Message
		}
	}
	return out
}

func (c *Console) operationsList(w http.ResponseWriter, r *http.Request) {
	ctx, q := r.Context(), r.URL.Query()
	co := tenant.FromContext(ctx)
	base := c.base(co.Slug) + "/operations"
	v := operationsView{Statuses: operations.Statuses, Interfaces: operations.Interfaces,
		Filter: operationFilter{Status: q.Get("status"), Interface: q.Get("interface"), ClientID: q.Get("client_id"),
			Target: q.Get("target"), Since: q.Get("since"), Until: q.Get("until")},
		Cleared: base}
	f, err := operations.ParseFilter(q)
	v.Errors = fieldErrors(err)
	after := q.Get("after")
	if after != "" && !sessions.ValidID(after) {
		if v.Errors == nil {
			v.Errors = map[string]string{}
		}
		v.Errors["after"] = "must be an operation ID"
	}
	if len(v.Errors) > 0 {
		c.render(w, r, http.StatusBadRequest, "operations", v)
		return
	}
	list, err := c.opts.Operations.Search(ctx, co.ID, f, after, operationsPageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Operations = list
	filterQuery := url.Values{}
	for _, k := range []string{"status", "interface", "client_id", "target", "since", "until"} {
		if s := q.Get(k); s != "" {
			filterQuery.Set(k, s)
		}
	}
	v.Export = base + "/export.csv?" + filterQuery.Encode()
	if len(list) == operationsPageSize {
		next := url.Values{}
		for k, vs := range filterQuery {
			next[k] = vs
		}
		next.Set("after", list[len(list)-1].OperationID)
		v.Next = base + "?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "operations", v)
}

// operationView is the data of one operation's page.
type operationView struct {
	Op        *operations.Record
	Approvals []operations.ApprovalEntry
	// Terms are each revision's terms, indented, by revision.
	Terms map[string]string
	// Response is the origin's answer's body as text, when it is text.
	Response string
	// CanResolve: the operation is unknown and the member may resolve it.
	CanResolve bool
	Resolve    resolveForm
	// Notice and Problem are said above the page.
	Notice, Problem string
}

// resolveForm is the resolution form as the member filled it, with the
// error of each field.
type resolveForm struct {
	Performed, Note string
	Errors          map[string]string
}

// record returns the operation of the path's id for the member's
// Company, or answers the 404 page: another Company's operation is no
// different from none.
func (c *Console) record(w http.ResponseWriter, r *http.Request) (*operations.Record, bool) {
	ctx, id := r.Context(), chi.URLParam(r, "id")
	if sessions.ValidID(id) {
		rec, err := c.opts.Operations.Get(ctx, tenant.FromContext(ctx).ID, id)
		if err == nil {
			return rec, true
		}
		if !errors.Is(err, operations.ErrNotFound) {
			c.fail(w, r, err)
			return nil, false
		}
	}
	c.renderError(w, r, http.StatusNotFound, "The Company has no such operation.")
	return nil, false
}

func (c *Console) operationDetail(w http.ResponseWriter, r *http.Request) {
	rec, ok := c.record(w, r)
	if !ok {
		return
	}
	notice := ""
	if r.URL.Query().Get("resolved") != "" && rec.Resolution != nil {
		notice = "The operation is resolved."
	}
	c.showOperation(w, r, http.StatusOK, rec, resolveForm{}, notice, "")
}

// showOperation renders rec's page with status.
func (c *Console) showOperation(w http.ResponseWriter, r *http.Request, status int, rec *operations.Record,
	form resolveForm, notice, problem string) {
	ctx := r.Context()
	approvals, err := c.opts.Operations.Approvals(ctx, tenant.FromContext(ctx).ID, rec.OperationID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	m := memberFrom(ctx)
	v := operationView{Op: rec, Approvals: approvals, Terms: map[string]string{}, Resolve: form,
		CanResolve: rec.Status == operations.StatusUnknown && (m.Role == RoleOwner || m.Role == RoleAdmin),
		Notice:     notice, Problem: problem}
	for _, rev := range rec.Revisions {
		v.Terms[rev.Revision] = indentJSON(rev.Terms)
	}
	if rec.Response != nil {
		v.Response = responseText(rec.Response)
	}
	c.render(w, r, status, "operation", v)
}

// indentJSON is raw indented for reading, or raw as it is when it does
// not parse.
func indentJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// maxShownResponse bounds the part of an origin's answer the page shows.
const maxShownResponse = 8 << 10

// responseText is the origin's answer's body as text to show: JSON
// indented, other UTF-8 text as it is, cut at maxShownResponse; "" for a
// body that is not text.
func responseText(resp *operations.Response) string {
	body := resp.Body
	if httpx.IsJSON(resp.ContentType) {
		body = []byte(indentJSON(body))
	}
	if !utf8.Valid(body) {
		return ""
	}
	if len(body) > maxShownResponse {
		return strings.ToValidUTF8(string(body[:maxShownResponse]), "") + "\n…"
	}
	return string(body)
}

// resolvedBy names the member in a resolution's by: their name and email,
// within the 200 characters the Company API allows.
func resolvedBy(m Member) string {
	by := fmt.Sprintf("%s <%s> (console)", m.Name, m.Email)
	if utf8.RuneCountInString(by) > 200 {
		by = m.Email
	}
	return by
}

func (c *Console) operationResolve(w http.ResponseWriter, r *http.Request) {
	rec, ok := c.record(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	form := resolveForm{Performed: r.PostFormValue("performed"), Note: r.PostFormValue("note")}
	req := &operations.ResolveRequest{By: resolvedBy(memberFrom(ctx)), Note: form.Note}
	switch form.Performed {
	case "yes":
		req.Performed = new(true)
	case "no":
		req.Performed = new(false)
	}
	_, err := c.opts.Operations.ResolveUnknown(ctx, tenant.FromContext(ctx).ID, rec.OperationID, req, c.now())
	if err == nil {
		http.Redirect(w, r, c.base(tenant.FromContext(ctx).Slug)+"/operations/"+rec.OperationID+"?resolved=1",
			http.StatusSeeOther)
		return
	}
	e, ok := errors.AsType[*httpx.Error](err)
	if !ok {
		c.fail(w, r, err)
		return
	}
	switch e.Code {
	case httpx.CodeInvalidRequest:
		form.Errors = fieldErrors(err)
		if msg, ok := form.Errors["performed"]; ok {
			form.Errors["performed"] = "Choose whether it was performed: " + msg
		}
		c.showOperation(w, r, http.StatusBadRequest, rec, form, "", "The operation was not resolved: see below.")
	case httpx.CodeNotFound:
		c.renderError(w, r, http.StatusNotFound, "The Company has no such operation.")
	default:
		// Conflict: someone resolved it first, or it is not unknown.
		if now, err := c.opts.Operations.Get(ctx, tenant.FromContext(ctx).ID, rec.OperationID); err == nil {
			rec = now
		}
		c.showOperation(w, r, e.Status(), rec, form, "", "Only an operation whose outcome is unknown is resolved: this one is "+rec.Status+".")
	}
}

// operationsExport streams the operations the list's filters keep as
// CSV, newest first, a page at a time (Store.Each).
func (c *Console) operationsExport(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	co := tenant.FromContext(ctx)
	f, err := operations.ParseFilter(r.URL.Query())
	if err != nil {
		var bad []string
		for field, msg := range fieldErrors(err) {
			bad = append(bad, field+" "+msg)
		}
		slices.Sort(bad)
		c.renderError(w, r, http.StatusBadRequest, "The export's filters are not valid: "+strings.Join(bad, "; ")+".")
		return
	}
	name := fmt.Sprintf("operations-%s-%s.csv", co.Slug, c.now().UTC().Format("20060102-150405"))
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	out := newCSVWriter(w)
	if err := out.row(operationColumns...); err != nil {
		return
	}
	n := 0
	err = c.opts.Operations.Each(ctx, co.ID, f, func(rec *operations.Record) error {
		if err := out.row(operationCells(rec)...); err != nil {
			return err
		}
		if n++; n%operationsPageSize == 0 {
			return out.flush()
		}
		return nil
	})
	if err == nil {
		err = out.flush()
	}
	if err != nil {
		// The answer has begun: end it unfinished, so the download fails
		// rather than passing for the whole export.
		c.log.WarnContext(ctx, "console: operations export cut short", "error", err)
		panic(http.ErrAbortHandler)
	}
}

// operationColumns are the export's columns.
var operationColumns = []string{"operation_id", "status", "interface", "target", "action_key", "client_id",
	"user_id", "account", "created_at", "performed_at", "expires_at", "revision", "revisions", "summary", "terms",
	"approver", "approved_at", "input_type", "reference", "response_status", "resolution_performed",
	"resolution_by", "resolution_at", "resolution_note"}

// operationCells is rec as a row of operationColumns: its current
// revision's summary and terms, the approval it was performed under, and
// how the Company resolved it.
func operationCells(rec *operations.Record) []string {
	when := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	row := []string{rec.OperationID, rec.Status, rec.Interface, rec.Target, rec.ActionKey, rec.ClientID,
		rec.UserID, rec.Account, when(&rec.CreatedAt), when(rec.PerformedAt), when(&rec.ExpiresAt), rec.Revision,
		strconv.Itoa(len(rec.Revisions)), "", "", "", "", "", "", "", "", "", "", ""}
	for _, rev := range rec.Revisions {
		if rev.Revision == rec.Revision {
			row[13], row[14] = rev.Summary, string(rev.Terms)
		}
	}
	if a := rec.Approval; a != nil {
		row[15], row[17], row[18] = a.Approver, a.InputType, a.Reference
		if a.ApprovedAt != 0 {
			row[16] = time.Unix(a.ApprovedAt, 0).UTC().Format(time.RFC3339)
		}
	}
	if rec.Response != nil {
		row[19] = strconv.Itoa(rec.Response.Status)
	}
	if res := rec.Resolution; res != nil {
		row[20], row[21], row[22], row[23] = strconv.FormatBool(res.Performed), res.By, when(&res.At), res.Note
	}
	return row
}
