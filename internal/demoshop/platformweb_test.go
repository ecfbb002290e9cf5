package demoshop_test

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// join joins a new browser to the rig's Session, signed in as ada (spec 6,
// docs/website.md section 3), and returns it.
func (r *platformRig) join(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Transport: r.env.Client.Transport, Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := peers.Send(t, browser, peers.NewRequest(t, http.MethodGet, r.site("/poppy/browser-session"), nil))
	require.Equal(t, http.StatusOK, page.Status, "%s", page.Body)
	m := regexp.MustCompile(`name="code" value="([A-Za-z0-9_]+)"`).FindSubmatch(page.Body)
	require.NotNil(t, m, "%s", page.Body)
	resp := r.send(t, http.MethodPost, r.site("/poppy/browser-session/authorize"), r.apiToken, map[string]string{"code": string(m[1])})
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	req := peers.NewRequest(t, http.MethodPost, r.site("/poppy/browser-session"), url.Values{"code": {string(m[1])}}.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp = peers.Send(t, browser, req)
	require.Equal(t, http.StatusSeeOther, resp.Status, "%s", resp.Body)
	return browser
}

func (r *platformRig) site(path string) string { return r.env.URL("stormline.example", path) }

// TestWebsiteThroughThePlatform: a browser joined signed in sees ada's
// orders on the shop's pages; the exchange form's Continue becomes a
// website operation, approved at the operations endpoint, and the next
// Continue performs it once.
func TestWebsiteThroughThePlatform(t *testing.T) {
	t.Parallel()
	r := setupPlatform(t)
	browser := r.join(t)

	orders := peers.Send(t, browser, peers.NewRequest(t, http.MethodGet, r.site("/orders"), nil))
	require.Equal(t, http.StatusOK, orders.Status, "%s", orders.Body)
	require.Contains(t, string(orders.Body), `href="/orders/ord_7Hk2"`)

	submit := func() *peers.Response {
		req := peers.NewRequest(t, http.MethodPost, r.site("/orders/ord_7Hk2/exchange"), form)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return peers.Send(t, browser, req)
	}
	waiting := submit()
	require.Equal(t, http.StatusForbidden, waiting.Status, "%s", waiting.Body)
	m := regexp.MustCompile(`ref="([A-Za-z0-9_.-]+)"`).FindStringSubmatch(waiting.Header.Get("Poppy-Operation"))
	require.NotNil(t, m, "Poppy-Operation: %q", waiting.Header.Get("Poppy-Operation"))
	require.Empty(t, r.shop.Orders(r.ada)[0].Exchanges)

	endpoint := r.issuer + "/poppy/operations"
	resp := r.send(t, http.MethodPost, endpoint, r.apiToken, map[string]string{"ref": m[1]})
	require.Equal(t, http.StatusForbidden, resp.Status, "%s", resp.Body)
	op := operation(t, resp.Body)
	require.Equal(t, map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m",
		"price_difference": map[string]any{"amount": "70.00", "currency": "USD"}}, op["terms"])
	approval := fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=1791487260, input_type="tap"`,
		op["operation_id"], op["revision"])
	resp = r.send(t, http.MethodPost, endpoint, r.apiToken, map[string]string{"ref": m[1]}, "Poppy-Approval", approval)
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	require.Empty(t, r.shop.Orders(r.ada)[0].Exchanges, "recording an approval performs nothing")

	done := submit()
	require.Equal(t, http.StatusSeeOther, done.Status, "%s", done.Body)
	require.Equal(t, "/orders/ord_7Hk2", done.Header.Get("Location"))
	exchanges := r.shop.Orders(r.ada)[0].Exchanges
	require.Len(t, exchanges, 1)
	require.Equal(t, op["operation_id"], exchanges[0].OperationID)
	page := peers.Send(t, browser, peers.NewRequest(t, http.MethodGet, r.site("/orders/ord_7Hk2"), nil))
	require.Contains(t, string(page.Body), `<ul id="exchanges">`)

	// Continue again: the item is exchanged already; nothing more is done.
	again := submit()
	require.Equal(t, http.StatusConflict, again.Status, "%s", again.Body)
	require.Len(t, r.shop.Orders(r.ada)[0].Exchanges, 1)
}
