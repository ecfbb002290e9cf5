package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// gatewayOperations drives the Operations extension through the gateway
// and the Company's audit of the operations.
func gatewayOperations(t *testing.T, c *contract, f *fixture, acme map[string]any, acmeKey string, g *gateway) {
	env, agent := f.env, f.agent
	origin, in, firstField, apis, token := g.origin, g.in, g.firstField, g.apis, g.token
	var r *peers.Response

	// The Operations extension (docs/operations-extension.md): acme
	// turns it on, and its origin answers an exchange with a proposal
	// until the request carries an approval, then performs it, declines
	// it, or takes longer than the API's timeout_seconds (1), so that
	// whether it took effect is unknown. The action key names the
	// method and the case, so each is its own operation.
	r = c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"operations":{"enabled":true}}`})
	assert.Equal(t, map[string]any{"enabled": true, "web": false}, r.JSON(t)["operations"])
	const exchanges = `openapi: 3.1.0
info: {title: Exchanges, version: '1'}
paths:
  /exchange:
    get: {responses: {'200': {description: OK}}}
    post: {responses: {'201': {description: Exchanged}}}
    put: {responses: {'201': {description: Exchanged}}}
    patch: {responses: {'201': {description: Exchanged}}}
    delete: {responses: {'201': {description: Exchanged}}}
`
	c.do(t, call{method: put, path: apis + "/exchanges", token: acmeKey, want: 201,
		body: map[string]any{"origin": origin.BaseURL(), "openapi": exchanges, "timeout_seconds": 1}})
	exchange := func(w http.ResponseWriter, r *http.Request) {
		claims, kase := peers.OriginClaims(r), r.URL.Query().Get("case")
		if claims.OperationID == "" {
			w.Header().Set("Content-Type", "application/poppy-proposal+json")
			_, _ = fmt.Fprintf(w, `{"action_key": "exchange o1 %s %s",
					"summary": "Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more.",
					"terms": {"order_id": "o1", "replacement_sku": "stormline-insulated-m",
						"price_difference": {"amount": "70.00", "currency": "USD"}}}`, r.Method, kase)
			return
		}
		switch kase {
		case "decline":
			w.Header().Set("Content-Type", "application/poppy-decline+json")
			_, _ = io.WriteString(w, `{"reason": "Only the account holder can exchange this order.",
					"alternative": {"instructions": "Exchange it in the Acme app.",
						"references": [{"type": "web", "url": "https://acme.example/orders/o1"}]}}`)
			return
		case "slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"exchange_id": "ex_1", "operation_id": %q, "revision": %q, "approver": %q}`,
			claims.OperationID, claims.Revision, claims.Approver)
	}
	declares := map[string]string{"Poppy-Extensions": `"operations";v="3"`}
	approving := func(op map[string]any) map[string]string {
		return map[string]string{"Poppy-Extensions": `"operations";v="3"`, "Poppy-Approval": fmt.Sprintf(
			`operation_id=%q, revision=%q, approver="user", approved_at=%d, input_type="tap"`,
			op["operation_id"], op["revision"], time.Now().Unix())}
	}
	operation := func(r *peers.Response) map[string]any {
		t.Helper()
		body := r.JSON(t)
		require.Equal(t, "approval_required", body["error"], "%s", r.Body)
		assert.Empty(t, r.Header.Get("WWW-Authenticate"), "approval_required is no authorization error")
		return body["operation"].(map[string]any)
	}
	exchangePath := "/exchange" // one segment: the document's {path}
	// proposed is an operation the loop below made, for the Company's
	// list of operations after it; opOrder holds them as made.
	type proposed struct {
		method, kase string
		op           map[string]any
		done         []byte // the stored answer of a performed one
	}
	made := map[string]*proposed{}
	var opOrder []string
	record := func(m, kase string, op map[string]any) *proposed {
		p := &proposed{method: m, kase: kase, op: op}
		made[op["operation_id"].(string)] = p
		opOrder = append(opOrder, op["operation_id"].(string))
		return p
	}
	for _, m := range []string{get, post, put, patch, del} {
		origin.Handle(m, exchangePath, exchange)
		var body any
		if m != get && m != del {
			body = `{"replacement_sku": "stormline-insulated-m"}`
		}
		at := func(kase string, header map[string]string, want int) call {
			return call{method: m, path: "/t/acme/api/exchanges" + exchangePath + "?case=" + kase,
				session: in("ops-alice", token), body: body, header: header, want: want}
		}

		// A request that does not declare the extension cannot take
		// the approval the action needs.
		r = c.do(t, at("perform", nil, 403))
		assert.Equal(t, "extension_required", r.JSON(t)["error"], "%s", r.Body)
		assert.Equal(t, "operations", r.JSON(t)["extension"])
		assert.Equal(t, `Bearer realm="poppyhost", error="extension_required", extension="operations"`, r.Header.Get("WWW-Authenticate"))

		// Declared: the operation, the same one when asked again.
		op := operation(c.do(t, at("perform", declares, 403)))
		assert.Equal(t, map[string]any{"order_id": "o1", "replacement_sku": "stormline-insulated-m",
			"price_difference": map[string]any{"amount": "70.00", "currency": "USD"}}, op["terms"])
		assert.Contains(t, op["summary"], "Stormline Insulated Jacket")
		expires, err := time.Parse(time.RFC3339, op["expires_at"].(string))
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(30*time.Minute), expires, time.Minute, "30 minutes by default")
		assert.Equal(t, op, operation(c.do(t, at("perform", declares, 403))))
		performed := record(m, "perform", op)

		// A malformed approval.
		r = c.do(t, at("perform", map[string]string{"Poppy-Approval": fmt.Sprintf(`operation_id=%q, revision=%q, approver="someone"`,
			op["operation_id"], op["revision"])}, 400))
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])

		// Approved: performed once, with the approval in
		// Poppy-Verified and one Idempotency-Key per revision.
		calls := origin.Calls(m, exchangePath)
		done := c.do(t, at("perform", approving(op), 201))
		assert.Equal(t, calls+1, origin.Calls(m, exchangePath))
		// The settle job of an earlier case may call the origin too:
		// find this call by its operation.
		var got peers.Received
		for _, rec := range origin.Received() {
			if rec.Method == m && rec.Claims != nil && rec.Claims.OperationID == op["operation_id"] {
				got = rec
			}
		}
		require.NoError(t, got.VerifyErr)
		require.NotNil(t, got.Claims)
		assert.Equal(t, []string{op["operation_id"].(string), op["revision"].(string), "user"},
			[]string{got.Claims.OperationID, got.Claims.Revision, got.Claims.Approver})
		assert.Equal(t, op["operation_id"].(string)+"."+op["revision"].(string), got.Header.Get("Idempotency-Key"))
		assert.Empty(t, got.Header.Get("Poppy-Approval"))
		assert.Equal(t, op["operation_id"], done.JSON(t)["operation_id"])
		performed.done = done.Body
		// Retried: the stored answer, the origin not called again.
		again := c.do(t, at("perform", approving(op), 201))
		assert.Equal(t, string(done.Body), string(again.Body))
		assert.Equal(t, calls+1, origin.Calls(m, exchangePath))

		// Declined by the origin at perform time.
		op = operation(c.do(t, at("decline", declares, 403)))
		record(m, "decline", op)
		r = c.do(t, at("decline", approving(op), 403))
		assert.Equal(t, map[string]any{"error": "approval_declined", "operation_id": op["operation_id"], "revision": op["revision"],
			"reason": "Only the account holder can exchange this order.",
			"alternative": map[string]any{"instructions": "Exchange it in the Acme app.",
				"references": []any{map[string]any{"type": "web", "url": "https://acme.example/orders/o1"}}}}, r.JSON(t))
		assert.Empty(t, r.Header.Get("WWW-Authenticate"))

		// The origin outlasts timeout_seconds: whether it took effect
		// is unknown, so the operation is still being performed, for
		// this request and its retries.
		op = operation(c.do(t, at("slow", declares, 403)))
		record(m, "slow", op)
		for range 2 {
			r = c.do(t, at("slow", approving(op), 503))
			assert.Equal(t, "unavailable", r.JSON(t)["error"])
			assert.Equal(t, "5", r.Header.Get("Retry-After"))
		}
		origin.Handle(m, exchangePath, nil)
	}
	// poppy.json lists the extension next to acme's own.
	opsDoc := c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
	assert.Equal(t, map[string]any{"version": "3"}, opsDoc["extensions"].(map[string]any)["operations"])
	assert.Len(t, opsDoc["extensions"], len(acme["extensions"].(map[string]any))+1)
	c.do(t, call{method: del, path: apis + "/exchanges", token: acmeKey, want: 204})
	r = c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200, body: `{"operations":null}`})
	assert.Equal(t, map[string]any{"enabled": false, "web": false}, r.JSON(t)["operations"])
	assert.NotContains(t, c.do(t, call{method: get, host: "acme.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)["extensions"], "operations")

	// The Company's audit of those operations, on the Company API and
	// the admin API (also once the extension is off again): newest
	// first, each with its revisions, approval and stored answer.
	type opPage struct {
		Operations []map[string]any `json:"operations"`
		Next       *string          `json:"next"`
	}
	companyOps, adminOps := "/company/v1/operations", "/admin/v1/companies/acme/operations"
	r = c.do(t, call{method: get, path: companyOps, token: acmeKey, want: 200})
	assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	require.Contains(t, r.JSON(t), "next")
	page := decode[opPage](t, r)
	assert.Nil(t, page.Next, "the page is not full")
	ids := make([]string, 0, len(page.Operations))
	for _, rec := range page.Operations {
		ids = append(ids, rec["operation_id"].(string))
	}
	newestFirst := slices.Clone(opOrder)
	slices.Reverse(newestFirst)
	require.Equal(t, newestFirst, ids)
	sameTime := func(want, got any, msgAndArgs ...any) {
		t.Helper()
		w, err := time.Parse(time.RFC3339, want.(string))
		require.NoError(t, err)
		g, err := time.Parse(time.RFC3339, got.(string))
		require.NoError(t, err)
		assert.True(t, w.Equal(g), "%v != %v %v", want, got, msgAndArgs)
	}
	byID := map[string]map[string]any{}
	for _, rec := range page.Operations {
		id := rec["operation_id"].(string)
		byID[id] = rec
		p := made[id]
		name := p.method + " " + p.kase
		assert.Equal(t, "api", rec["interface"], name)
		assert.Equal(t, "exchanges", rec["target"], name)
		assert.Equal(t, "exchange o1 "+name, rec["action_key"], name)
		assert.Equal(t, agent.ClientID, rec["client_id"], name)
		assert.Equal(t, "usr_test", rec["user_id"], name)
		assert.Regexp(t, `^[1-9][0-9]*$`, rec["account"], "%s: proposed signed in", name)
		assert.Equal(t, p.op["revision"], rec["revision"], name)
		revs := rec["revisions"].([]any)
		require.Len(t, revs, 1, name)
		rev := revs[0].(map[string]any)
		assert.Equal(t, p.op["revision"], rev["revision"], name)
		assert.Equal(t, p.op["terms"], rev["terms"], name)
		assert.Equal(t, p.op["summary"], rev["summary"], name)
		sameTime(p.op["expires_at"], rev["expires_at"], name)
		assert.NotContains(t, rev, "replaced_at", name)
		switch p.kase {
		case "perform":
			assert.Equal(t, "performed", rec["status"], name)
			assert.NotContains(t, rev, "declined_at", name)
			assert.Contains(t, rec, "performed_at", name)
			approval := maps.Clone(rec["approval"].(map[string]any))
			assert.InDelta(t, time.Now().Unix(), approval["approved_at"], 120, name)
			delete(approval, "approved_at")
			assert.Equal(t, map[string]any{"operation_id": id, "revision": p.op["revision"], "approver": "user",
				"input_type": "tap"}, approval, name)
			resp := rec["response"].(map[string]any)
			assert.Equal(t, float64(201), resp["status"], name)
			assert.Equal(t, "application/json", resp["content_type"], name)
			body, err := base64.StdEncoding.DecodeString(resp["body"].(string))
			require.NoError(t, err, "%s: the body is base64", name)
			assert.Equal(t, string(p.done), string(body), name)
		case "decline":
			// Declined: nothing performed, waiting for a new revision.
			assert.Equal(t, "proposed", rec["status"], name)
			assert.Contains(t, rev, "declined_at", name)
			assert.NotContains(t, rec, "approval", name)
			assert.NotContains(t, rec, "response", name)
			assert.NotContains(t, rec, "performed_at", name)
		case "slow":
			// Performing until its settle job gets a final answer.
			assert.Contains(t, []any{"performing", "performed"}, rec["status"], name)
			assert.Equal(t, p.op["revision"], rec["approval"].(map[string]any)["revision"], name)
		}
	}
	// The operator sees the same list.
	r = c.do(t, call{method: get, path: adminOps + "?limit=200", token: admin, want: 200})
	admPage := decode[opPage](t, r)
	assert.Nil(t, admPage.Next)
	require.Len(t, admPage.Operations, len(ids))
	for i, rec := range admPage.Operations {
		assert.Equal(t, ids[i], rec["operation_id"])
		if made[ids[i]].kase != "slow" {
			assert.Equal(t, byID[ids[i]], rec)
		}
	}

	// Paging: a full page's next is its last operation_id, the
	// after of the next page.
	page = decode[opPage](t, c.do(t, call{method: get, path: companyOps + "?limit=1", token: acmeKey, want: 200}))
	require.Len(t, page.Operations, 1)
	assert.Equal(t, ids[0], page.Operations[0]["operation_id"])
	require.NotNil(t, page.Next)
	assert.Equal(t, ids[0], *page.Next)
	page = decode[opPage](t, c.do(t, call{method: get, path: companyOps + "?limit=1&after=" + *page.Next, token: acmeKey, want: 200}))
	require.Len(t, page.Operations, 1)
	assert.Equal(t, ids[1], page.Operations[0]["operation_id"])
	assert.Equal(t, ids[1], *page.Next)
	var walked []string
	for q := "limit=4"; ; {
		page = decode[opPage](t, c.do(t, call{method: get, path: adminOps + "?" + q, token: admin, want: 200}))
		for _, rec := range page.Operations {
			walked = append(walked, rec["operation_id"].(string))
		}
		if page.Next == nil {
			break
		}
		require.Len(t, page.Operations, 4)
		q = "limit=4&after=" + url.QueryEscape(*page.Next)
	}
	assert.Equal(t, ids, walked)
	r = c.do(t, call{method: get, path: companyOps + "?after=" + ids[len(ids)-1], token: acmeKey, want: 200})
	assert.JSONEq(t, `{"operations": [], "next": null}`, string(r.Body))
	r = c.do(t, call{method: get, path: companyOps + "?after=op_nosuch", token: acmeKey, want: 200})
	assert.JSONEq(t, `{"operations": [], "next": null}`, string(r.Body))

	// Each Company sees its own operations only.
	minimalKey := decode[struct {
		Key string `json:"key"`
	}](t, c.do(t, call{method: post, path: "/admin/v1/companies/minimal/api-keys", token: admin, want: 201,
		body: `{"name":"operations"}`})).Key
	for _, k := range []call{
		{path: companyOps, token: minimalKey},
		{path: companyOps + "?after=" + ids[1], token: minimalKey},
		{path: "/admin/v1/companies/minimal/operations", token: admin},
	} {
		k.method, k.want = get, 200
		assert.JSONEq(t, `{"operations": [], "next": null}`, string(c.do(t, k).Body), k.path)
	}

	// A bad limit names it, on both APIs.
	for _, q := range []string{"limit=0", "limit=201", "limit=ten", "limit=-1"} {
		for _, k := range []call{{path: adminOps + "?" + q, token: admin}, {path: companyOps + "?" + q, token: acmeKey}} {
			k.method, k.want, k.docRejects = get, 400, true
			assert.Equal(t, "limit", firstField(c.do(t, k)), q)
		}
	}
	// One operation, on both APIs, and another Company's not at all.
	for _, k := range []call{{path: companyOps + "/" + ids[0], token: acmeKey}, {path: adminOps + "/" + ids[0], token: admin}} {
		k.method, k.want = get, 200
		r = c.do(t, k)
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		assert.Equal(t, ids[0], r.JSON(t)["operation_id"])
		assert.NotEmpty(t, r.JSON(t)["revisions"])
	}
	c.do(t, call{method: get, path: companyOps + "/" + ids[0], token: minimalKey, want: 404})
	c.do(t, call{method: get, path: companyOps + "/op_nosuch", token: acmeKey, want: 404})
	c.do(t, call{method: get, path: adminOps + "/op_nosuch", token: admin, want: 404})
	c.do(t, call{method: get, path: companyOps + "/" + ids[0], want: 401, docRejects: true})
	c.do(t, call{method: get, path: adminOps + "/" + ids[0], want: 401, docRejects: true})

	// Resolving an unknown outcome (docs/operations-extension.md 8):
	// an operation the settle job gave up on, one on each API.
	var performedID string
	var unknown []string
	for _, id := range ids {
		switch made[id].kase {
		case "perform":
			performedID = id
		case "decline":
			unknown = append(unknown, id)
		}
	}
	require.NotEmpty(t, performedID)
	require.GreaterOrEqual(t, len(unknown), 2)
	ctx := context.Background()
	acmeCo, err := env.Platform.Tenants.Get(ctx, "acme")
	require.NoError(t, err)
	for i, base := range []struct{ path, token string }{{companyOps, acmeKey}, {adminOps, admin}} {
		_, err := env.Pool.Exec(ctx, `UPDATE operations SET status = 'unknown' WHERE company_id = $1 AND id = $2`,
			acmeCo.ID, unknown[i])
		require.NoError(t, err)
		resolve := base.path + "/" + unknown[i] + "/resolve"
		r = c.do(t, call{method: post, path: resolve, token: base.token, want: 400, docRejects: true,
			body: map[string]any{"by": "ops"}})
		assert.Equal(t, "performed", firstField(r))
		c.do(t, call{method: post, path: resolve, token: base.token, want: 400, docRejects: true,
			body: map[string]any{"performed": true, "by": "ops", "unknown_member": 1}})
		c.do(t, call{method: post, path: resolve, token: base.token, want: 413,
			body: padded(t, map[string]any{"performed": true, "by": "ops"}, 256<<10)})
		c.do(t, call{method: post, path: resolve, token: base.token, want: 415, docRejects: true, ctype: "text/plain",
			body: `{"performed": true, "by": "ops"}`})
		c.do(t, call{method: post, path: resolve, want: 401, docRejects: true, body: map[string]any{"performed": true, "by": "ops"}})
		c.do(t, call{method: post, path: base.path + "/op_nosuch/resolve", token: base.token, want: 404,
			body: map[string]any{"performed": true, "by": "ops"}})
		c.do(t, call{method: post, path: base.path + "/" + performedID + "/resolve", token: base.token, want: 409,
			body: map[string]any{"performed": true, "by": "ops"}})
		// Who resolved it and why are read by the Company's people: text
		// that could read otherwise than it is is refused.
		r = c.do(t, call{method: post, path: resolve, token: base.token, want: 400,
			body: map[string]any{"performed": true, "by": "ops\u202e"}})
		assert.Equal(t, "by", firstField(r))
		r = c.do(t, call{method: post, path: resolve, token: base.token, want: 400,
			body: map[string]any{"performed": true, "by": "ops", "note": "checked\u200b"}})
		assert.Equal(t, "note", firstField(r))
		r = c.do(t, call{method: post, path: resolve, token: base.token, want: 200,
			body: map[string]any{"performed": i == 0, "by": "ops@acme", "note": "checked the order system"}})
		res := r.JSON(t)["resolution"].(map[string]any)
		assert.Equal(t, []any{i == 0, "ops@acme"}, []any{res["performed"], res["by"]})
		c.do(t, call{method: post, path: resolve, token: base.token, want: 409,
			body: map[string]any{"performed": true, "by": "ops"}})
	}

	// Filters (the console's Operations page lists the same way): each
	// keeps only what it names; a bad one is refused by name.
	for _, base := range []struct{ path, token string }{{companyOps, acmeKey}, {adminOps, admin}} {
		r = c.do(t, call{method: get, path: base.path + "?status=performed&interface=api&target=exchanges&since=2000-01-01",
			token: base.token, want: 200})
		filtered := decode[opPage](t, r)
		require.NotEmpty(t, filtered.Operations)
		for _, rec := range filtered.Operations {
			assert.Equal(t, "performed", rec["status"])
		}
		r = c.do(t, call{method: get, path: base.path + "?client_id=https%3A%2F%2Fnobody.test%2F&until=2000-01-01",
			token: base.token, want: 200})
		assert.Empty(t, decode[opPage](t, r).Operations)
		for param, bad := range map[string]string{"status": "done", "interface": "fax", "since": "yesterday",
			"until": "2026-13-01"} {
			r = c.do(t, call{method: get, path: base.path + "?" + param + "=" + bad, token: base.token, want: 400,
				docRejects: param == "status" || param == "interface"})
			assert.Equal(t, param, firstField(r))
		}
	}

	c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/operations", token: admin, want: 404})
	r = c.do(t, call{method: get, path: adminOps, want: 401, docRejects: true})
	assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
	c.do(t, call{method: get, path: adminOps, token: bogus, want: 401})
	c.do(t, call{method: get, path: adminOps, token: acmeKey, want: 401})
	r = c.do(t, call{method: get, path: companyOps, want: 401, docRejects: true})
	assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
	c.do(t, call{method: get, path: companyOps, token: bogus, want: 401})
	c.do(t, call{method: get, path: companyOps, token: admin, want: 401})
}
