package website_test

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/operations/opstest"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
	"github.com/poppyhost/poppyhost/internal/website"
)

// Operations on the Company's website (extension 4 and 6, "Websites";
// 8.2): the jacket exchange submitted from the order page of the website,
// through the website proxy, the browser joined to a Session as in spec 6,
// and the Personal Agent's requests to {issuer}/poppy/operations.

const (
	webExchangePath = "/orders/o1/exchange"
	webExchangeForm = "item_id=itm_4Qa&replacement_sku=stormline-insulated-m&note=a+b%26c"
	webFormType     = "application/x-www-form-urlencoded"
	webUser         = "usr_ada"
)

// webExchangeOrigin is the website's origin under the origin contract:
// without an approval it proposes the exchange the form asks for; with
// one it performs once per Idempotency-Key and redirects to the exchange.
type webExchangeOrigin struct {
	performed atomic.Int32
	// decline and reprice answer an approved request with a decline, or
	// with new terms (the price went up).
	decline, reprice atomic.Bool
	mu               sync.Mutex
	keys             map[string]string // Location by Idempotency-Key
}

func (x *webExchangeOrigin) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(raw))
	c := peers.OriginClaims(r)
	if c.OperationID == "" {
		w.Header().Set("Content-Type", operations.ProposalType)
		fmt.Fprintf(w, `{"action_key": "exchange o1 itm_4Qa", "summary": "Exchange the jacket, $70.00 more.",
			"terms": {"order_id": "o1", "replacement_sku": %q, "price_difference": {"amount": "70.00", "currency": "USD"}}}`,
			form.Get("replacement_sku"))
		return
	}
	if x.reprice.Load() {
		w.Header().Set("Content-Type", operations.ProposalType)
		_, _ = io.WriteString(w, `{"action_key": "exchange o1 itm_4Qa", "terms": {"order_id": "o1",
			"replacement_sku": "stormline-insulated-m", "price_difference": {"amount": "80.00", "currency": "USD"}}}`)
		return
	}
	if x.decline.Load() {
		w.Header().Set("Content-Type", operations.DeclineType)
		_, _ = io.WriteString(w, `{"reason": "Not <b>this</b> one."}`)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	loc, ok := x.keys[r.Header.Get("Idempotency-Key")]
	if !ok {
		loc = fmt.Sprintf("/orders/o1/exchanges/ex_%d", x.performed.Add(1))
		x.keys[r.Header.Get("Idempotency-Key")] = loc
	}
	w.Header().Set("Location", loc)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusSeeOther)
	_, _ = io.WriteString(w, "exchanged")
}

// webOps is a website with operations and its Personal Agent.
type webOps struct {
	*webSite
	x    *webExchangeOrigin
	hook *opstest.Hook
}

// newWebOps starts a website whose Company has operations.web on and an
// approval hook, and an agent whose client metadata declares the
// extension unless undeclared.
func newWebOps(t *testing.T, name string, undeclared bool) *webOps {
	t.Helper()
	s := &webOps{webSite: newWebSite(t, name, nil), x: &webExchangeOrigin{keys: map[string]string{}}}
	if !undeclared {
		md := s.agent.Metadata()
		md["extensions"] = map[string]any{"operations": map[string]any{"version": "3"}}
		s.agent.SetMetadata(md)
	}
	s.origin.Handle(http.MethodPost, webExchangePath, s.x.serve)
	s.hook = opstest.StartHook(t, s.env, "hook-"+name+".test", s.issuer)
	s.setOperations(t, map[string]any{"enabled": true, "web": true, "approval_hook": s.hook.URL})
	return s
}

func (s *webOps) setOperations(t *testing.T, ops map[string]any) {
	t.Helper()
	resp := s.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+s.slug, map[string]any{"operations": ops})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// exchange submits the exchange form from browser b.
func (s *webOps) exchange(t *testing.T, b *webBrowser) *peers.Response {
	t.Helper()
	return s.do(t, b.client, http.MethodPost, webExchangePath, webExchangeForm,
		"Content-Type", webFormType, "Accept", "text/html,*/*;q=0.8")
}

// endpoint sends {"ref"} (or raw body) to {issuer}/poppy/operations in
// Session sid of sub, signed in with token unless empty, with approval in
// Poppy-Approval unless empty, declaring the extension in Poppy-Extensions.
func (s *webOps) endpoint(t *testing.T, sid, sub, token, body, approval string) *peers.Response {
	t.Helper()
	return s.endpointDeclaring(t, opstest.Declares, sid, sub, token, body, approval)
}

// endpointDeclaring is endpoint with Poppy-Extensions extensions, none
// when empty.
func (s *webOps) endpointDeclaring(t *testing.T, extensions, sid, sub, token, body, approval string) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, http.MethodPost, s.issuer+operations.EndpointPath, body)
	req.Header.Set("Content-Type", "application/json")
	if extensions != "" {
		req.Header.Set("Poppy-Extensions", extensions)
	}
	if approval != "" {
		req.Header.Set("Poppy-Approval", approval)
	}
	s.agent.Sign(t, req, peers.SessionClaims{Aud: s.issuer, SID: sid, Sub: sub, AccessToken: token}, peers.SessionOptions{})
	return peers.Send(t, s.env.Client, req)
}

func refBody(ref string) string { return fmt.Sprintf(`{"ref": %q}`, ref) }

// webRef reads the Poppy-Operation of a 403 and checks its sid.
func webRef(t *testing.T, resp *peers.Response, sid string) string {
	t.Helper()
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	d, err := httpsfv.UnmarshalDictionary(resp.Header.Values(website.OperationHeader))
	require.NoError(t, err, "Poppy-Operation: %q", resp.Header.Values(website.OperationHeader))
	require.Equal(t, []string{"sid", "ref"}, d.Names())
	got := map[string]string{}
	for _, k := range d.Names() {
		m, _ := d.Get(k)
		it, ok := m.(httpsfv.Item)
		require.True(t, ok)
		v, ok := it.Value.(string)
		require.True(t, ok, "%s must be a String", k)
		got[k] = v
	}
	require.Equal(t, sid, got["sid"])
	require.LessOrEqual(t, len(got["ref"]), 2048)
	require.Regexp(t, `^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`, got["ref"])
	// The operation itself never reaches the browser.
	require.NotContains(t, string(resp.Body), "70.00")
	require.NotContains(t, string(resp.Body), "price_difference")
	return got["ref"]
}

func requireWebStatus(t *testing.T, resp *peers.Response, id, status string) {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.JSONEq(t, fmt.Sprintf(`{"operation_id": %q, "status": %q}`, id, status), string(resp.Body))
}

func requireInvalid(t *testing.T, resp *peers.Response) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Equal(t, "invalid_request", resp.JSON(t)["error"], "%s", resp.Body)
}

// countWebOperations is how many website operations the Company has.
func (s *webOps) countWebOperations(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operations o
		JOIN companies c ON c.id = o.company_id WHERE c.slug = $1 AND o.interface = 'web'`, s.slug).Scan(&n))
	return n
}

func TestWebOperationsJacketExchange(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-jacket", false)
	const sid = "sidWebOpsJacket1"
	token := s.signIn(t, "orders:read", "orders:write")
	b := s.join(t, sid, token)

	// The form submission: 403, the reference and a page that waits,
	// whose Continue submits the same form again.
	first := s.exchange(t, b)
	ref := webRef(t, first, sid)
	requirePage(t, first, http.StatusForbidden, "waiting for your approval in your personal agent", `id="continue"`,
		`method="POST"`, `action="`+s.url(webExchangePath)+`"`,
		`<input type="hidden" name="item_id" value="itm_4Qa">`,
		`<input type="hidden" name="replacement_sku" value="stormline-insulated-m">`,
		`<input type="hidden" name="note" value="a b&amp;c">`)
	// The website's own page policy: never framed, its form only to
	// the same domain.
	csp := first.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Contains(t, csp, "form-action 'self'")
	require.Zero(t, s.x.performed.Load())

	// The agent gets the operation with the reference.
	op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, token, refBody(ref), ""))
	require.Equal(t, ref, op.Operation.OperationID+"."+op.Operation.Revision)
	require.JSONEq(t, `{"order_id": "o1", "replacement_sku": "stormline-insulated-m",
		"price_difference": {"amount": "70.00", "currency": "USD"}}`, string(op.Operation.Terms))

	// It approves, in another Session of the same agent and User, with a
	// member it does not know: recorded, nothing performed.
	rec := s.endpoint(t, "sidWebOpsJacket2", webUser, token, refBody(ref), opstest.Approval(op, `, future=1`))
	require.Equal(t, http.StatusNoContent, rec.Status, "%s", rec.Body)
	require.Zero(t, s.x.performed.Load())
	require.Len(t, s.hook.Calls(), 1, "the hook is asked where the approval is recorded")
	requireWebStatus(t, s.endpoint(t, sid, webUser, token, refBody(ref), ""), op.Operation.OperationID, "approved")

	// The browser submits the form again: performed once, with the
	// approval in Poppy-Verified and the revision's key.
	calls := s.origin.Calls(http.MethodPost, webExchangePath)
	done := s.exchange(t, b)
	require.Equal(t, http.StatusSeeOther, done.Status, "%s", done.Body)
	require.Equal(t, "/orders/o1/exchanges/ex_1", done.Header.Get("Location"))
	require.Equal(t, "exchanged", string(done.Body))
	require.Equal(t, int32(1), s.x.performed.Load())
	require.Equal(t, calls+1, s.origin.Calls(http.MethodPost, webExchangePath))
	last := s.origin.Last()
	require.Equal(t, op.Operation.OperationID+"."+op.Operation.Revision, last.Header.Get("Idempotency-Key"))
	require.Equal(t, op.Operation.OperationID, last.Claims.OperationID)
	require.Equal(t, op.Operation.Revision, last.Claims.Revision)
	require.Equal(t, "user", last.Claims.Approver)
	require.Equal(t, webExchangeForm, string(last.Body))
	require.Len(t, s.hook.Calls(), 1, "the website's approval is not asked about twice")
	requireWebStatus(t, s.endpoint(t, sid, webUser, token, refBody(ref), ""), op.Operation.OperationID, "performed")
	// Sending the approval again: already performed.
	requireWebStatus(t, s.endpoint(t, sid, webUser, token, refBody(ref), opstest.Approval(op, "")), op.Operation.OperationID, "performed")

	// Again: the approval is used up, so it is a new operation, and the
	// origin does not perform anything.
	again := s.exchange(t, b)
	ref2 := webRef(t, again, sid)
	require.NotEqual(t, ref, ref2)
	require.False(t, strings.HasPrefix(ref2, op.Operation.OperationID+"."), "a new operation")
	require.Equal(t, int32(1), s.x.performed.Load())
}

func TestWebOperationsScriptAndContinue(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-script", false)
	const sid = "sidWebOpsScript1"
	b := s.join(t, sid, "")

	// A script that accepts JSON gets approval_required, without the
	// operation.
	resp := s.do(t, b.client, http.MethodPost, webExchangePath, webExchangeForm,
		"Content-Type", webFormType, "Accept", "application/json")
	webRef(t, resp, sid)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.JSONEq(t, `{"error": "approval_required"}`, string(resp.Body))

	// A page load: Continue is a link to the same URL.
	s.origin.Handle(http.MethodGet, "/orders/o1/cancel", s.x.serve)
	resp = s.do(t, b.client, http.MethodGet, "/orders/o1/cancel?reason=late&x=%3Cb%3E", nil)
	webRef(t, resp, sid)
	requirePage(t, resp, http.StatusForbidden, `<a id="continue" href="`+s.url("/orders/o1/cancel?reason=late&amp;x=%3Cb%3E")+`">Continue</a>`)

	// A fetch or an XMLHttpRequest that accepts anything is a script's
	// all the same.
	for _, h := range [][]string{{"Sec-Fetch-Dest", "empty"}, {"X-Requested-With", "XMLHttpRequest"}} {
		resp = s.do(t, b.client, http.MethodPost, webExchangePath, webExchangeForm,
			"Content-Type", webFormType, "Accept", "*/*", h[0], h[1])
		webRef(t, resp, sid)
		require.JSONEq(t, `{"error": "approval_required"}`, string(resp.Body), "%s", h[0])
	}

	// A JSON body cannot be submitted again from a page: it says so.
	resp = s.do(t, b.client, http.MethodPost, webExchangePath, `{"replacement_sku": "x"}`, "Content-Type", "application/json")
	webRef(t, resp, sid)
	requirePage(t, resp, http.StatusForbidden, "reload this page")
	require.NotContains(t, string(resp.Body), `id="continue"`)
}

func TestWebOperationsWithoutSession(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-nosession", true)

	// (An ordinary visitor's request never reaches the test origin's
	// handlers: it refuses a request without Poppy-Verified.)
	check := func(t *testing.T, resp *peers.Response) {
		t.Helper()
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		require.Empty(t, resp.Header.Values("Poppy-Operation"))
		require.NotContains(t, string(resp.Body), "70.00")
		require.Zero(t, s.countWebOperations(t), "no operation is made")
	}
	t.Run("a join that did not declare the extension", func(t *testing.T) {
		b := s.join(t, "sidWebOpsUndeclared1", "")
		resp := s.do(t, b.client, http.MethodPost, webExchangePath, webExchangeForm,
			"Content-Type", webFormType, "Accept", "application/json")
		check(t, resp)
		require.Equal(t, "approval_required", resp.JSON(t)["error"])
	})
}

func TestWebOperationsWhoCanApprove(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-who", false)
	ada := s.signIn(t, "orders:read")
	adaBrowser := s.join(t, "sidWebOpsWho1", ada)
	ref := webRef(t, s.exchange(t, adaBrowser), "sidWebOpsWho1")
	op := opstest.RequireOperation(t, s.endpoint(t, "sidWebOpsWho1", webUser, ada, refBody(ref), ""))

	resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+s.slug+"/accounts",
		map[string]any{"username": "bob", "password": webPassword})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	bob := s.env.SignIn(t, s.agent, s.issuer, "bob", webPassword, []string{"orders:read"}, "").AccessToken

	// A signed-out Session of the same agent and User: a challenge for
	// the account, for the ref and for the approval.
	out := s.endpoint(t, "sidWebOpsWho2", webUser, "", refBody(ref), "")
	require.Equal(t, http.StatusUnauthorized, out.Status, "%s", out.Body)
	require.Contains(t, out.Header.Get("WWW-Authenticate"), "Bearer")
	out = s.endpoint(t, "sidWebOpsWho2", webUser, "", refBody(ref), opstest.Approval(op, ""))
	require.Equal(t, http.StatusUnauthorized, out.Status, "%s", out.Body)
	// Another account, another User: the ref is not theirs.
	requireInvalid(t, s.endpoint(t, "sidWebOpsWho3", webUser, bob, refBody(ref), ""))
	requireInvalid(t, s.endpoint(t, "sidWebOpsWho3", webUser, bob, refBody(ref), opstest.Approval(op, "")))
	requireInvalid(t, s.endpoint(t, "sidWebOpsWho4", "usr_eve", "", refBody(ref), ""))
	require.Empty(t, s.hook.Calls())

	// Ada approves; Bob's browser asks for the same: the approval is not
	// applied to his Session, which gets its own operation.
	rec := s.endpoint(t, "sidWebOpsWho1", webUser, ada, refBody(ref), opstest.Approval(op, ""))
	require.Equal(t, http.StatusNoContent, rec.Status, "%s", rec.Body)
	bobBrowser := s.join(t, "sidWebOpsWho5", bob)
	bobRef := webRef(t, s.exchange(t, bobBrowser), "sidWebOpsWho5")
	require.False(t, strings.HasPrefix(bobRef, op.Operation.OperationID+"."))
	// Nor to a signed-out browser of the same agent and User.
	outBrowser := s.join(t, "sidWebOpsWho6", "")
	outRef := webRef(t, s.exchange(t, outBrowser), "sidWebOpsWho6")
	require.False(t, strings.HasPrefix(outRef, op.Operation.OperationID+"."))
	require.Zero(t, s.x.performed.Load())
	requireWebStatus(t, s.endpoint(t, "sidWebOpsWho1", webUser, ada, refBody(ref), ""), op.Operation.OperationID, "approved")

	// A signed-out operation is approved signed out; a signed-in Session
	// cannot use its ref.
	requireInvalid(t, s.endpoint(t, "sidWebOpsWho1", webUser, ada, refBody(outRef), ""))
	outOp := opstest.RequireOperation(t, s.endpoint(t, "sidWebOpsWho7", webUser, "", refBody(outRef), ""))
	rec = s.endpoint(t, "sidWebOpsWho7", webUser, "", refBody(outRef), opstest.Approval(outOp, ""))
	require.Equal(t, http.StatusNoContent, rec.Status, "%s", rec.Body)
	done := s.exchange(t, outBrowser)
	require.Equal(t, http.StatusSeeOther, done.Status, "%s", done.Body)
	require.Equal(t, outOp.Operation.OperationID, s.origin.Last().Claims.OperationID)

	// Ada's browser, in another Session that can approve, uses hers.
	adaAgain := s.join(t, "sidWebOpsWho8", ada)
	done = s.exchange(t, adaAgain)
	require.Equal(t, http.StatusSeeOther, done.Status, "%s", done.Body)
	require.Equal(t, op.Operation.OperationID, s.origin.Last().Claims.OperationID)
	require.Equal(t, int32(2), s.x.performed.Load())
}

func TestWebOperationsOneRequestOneApproval(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-once", false)
	const sid = "sidWebOpsOnce1"
	browsers := []*webBrowser{s.join(t, sid, ""), s.join(t, sid, ""), s.join(t, sid, ""), s.join(t, sid, "")}
	ref := webRef(t, s.exchange(t, browsers[0]), sid)
	op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
	rec := s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(op, ""))
	require.Equal(t, http.StatusNoContent, rec.Status, "%s", rec.Body)
	// The same approval again: still the one recorded, the hook not asked
	// again.
	rec = s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(op, ""))
	require.Equal(t, http.StatusNoContent, rec.Status, "%s", rec.Body)
	require.Len(t, s.hook.Calls(), 1)

	// Every browser of the Session repeats the action at once: one
	// performs it, the others get a new operation or wait.
	statuses := make([]int, len(browsers))
	var wg sync.WaitGroup
	for i, b := range browsers {
		wg.Go(func() { statuses[i] = s.exchange(t, b).Status })
	}
	wg.Wait()
	performed := 0
	for _, st := range statuses {
		switch st {
		case http.StatusSeeOther:
			performed++
		case http.StatusForbidden, http.StatusServiceUnavailable:
		default:
			t.Fatalf("unexpected status %d", st)
		}
	}
	require.Equal(t, 1, performed, "%v", statuses)
	require.Equal(t, int32(1), s.x.performed.Load())
}

func TestWebOperationsEndpointRefusals(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-refuse", false)
	const sid = "sidWebOpsRefuse1"
	b := s.join(t, sid, "")
	ref := webRef(t, s.exchange(t, b), sid)
	op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))

	for name, body := range map[string]string{
		"unknown operation":   refBody("op_UNKNOWN." + op.Operation.Revision),
		"unknown revision":    refBody(op.Operation.OperationID + ".NOTAREVISION"),
		"no dot":              refBody(op.Operation.OperationID),
		"two dots":            refBody(ref + ".x"),
		"bad characters":      refBody("op_1.rev!"),
		"too long":            refBody(op.Operation.OperationID + "." + strings.Repeat("a", 2048)),
		"empty":               `{"ref": ""}`,
		"missing":             `{}`,
		"not a string":        `{"ref": 7}`,
		"not JSON":            `ref=` + ref,
		"not an object":       `["` + ref + `"]`,
		"unknown members too": `{"ref": "op_UNKNOWN.x", "extra": true}`,
	} {
		t.Run(name, func(t *testing.T) {
			requireInvalid(t, s.endpoint(t, sid, webUser, "", body, ""))
		})
	}
	t.Run("unknown members are ignored", func(t *testing.T) {
		opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", `{"ref": "`+ref+`", "extra": {"a": 1}}`, ""))
	})
	t.Run("too large", func(t *testing.T) {
		resp := s.endpoint(t, sid, webUser, "", `{"ref": "`+ref+`", "pad": "`+strings.Repeat("x", 9<<10)+`"}`, "")
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.Status, "%s", resp.Body)
	})
	t.Run("approval without approver", func(t *testing.T) {
		a := fmt.Sprintf(`operation_id=%q, revision=%q`, op.Operation.OperationID, op.Operation.Revision)
		requireInvalid(t, s.endpoint(t, sid, webUser, "", refBody(ref), a))
		requireInvalid(t, s.endpoint(t, sid, webUser, "", refBody(ref), `operation_id=`))
		// Nothing recorded: the operation is still to approve.
		opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
		require.Empty(t, s.hook.Calls())
	})
	t.Run("approval of another operation: as without", func(t *testing.T) {
		other := op
		other.Operation.OperationID = "op_SOMEONEELSES"
		got := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(other, "")))
		require.Equal(t, op.Operation, got.Operation)
		require.Empty(t, s.hook.Calls())
	})
	t.Run("another Company", func(t *testing.T) {
		s.env.CreateCompany(t, map[string]any{"slug": "shop2",
			"organization": map[string]any{"name": "Shop 2", "domain": "shop2.example"},
			"web":          map[string]any{"browser_join": true, "origin": s.origin.BaseURL()},
			"operations":   map[string]any{"enabled": true, "web": true}})
		other := s.env.PublicURL("/t/shop2")
		req := peers.NewRequest(t, http.MethodPost, other+website.OperationsPath, refBody(ref))
		req.Header.Set("Content-Type", "application/json")
		s.agent.Sign(t, req, peers.SessionClaims{Aud: other, SID: sid, Sub: webUser}, peers.SessionOptions{})
		requireInvalid(t, peers.Send(t, s.env.Client, req))
	})
	t.Run("expired", func(t *testing.T) {
		_, err := s.env.Pool.Exec(context.Background(), `UPDATE operation_revisions SET expires_at = now() - interval '1 second'
			WHERE operation_id = $1`, op.Operation.OperationID)
		require.NoError(t, err)
		requireInvalid(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
		requireInvalid(t, s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(op, "")))
		require.Empty(t, s.hook.Calls())
		// The browser asks again: the same operation, a new revision.
		ref2 := webRef(t, s.exchange(t, b), sid)
		require.True(t, strings.HasPrefix(ref2, op.Operation.OperationID+"."))
		require.NotEqual(t, ref, ref2)
		// The old ref now gives the current revision, never the old one.
		got := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
		require.Equal(t, ref2, got.Operation.OperationID+"."+got.Operation.Revision)
		// An approval of the expired revision with the new ref: the new
		// revision, not the one it named.
		got = opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref2), opstest.Approval(op, "")))
		require.Equal(t, ref2, got.Operation.OperationID+"."+got.Operation.Revision)
	})
}

func TestWebOperationsHookDeclines(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-decline", false)
	const sid = "sidWebOpsDecline1"
	b := s.join(t, sid, "")
	ref := webRef(t, s.exchange(t, b), sid)
	op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))

	s.hook.Mode.Store("decline")
	resp := s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(op, ""))
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.JSONEq(t, fmt.Sprintf(`{"error": "approval_declined", "operation_id": %q, "revision": %q,
		"reason": "Exchanges over $50 need the account holder.",
		"alternative": {"instructions": "Exchange it in the app.",
			"references": [{"type": "web", "url": "https://shop.example/exchanges"}]}}`,
		op.Operation.OperationID, op.Operation.Revision), string(resp.Body))

	// Nothing recorded: the browser's request is not performed; a lookup
	// of the declined revision's ref, or the same approval again, reports
	// the decline, and the browser's request gets a new revision of the
	// same operation.
	for _, again := range []string{"", opstest.Approval(op, "")} {
		s.hook.Mode.Store("ok")
		resp := s.endpoint(t, sid, webUser, "", refBody(ref), again)
		require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
		require.Equal(t, "approval_declined", resp.JSON(t)["error"])
		require.Equal(t, "Exchanges over $50 need the account holder.", resp.JSON(t)["reason"])
	}
	ref2 := webRef(t, s.exchange(t, b), sid)
	require.Zero(t, s.x.performed.Load())
	require.True(t, strings.HasPrefix(ref2, op.Operation.OperationID+"."))
	got := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref2), ""))
	require.NotEqual(t, op.Operation.Revision, got.Operation.Revision)
	require.Len(t, s.hook.Calls(), 1)
}

func TestWebOperationsOff(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-off", false)
	// Draft 0.3 §3.3: the extension's entry is one object with its version.
	poppy := func() map[string]any {
		resp := s.do(t, nil, http.MethodGet, "/.well-known/poppy.json", nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		ext, _ := resp.JSON(t)["extensions"].(map[string]any)
		entry, _ := ext["operations"].(map[string]any)
		return entry
	}
	require.Equal(t, map[string]any{"version": "3", "endpoint": s.issuer + website.OperationsPath}, poppy())

	s.setOperations(t, map[string]any{"enabled": true, "web": false})
	require.Equal(t, map[string]any{"version": "3"}, poppy())
	resp := s.endpoint(t, "sidWebOpsOff1", webUser, "", refBody("op_A.B"), "")
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)

	// Its website's proposals become no operations.
	b := s.join(t, "sidWebOpsOff2", "")
	resp = s.exchange(t, b)
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Empty(t, resp.Header.Values("Poppy-Operation"))
	require.Zero(t, s.countWebOperations(t))
}

// TestWebOperationsOnlyAtTheirInterface: an approval of a website's
// operation is refused at an API (check 1: another interface), and an
// API's operation is not one the endpoint can use.
func TestWebOperationsOnlyAtTheirInterface(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-iface", false)
	const sid = "sidWebOpsIface1"
	b := s.join(t, sid, "")
	ref := webRef(t, s.exchange(t, b), sid)
	op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))

	ctx := context.Background()
	var companyID int64
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = $1`, s.slug).Scan(&companyID))
	store := operations.NewStore(s.env.Pool)
	owner := operations.Owner{ClientID: s.agent.ClientID, UserID: webUser}
	a := &operations.Approval{OperationID: op.Operation.OperationID, Revision: op.Operation.Revision, Approver: "user"}
	req := &operations.Request{Method: http.MethodPost, Path: webExchangePath, ContentType: webFormType, Body: []byte(webExchangeForm)}
	for _, iface := range []string{operations.InterfaceAPI, operations.InterfaceMCP, operations.InterfaceConversation} {
		got, err := store.Check(ctx, companyID, owner, iface, "web", a, req, time.Now())
		require.NoError(t, err)
		require.Equal(t, operations.CannotApprove, got.Verdict, iface)
	}

	// An API's operation of the same owner: its ref is not the endpoint's.
	apiOp, err := store.Propose(ctx, companyID, owner, operations.InterfaceAPI, "orders",
		&operations.Proposal{ActionKey: "k", Terms: json.RawMessage(`{"a": 1}`)}, req, "", time.Now())
	require.NoError(t, err)
	apiRef := operations.Ref(apiOp.OperationID, apiOp.Revision)
	requireInvalid(t, s.endpoint(t, sid, webUser, "", refBody(apiRef), ""))
	approveAPI := fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, apiOp.OperationID, apiOp.Revision)
	requireInvalid(t, s.endpoint(t, sid, webUser, "", refBody(apiRef), approveAPI))
	// Its approval with the website's ref: as without an approval.
	opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), approveAPI))
	require.Empty(t, s.hook.Calls())
}

// TestWebOperationsOriginAnswers: what the origin answers the approved
// request at perform time: a decline performs nothing and retires the
// revision; new terms give the browser a new revision to approve.
func TestWebOperationsOriginAnswers(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-origin", false)
	const sid = "sidWebOpsOrigin1"
	b := s.join(t, sid, "")
	approve := func() (string, opstest.Op) {
		t.Helper()
		ref := webRef(t, s.exchange(t, b), sid)
		op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
		rec := s.endpoint(t, sid, webUser, "", refBody(ref), opstest.Approval(op, ""))
		require.Equal(t, http.StatusNoContent, rec.Status, "%s", rec.Body)
		return ref, op
	}

	s.x.reprice.Store(true)
	ref, op := approve()
	resp := s.exchange(t, b)
	ref2 := webRef(t, resp, sid)
	requirePage(t, resp, http.StatusForbidden, "waiting for your approval")
	require.True(t, strings.HasPrefix(ref2, op.Operation.OperationID+"."), "the same operation")
	require.NotEqual(t, ref, ref2)
	got := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref2), ""))
	require.Contains(t, string(got.Operation.Terms), "80.00")
	// The old ref now gives the new revision.
	got = opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
	require.Equal(t, ref2, got.Operation.OperationID+"."+got.Operation.Revision)
	require.Zero(t, s.x.performed.Load())

	s.x.reprice.Store(false)
	s.x.decline.Store(true)
	_, op = approve()
	resp = s.do(t, b.client, http.MethodPost, webExchangePath, webExchangeForm, "Content-Type", webFormType,
		"Accept", "application/json")
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Equal(t, "approval_declined", resp.JSON(t)["error"])
	require.Empty(t, resp.Header.Values("Poppy-Operation"))
	require.Zero(t, s.x.performed.Load())
	// The Personal Agent's lookup of the ref reports the decline
	// (extension 6), so it neither sends the approval again nor takes the
	// operation for one it can still approve.
	lookup := s.endpoint(t, sid, webUser, "", refBody(op.Operation.OperationID+"."+op.Operation.Revision), "")
	require.Equal(t, http.StatusForbidden, lookup.Status, "%s", lookup.Body)
	require.JSONEq(t, fmt.Sprintf(`{"error": "approval_declined", "operation_id": %q, "revision": %q,
		"reason": "Not <b>this</b> one."}`, op.Operation.OperationID, op.Operation.Revision), string(lookup.Body))

	// A page shows the origin's reason, as text.
	approve()
	resp = s.exchange(t, b)
	requirePage(t, resp, http.StatusForbidden, "Nothing was done", "Not &lt;b&gt;this&lt;/b&gt; one.")
	require.NotContains(t, string(resp.Body), "<b>")
	require.Zero(t, s.x.performed.Load())
}

// TestWebOperationsLargeUpload: a body too large to keep with an
// operation still reaches the website whole; a proposal in answer to it
// becomes no operation.
func TestWebOperationsLargeUpload(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-upload", false)
	const sid = "sidWebOpsUpload1"
	b := s.join(t, sid, "")
	big := strings.Repeat("x", 1<<20+1)

	s.origin.Handle(http.MethodPost, "/upload", func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d", len(raw))
	})
	resp := s.do(t, b.client, http.MethodPost, "/upload", big, "Content-Type", "application/octet-stream")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, fmt.Sprint(len(big)), string(resp.Body))
	require.Equal(t, big, string(s.origin.Last().Body))

	s.origin.Handle(http.MethodPost, "/upload-proposes", s.x.serve)
	resp = s.do(t, b.client, http.MethodPost, "/upload-proposes", big, "Content-Type", "application/octet-stream")
	requirePage(t, resp, http.StatusForbidden, "cannot ask for here")
	require.Empty(t, resp.Header.Values(website.OperationHeader))
	require.Zero(t, s.countWebOperations(t))
}

// TestWebOperationsCompressedProposal: a proposal the origin compressed
// for the browser is read; one in an encoding the platform cannot read
// becomes no operation.
func TestWebOperationsCompressedProposal(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-gzip", false)
	const sid = "sidWebOpsGzip1"
	b := s.join(t, sid, "")
	const proposal = `{"action_key": "gift wrap o1", "summary": "Gift wrap, $5.00.", "terms": {"order_id": "o1"}}`
	compressed := func(encoding string, wrap func(io.Writer) io.WriteCloser) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", operations.ProposalType)
			w.Header().Set("Content-Encoding", encoding)
			zw := wrap(w)
			_, _ = io.WriteString(zw, proposal)
			_ = zw.Close()
		}
	}
	s.origin.Handle(http.MethodPost, "/gzip", compressed("gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }))
	s.origin.Handle(http.MethodPost, "/deflate", compressed("deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }))
	s.origin.Handle(http.MethodPost, "/br", compressed("br", func(w io.Writer) io.WriteCloser { return nopWriteCloser{w} }))

	for _, p := range []string{"/gzip", "/deflate"} {
		resp := s.do(t, b.client, http.MethodPost, p, "wrap=1", "Content-Type", webFormType,
			"Accept-Encoding", "gzip, deflate, br")
		ref := webRef(t, resp, sid)
		require.Empty(t, resp.Header.Values("Content-Encoding"))
		op := opstest.RequireOperation(t, s.endpoint(t, sid, webUser, "", refBody(ref), ""))
		require.JSONEq(t, `{"order_id": "o1"}`, string(op.Operation.Terms), p)
	}
	n := s.countWebOperations(t)
	resp := s.do(t, b.client, http.MethodPost, "/br", "wrap=1", "Content-Type", webFormType, "Accept-Encoding", "br")
	requirePage(t, resp, http.StatusBadGateway, "cannot be used")
	require.Empty(t, resp.Header.Values(website.OperationHeader))
	require.Equal(t, n, s.countWebOperations(t))
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestWebOperationsEndpointUndeclared: without an approval, a request to
// the endpoint that does not declare the extension gets no operation.
func TestWebOperationsEndpointUndeclared(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-undeclared", true)
	const sid = "sidWebOpsUndeclared1"
	resp := s.endpointDeclaring(t, "", sid, webUser, "", refBody("op_A.B"), "")
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	require.Equal(t, "extension_required", resp.JSON(t)["error"])
	require.Equal(t, "operations", resp.JSON(t)["extension"])
	require.Empty(t, resp.JSON(t)["operation"])
	// Another version declares nothing either.
	resp = s.endpointDeclaring(t, `"operations";v="4"`, sid, webUser, "", refBody("op_A.B"), "")
	require.Equal(t, "extension_required", resp.JSON(t)["error"], "%s", resp.Body)
	// Nor does another form than a String with a String v (RFC 9651
	// §3.3.3, extension section 2): a Token name or an Integer version.
	for _, form := range []string{`operations;v="3"`, `"operations";v=3`, `operations;v=3`} {
		resp = s.endpointDeclaring(t, form, sid, webUser, "", refBody("op_A.B"), "")
		require.Equal(t, "extension_required", resp.JSON(t)["error"], "%s: %s", form, resp.Body)
	}
	// Declared in Poppy-Extensions, or carrying an approval: answered.
	requireInvalid(t, s.endpointDeclaring(t, opstest.Declares, sid, webUser, "", refBody("op_A.B"), ""))
	requireInvalid(t, s.endpointDeclaring(t, "", sid, webUser, "", refBody("op_A.B"),
		`operation_id="op_A", revision="B", approver="user"`))
}

// TestWebOperationsStaleApprovalKept: an approval that a request found
// but could not perform with (check 3 failed at perform time) is not used
// up by it.
func TestWebOperationsStaleApprovalKept(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-stale", false)
	const sid = "sidWebOpsStale1"
	b := s.join(t, sid, "")

	// A recorded approval of the same request at another target: Find
	// applies it, Perform's check 3 fails.
	ctx := context.Background()
	var companyID int64
	require.NoError(t, s.env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = $1`, s.slug).Scan(&companyID))
	store := operations.NewStore(s.env.Pool)
	owner := operations.Owner{ClientID: s.agent.ClientID, UserID: webUser}
	req := &operations.Request{Method: http.MethodPost, Path: webExchangePath, ContentType: webFormType, Body: []byte(webExchangeForm)}
	op, err := store.Propose(ctx, companyID, owner, operations.InterfaceWeb, "elsewhere",
		&operations.Proposal{ActionKey: "elsewhere", Terms: json.RawMessage(`{"a": 1}`)}, req, "", time.Now())
	require.NoError(t, err)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	recorded, err := store.Record(ctx, companyID, a, &verified.Facts{ClientID: owner.ClientID}, time.Now())
	require.NoError(t, err)
	require.True(t, recorded)

	ref := webRef(t, s.exchange(t, b), sid)
	require.False(t, strings.HasPrefix(ref, op.OperationID+"."))
	require.Zero(t, s.x.performed.Load())
	w, err := store.Lookup(ctx, companyID, op.OperationID)
	require.NoError(t, err)
	require.True(t, w.Approved, "the approval is not used up")
}

// TestWebOperationsSignedOutWithProposal: a website that signs the
// browser out in the answer that proposes: the cookie is deleted all the
// same, and no operation is made.
func TestWebOperationsSignedOutWithProposal(t *testing.T) {
	t.Parallel()
	s := newWebOps(t, "wops-end", false)
	const sid = "sidWebOpsEnd1"
	b := s.join(t, sid, "")
	s.origin.Handle(http.MethodPost, "/sign-out-and-ask", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(website.WebSessionHeader, "end")
		http.SetCookie(w, &http.Cookie{Name: "theme", Value: "dark", Path: "/", Secure: true})
		s.x.serve(w, r)
	})
	resp := s.do(t, b.client, http.MethodPost, "/sign-out-and-ask", webExchangeForm, "Content-Type", webFormType)
	requirePage(t, resp, http.StatusForbidden, "cannot ask for here")
	require.Empty(t, resp.Header.Values(website.OperationHeader))
	require.Zero(t, s.countWebOperations(t))
	cookies := strings.Join(resp.Header.Values("Set-Cookie"), "\n")
	require.Contains(t, cookies, s.cookie+"=;")
	require.Contains(t, cookies, "theme=dark")
	require.Empty(t, b.token(s.webSite), "the Session cookie is deleted")
}
