package registry_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
)

// nestedDoc is a description whose one response schema nests depth
// arrays ({"type":"array","items":…}), as JSON.
func nestedDoc(depth int) json.RawMessage {
	schema := strings.Repeat(`{"type":"array","items":`, depth) + `{"type":"string"}` + strings.Repeat(`}`, depth)
	return json.RawMessage(`{"openapi":"3.0.3","info":{"title":"Deep","version":"1"},"paths":{"/a":{"get":{"responses":` +
		`{"200":{"description":"ok","content":{"application/json":{"schema":` + schema + `}}}}}}}}`)
}

// TestManageRefusesDeepDescriptions: a description nested 9,000 levels
// deep, as JSON or YAML, is refused at once with invalid_request naming
// the field; one with a schema 60 levels deep is registered and published
// (issue 25, item 7: 9,000 levels took seconds of CPU to register and to
// publish).
func TestManageRefusesDeepDescriptions(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	co := mgCreate(t, env, "deep", nil)

	resp := co.api(t, http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": nestedDoc(9000)})
	fields := mgRequireInvalid(t, resp, "openapi")
	require.Contains(t, fields["openapi"], "more than 128 levels deep, under /paths/~1a/get/responses/200/content/application~1json/schema")

	yamlDoc := "openapi: 3.0.3\ninfo: {title: Deep, version: '1'}\npaths:\n  /a:\n    get:\n      responses:\n" +
		"        '200':\n          description: ok\n          content:\n            application/json:\n              schema: " +
		strings.Repeat("{type: array, items: ", 9000) + "{type: string}" + strings.Repeat("}", 9000) + "\n"
	resp = co.api(t, http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": yamlDoc})
	fields = mgRequireInvalid(t, resp, "openapi")
	require.Contains(t, fields["openapi"], "more than 128 levels deep")

	resp = co.api(t, http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": nestedDoc(60)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	published := env.Do(t, http.MethodGet, env.PublicURL("/t/deep/openapi/deep.json"), nil)
	require.Equal(t, http.StatusOK, published.Status, "%s", published.Body)
	require.Equal(t, 61, strings.Count(string(published.Body), `"type":`), "every level of the schema is published")
}
