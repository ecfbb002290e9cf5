package demoshop_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// controlCall sends a request to the control handler h as a local client
// does: to 127.0.0.1, with a JSON body.
func controlCall(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, "http://127.0.0.1:8446"+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	h.ServeHTTP(rec, req)
	return rec
}

// TestControl: seeding by account ID, the stall hook and the registration.
func TestControl(t *testing.T) {
	t.Parallel()
	r := setup(t)
	h := r.shop.Control()
	call := func(method, path, body string) *httptest.ResponseRecorder { return controlCall(h, method, path, body) }
	require.Equal(t, http.StatusBadRequest, call(http.MethodPost, "/seed", `{"account": "ada"}`).Code)
	require.Equal(t, http.StatusBadRequest, call(http.MethodPost, "/seed", `[`).Code)
	require.Empty(t, r.shop.Orders("7"))
	require.Equal(t, http.StatusNoContent, call(http.MethodPost, "/seed", `{"account": "7", "extra": 1}`).Code)
	require.Len(t, r.shop.Orders("7"), 2)
	require.Equal(t, http.StatusNoContent, call(http.MethodPost, "/stall-next-exchange", `{}`).Code)

	// The last API call's Poppy-Verified facts, for tests of what the
	// platform tells origins.
	require.Equal(t, http.StatusNotFound, call(http.MethodGet, "/last-verified", "").Code)
	facts := ada()
	facts.AgentOperator = "agent.example"
	require.Equal(t, http.StatusOK, r.do(http.MethodGet, "/api/orders", nil, verified.Header, r.token(r.shop.APIOrigin(), facts)).Status)
	rec := call(http.MethodGet, "/last-verified", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var last verified.Facts
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &last))
	require.Equal(t, facts.Facts, last)

	rec = call(http.MethodGet, "/registration", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var reg struct {
		API       map[string]any            `json:"api"`
		Tools     map[string]map[string]any `json:"tools"`
		WebOrigin string                    `json:"web_origin"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &reg))
	require.Equal(t, r.base+"/api", reg.API["origin"])
	require.Equal(t, r.base+"/tools/exchange_item", reg.Tools["exchange_item"]["url"])
	require.NotContains(t, reg.Tools["exchange_item"], "Name")
	require.Equal(t, r.base, reg.WebOrigin)
}

// TestControlRefusesWebPages: what a web page can send the control handler
// (a simple cross-origin POST, or any request through a rebound DNS name)
// is refused and does nothing; loopback hosts in every form are served.
func TestControlRefusesWebPages(t *testing.T) {
	t.Parallel()
	r := setup(t)
	h := r.shop.Control()
	send := func(host, path, contentType, body string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Host = host
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
		require.Equal(t, http.StatusUnsupportedMediaType, send("127.0.0.1:8446", "/seed", ct, `{"account": "7"}`), ct)
		require.Equal(t, http.StatusUnsupportedMediaType, send("127.0.0.1:8446", "/stall-next-exchange", ct, `{}`), ct)
	}
	for _, host := range []string{"attacker.example", "attacker.example:8446", "127.0.0.1.nip.io:8446", "10.0.0.1:8446", ""} {
		require.Equal(t, http.StatusForbidden, send(host, "/seed", "application/json", `{"account": "7"}`), host)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/registration", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusForbidden, rec.Code, host)
	}
	require.Empty(t, r.shop.Orders("7"), "nothing was seeded")

	for _, host := range []string{"127.0.0.1:8446", "localhost:8446", "LOCALHOST", "[::1]:8446", "127.0.0.2"} {
		require.Equal(t, http.StatusNoContent, send(host, "/seed", "application/json; charset=utf-8", `{"account": "7"}`), host)
	}
	require.Len(t, r.shop.Orders("7"), 2)
}
