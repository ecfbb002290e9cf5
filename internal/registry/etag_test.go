package registry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// toolBody is a valid tool registration described by description.
func toolBody(description string) map[string]any {
	return map[string]any{"description": description, "input_schema": map[string]any{"type": "object"},
		"url": "https://tools.example/lookup"}
}

// put sends a PUT of path through the Company API with If-Match lines
// (none: no header).
func (c mgCompany) put(t *testing.T, path string, body any, ifMatch ...string) *peers.Response {
	t.Helper()
	req := peers.NewRequest(t, http.MethodPut, c.env.PublicURL("/company/v1"+path), body)
	req.Header.Set("Authorization", "Bearer "+c.key)
	for _, v := range ifMatch {
		req.Header.Add("If-Match", v)
	}
	return peers.Send(t, c.env.Client, req)
}

// requireCode checks that resp is a JSON error with status and code.
func requireCode(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	var e struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &e))
	require.Equal(t, code, e.Error)
	require.NotEmpty(t, e.Description)
}

// tagOf reads path through the Company API and returns its ETag and body.
func (c mgCompany) tagOf(t *testing.T, path string) (string, []byte) {
	t.Helper()
	resp := c.api(t, http.MethodGet, path, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	tag := resp.Header.Get("ETag")
	require.Regexp(t, `^"[A-Za-z0-9_-]+"$`, tag)
	return tag, resp.Body
}

// TestPutIfMatch: GET of a tool or an API carries a strong ETag, the
// answer of a PUT the new one; a PUT with If-Match goes through only with
// the current tag (or * on an existing registration), and otherwise
// changes nothing.
func TestPutIfMatch(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "etags", nil)

	// If-Match on a name with no registration: 412, nothing created.
	for _, ifMatch := range []string{"*", `"some-tag"`} {
		requireCode(t, co.put(t, "/tools/lookup", toolBody("Lookup"), ifMatch), http.StatusPreconditionFailed, "precondition_failed")
		requireCode(t, co.api(t, http.MethodGet, "/tools/lookup", nil), http.StatusNotFound, "not_found")
	}
	resp := co.put(t, "/tools/lookup", toolBody("Lookup"))
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	tag, body := co.tagOf(t, "/tools/lookup")
	require.Equal(t, tag, resp.Header.Get("ETag"), "the PUT's answer and GET tag the same version")

	for _, ifMatch := range []string{"W/" + tag, tag[1 : len(tag)-1], `"other"`} {
		requireCode(t, co.put(t, "/tools/lookup", toolBody("Changed"), ifMatch), http.StatusPreconditionFailed, "precondition_failed")
		now, after := co.tagOf(t, "/tools/lookup")
		require.Equal(t, tag, now, "If-Match %s", ifMatch)
		require.JSONEq(t, string(body), string(after))
	}
	resp = co.put(t, "/tools/lookup", toolBody("Changed"), tag)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	newTag, _ := co.tagOf(t, "/tools/lookup")
	require.Equal(t, newTag, resp.Header.Get("ETag"))
	require.NotEqual(t, tag, newTag)
	requireCode(t, co.put(t, "/tools/lookup", toolBody("Again"), tag), http.StatusPreconditionFailed, "precondition_failed")
	resp = co.put(t, "/tools/lookup", toolBody("Star"), "*")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	// An API, the same way; the admin API shows the same tag.
	api := map[string]any{"origin": "https://orders.etags.example", "openapi": json.RawMessage(mgOrdersDoc)}
	resp = co.put(t, "/apis/orders", api)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	tag, _ = co.tagOf(t, "/apis/orders")
	require.Equal(t, tag, co.admin(t, http.MethodGet, "/apis/orders", nil).Header.Get("ETag"))
	api["description"] = "Orders"
	requireCode(t, co.put(t, "/apis/orders", api, `"other"`), http.StatusPreconditionFailed, "precondition_failed")
	resp = co.put(t, "/apis/orders", api, tag)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "Orders", resp.JSON(t)["description"])
}

// TestPutIfMatchRace replaces one tool from many writers at once, all with
// the same ETag: in each round exactly one replacement is stored, the
// others get 412, and the tool is the winner's.
func TestPutIfMatchRace(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "etag-race", nil)
	require.Equal(t, http.StatusCreated, co.put(t, "/tools/lookup", toolBody("Lookup")).Status)

	const writers, rounds = 12, 3
	for round := range rounds {
		tag, _ := co.tagOf(t, "/tools/lookup")
		reqs := make([]*http.Request, writers)
		for i := range writers {
			reqs[i] = peers.NewRequest(t, http.MethodPut, env.PublicURL("/company/v1/tools/lookup"),
				toolBody(fmt.Sprintf("Round %d, writer %d", round, i)))
			reqs[i].Header.Set("Authorization", "Bearer "+co.key)
			reqs[i].Header.Set("If-Match", tag)
		}
		resps := peers.SendAll(t, env.Client, reqs)
		won := -1
		for i, resp := range resps {
			if resp.Status == http.StatusOK {
				require.Equal(t, -1, won, "round %d: writers %d and %d both replaced the tool with one ETag", round, won, i)
				won = i
				continue
			}
			requireCode(t, resp, http.StatusPreconditionFailed, "precondition_failed")
		}
		require.NotEqual(t, -1, won, "round %d: no writer won", round)
		now, body := co.tagOf(t, "/tools/lookup")
		require.Equal(t, resps[won].Header.Get("ETag"), now)
		var tool struct {
			Description string `json:"description"`
		}
		require.NoError(t, json.Unmarshal(body, &tool))
		require.Equal(t, fmt.Sprintf("Round %d, writer %d", round, won), tool.Description)
	}
}

// TestPutIfMatchRequired: with If-Match required, replacing a registration
// without it is 428 and changes nothing; creating one needs none.
func TestPutIfMatchRequired(t *testing.T) {
	t.Parallel()
	env := newEnvWith(t, true)
	co := mgCreate(t, env, "etag-required", nil)
	require.Equal(t, http.StatusCreated, co.put(t, "/tools/lookup", toolBody("Lookup")).Status)
	tag, body := co.tagOf(t, "/tools/lookup")
	requireCode(t, co.put(t, "/tools/lookup", toolBody("Changed")), http.StatusPreconditionRequired, "precondition_required")
	_, after := co.tagOf(t, "/tools/lookup")
	require.JSONEq(t, string(body), string(after))
	resp := co.admin(t, http.MethodPut, "/tools/lookup", toolBody("Changed"))
	requireCode(t, resp, http.StatusPreconditionRequired, "precondition_required")
	require.Equal(t, http.StatusOK, co.put(t, "/tools/lookup", toolBody("Changed"), tag).Status)
}
