package console_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// operation proposes an operation of action key for the Company
// companyID through the operations store, as an origin's proposal does,
// with terms; with unknown, it is claimed and given up, as the settle job
// does when it cannot learn whether the origin performed it.
func (r *rig) operation(t *testing.T, companyID int64, key, terms string, unknown bool) string {
	t.Helper()
	ctx := context.Background()
	store := operations.NewStore(r.env.Pool)
	now := time.Now()
	owner := operations.Owner{ClientID: "https://agent.example/client", UserID: "usr_console"}
	op, err := store.Propose(ctx, companyID, owner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: key, Terms: json.RawMessage(terms), Summary: "Exchange " + key},
		&operations.Request{Method: "POST", Path: "/orders/" + key, Body: []byte(`{}`)}, "", now)
	require.NoError(t, err)
	if !unknown {
		return op.OperationID
	}
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser,
		ApprovedAt: now.Unix(), InputType: "tap"}
	c, err := store.Claim(ctx, companyID, a, &verified.Facts{}, time.Minute, now)
	require.NoError(t, err)
	require.NotNil(t, c)
	ok, err := store.GiveUp(ctx, companyID, op.OperationID, c.ID, now)
	require.NoError(t, err)
	require.True(t, ok)
	return op.OperationID
}

// status is the status of operation id of companyID.
func (r *rig) status(t *testing.T, companyID int64, id string) string {
	t.Helper()
	rec, err := operations.NewStore(r.env.Pool).Get(context.Background(), companyID, id)
	require.NoError(t, err)
	return rec.Status
}

// audited returns the fields of the audit log's entries by staff of the
// rig Company for the console path, one entry expected.
func (r *rig) audited(t *testing.T, path string) []string {
	t.Helper()
	rows, err := r.env.Pool.Query(context.Background(), `SELECT fields FROM audit_log
		WHERE company_id = $1 AND actor_kind = 'staff' AND path = $2`, r.ID, "/console/"+r.Slug+path)
	require.NoError(t, err)
	entries, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	require.NoError(t, err)
	require.Len(t, entries, 1)
	return entries[0]
}

// TestOperationsPages: every role reads the list and an operation with
// its terms, approval and status; the filters keep what they name and
// show a bad one's error beside it; only owners and admins resolve, by the
// Company API's rules.
func TestOperationsPages(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	unknown := r.operation(t, r.ID, "o1", `{"order_id": "o1", "note": "<b>bold</b>"}`, true)
	proposed := r.operation(t, r.ID, "o2", `{"order_id": "o2"}`, false)

	for _, role := range []console.Role{console.RoleOwner, console.RoleAdmin, console.RoleAgent, console.RoleAuditor} {
		c := r.signIn(t, role)
		resp, body := r.get(t, c, "/operations")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", role, body)
		require.Contains(t, body, unknown)
		require.Contains(t, body, proposed)
		resp, body = r.get(t, c, "/operations/"+unknown)
		require.Equal(t, http.StatusOK, resp.StatusCode, role)
		require.Contains(t, body, "&lt;b&gt;bold&lt;/b&gt;", "terms are text")
		require.NotContains(t, body, "<b>bold</b>")
		require.Contains(t, body, "tap", "the approval's input type")
		canResolve := role == console.RoleOwner || role == console.RoleAdmin
		require.Equal(t, canResolve, strings.Contains(body, "/operations/"+unknown+"/resolve"), role)
	}

	c := r.signIn(t, console.RoleAuditor)
	resp, body := r.get(t, c, "/operations?status=unknown")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, unknown)
	require.NotContains(t, body, proposed)
	resp, body = r.get(t, c, "/operations?status=done&since=yesterday")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `id="status-error"`)
	require.Contains(t, body, `id="since-error"`)
	require.NotContains(t, body, unknown)

	// Agents and auditors read, and may not resolve.
	for _, role := range []console.Role{console.RoleAgent, console.RoleAuditor} {
		c := r.signIn(t, role)
		resp := r.post(t, c, "/operations/"+unknown+"/resolve", url.Values{"performed": {"yes"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, role)
		require.Equal(t, operations.StatusUnknown, r.status(t, r.ID, unknown), role)
	}

	admin := r.signIn(t, console.RoleAdmin)
	// The Company API's rules: performed is required, the note is text.
	resp = r.post(t, admin, "/operations/"+unknown+"/resolve", url.Values{"note": {"checked\u202e"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, operations.StatusUnknown, r.status(t, r.ID, unknown))
	resp = r.post(t, admin, "/operations/"+proposed+"/resolve", url.Values{"performed": {"yes"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, "only an unknown outcome is resolved")
	require.Equal(t, operations.StatusProposed, r.status(t, r.ID, proposed))

	resp = r.post(t, admin, "/operations/"+unknown+"/resolve", url.Values{"performed": {"no"}, "note": {"Not in the ledger."}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	rec, err := operations.NewStore(r.env.Pool).Get(context.Background(), r.ID, unknown)
	require.NoError(t, err)
	require.Equal(t, operations.StatusProposed, rec.Status, "not performed: a new approval is needed")
	require.Contains(t, rec.Resolution.By, "@staff.example", "the member is named")
	require.Equal(t, "Not in the ledger.", rec.Resolution.Note)
	require.Equal(t, []string{"performed", "by", "note"}, r.audited(t, "/operations/"+unknown+"/resolve"),
		"the resolution is in the audit log, by the member")
	resp = r.post(t, admin, "/operations/"+unknown+"/resolve", url.Values{"performed": {"yes"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, "resolved once")
}

// TestOperationsResolveFormBadFieldShown: a resolution without a choice
// is shown again with the error beside the choice, and the note kept.
func TestOperationsResolveFormBadFieldShown(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	unknown := r.operation(t, r.ID, "o1", `{"order_id": "o1"}`, true)
	c := r.signIn(t, console.RoleOwner)
	form := url.Values{"note": {"looked <everywhere>"}, "csrf": {r.csrf(t, c)}}
	resp, err := c.PostForm(r.url("/operations/"+unknown+"/resolve"), form)
	require.NoError(t, err)
	body := readBody(t, resp)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `id="performed-error"`)
	require.Contains(t, body, "looked &lt;everywhere&gt;")
}

// TestOperationsOtherCompany: another Company's operation answers 404 to
// every page and form, shows none of its data, is never listed or
// exported, and stays unknown.
func TestOperationsOtherCompany(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	_, otherID := r.company(t, "globex")
	theirs := r.operation(t, otherID, "secret", `{"order_id": "globex-secret-order"}`, true)
	mine := r.operation(t, r.ID, "o1", `{"order_id": "o1"}`, true)
	c := r.signIn(t, console.RoleOwner)

	resp, body := r.get(t, c, "/operations/"+theirs)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NotContains(t, body, "globex-secret-order")
	resp = r.post(t, c, "/operations/"+theirs+"/resolve", url.Values{"performed": {"yes"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, operations.StatusUnknown, r.status(t, otherID, theirs))
	for _, path := range []string{"/operations", "/operations?after=" + theirs, "/operations/export.csv"} {
		resp, body = r.get(t, c, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.NotContains(t, body, theirs, path)
	}
	_, body = r.get(t, c, "/operations")
	require.Contains(t, body, mine)
	resp, _ = r.get(t, c, "/operations/not-an-id!")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// TestOperationsResolveNeedsCSRF: a resolution without the session's
// CSRF token, or with another session's, is refused and changes nothing.
func TestOperationsResolveNeedsCSRF(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	unknown := r.operation(t, r.ID, "o1", `{"order_id": "o1"}`, true)
	c := r.signIn(t, console.RoleOwner)
	other := r.signIn(t, console.RoleOwner)
	for _, token := range []string{"", r.csrf(t, other), "forged"} {
		form := url.Values{"performed": {"yes"}}
		if token != "" {
			form.Set("csrf", token)
		}
		resp := r.postRaw(t, c, "/operations/"+unknown+"/resolve", form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Equal(t, operations.StatusUnknown, r.status(t, r.ID, unknown))
	}
}

// TestOperationsExport: the export is CSV of the operations the filters
// keep, every cell escaped, and none a spreadsheet would run as a
// formula.
func TestOperationsExport(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	formula := r.operation(t, r.ID, `=HYPERLINK("https://evil.example","x")`, `{"order_id": "o1", "note": "a,\"b\"\nc"}`, true)
	plain := r.operation(t, r.ID, "o2", `{"order_id": "o2"}`, false)
	c := r.signIn(t, console.RoleAuditor)

	resp, body := r.get(t, c, "/operations/export.csv")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/csv; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment")
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, "operation_id", rows[0][0])
	col := func(name string) int {
		for i, n := range rows[0] {
			if n == name {
				return i
			}
		}
		t.Fatalf("no column %s", name)
		return -1
	}
	byID := map[string][]string{rows[1][0]: rows[1], rows[2][0]: rows[2]}
	require.Equal(t, `'=HYPERLINK("https://evil.example","x")`, byID[formula][col("action_key")])
	require.JSONEq(t, `{"order_id": "o1", "note": "a,\"b\"\nc"}`, byID[formula][col("terms")])
	require.Equal(t, "unknown", byID[formula][col("status")])
	require.Equal(t, "user", byID[formula][col("approver")])
	require.Equal(t, "tap", byID[formula][col("input_type")])
	require.Equal(t, "proposed", byID[plain][col("status")])

	resp, body = r.get(t, c, "/operations/export.csv?status=proposed")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rows, err = csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, plain, rows[1][0])

	resp, body = r.get(t, c, "/operations/export.csv?status=done")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, html.UnescapeString(body), "status must be one of")
}

// TestOperationsPaged: a full page links to the next, which keeps the
// filters and starts after the page's last operation.
func TestOperationsPaged(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	_, err := r.env.Pool.Exec(context.Background(), `INSERT INTO operations (company_id, id, client_id, user_id,
			interface, target, action_key, revision, created_at, updated_at, expires_at)
		SELECT $1, 'op_' || lpad(i::text, 4, '0'), 'https://agent.example/client', 'usr', 'api', 'orders-api',
			'k' || i, 'r' || i, now() - (i * interval '1 second'), now(), now() + interval '1 day'
		FROM generate_series(1, 51) AS i`, r.ID)
	require.NoError(t, err)
	c := r.signIn(t, console.RoleAuditor)
	_, body := r.get(t, c, "/operations?target=orders-api")
	require.Contains(t, body, "op_0050")
	require.NotContains(t, body, "op_0051")
	next := regexp.MustCompile(`href="([^"]*after=[^"]*)"`).FindStringSubmatch(body)
	require.NotNil(t, next, "a link to the next page")
	u, err := url.Parse(html.UnescapeString(next[1]))
	require.NoError(t, err)
	require.Equal(t, "op_0050", u.Query().Get("after"))
	require.Equal(t, "orders-api", u.Query().Get("target"), "the filters are kept")
	_, body = r.get(t, c, "/operations?"+u.RawQuery)
	require.Contains(t, body, "op_0051")
	require.NotContains(t, body, "op_0050")
	require.NotContains(t, body, "after=", "the last page links to no next")
}
