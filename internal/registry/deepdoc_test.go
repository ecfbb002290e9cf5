package registry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/registry"
)

// nestedDoc is a description whose one response schema nests depth
// arrays ({"type":"array","items":…}), as JSON.
func nestedDoc(depth int) json.RawMessage {
	schema := strings.Repeat(`{"type":"array","items":`, depth) + `{"type":"string"}` + strings.Repeat(`}`, depth)
	return json.RawMessage(`{"openapi":"3.0.3","info":{"title":"Deep","version":"1"},"paths":{"/a":{"get":{"responses":` +
		`{"200":{"description":"ok","content":{"application/json":{"schema":` + schema + `}}}}}}}}`)
}

// nestedYAML is nestedDoc as YAML in flow style.
func nestedYAML(depth int) string {
	return "openapi: 3.0.3\ninfo: {title: Deep, version: '1'}\npaths:\n  /a:\n    get:\n      responses:\n" +
		"        '200':\n          description: ok\n          content:\n            application/json:\n              schema: " +
		strings.Repeat("{type: array, items: ", depth) + "{type: string}" + strings.Repeat("}", depth) + "\n"
}

// TestCompileRefusesDeepDescriptions: a description nested 9,000 levels
// deep, as JSON or YAML, is refused at once, naming where; one with a
// schema 60 levels deep compiles and is published whole (issue 25, item
// 7: 9,000 levels took seconds of CPU to register and to publish).
func TestCompileRefusesDeepDescriptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, msg string
	}{
		{"JSON", string(nestedDoc(9000)), "more than 128 levels deep, under /paths/~1a/get/responses/200/content/application~1json/schema"},
		{"YAML", nestedYAML(9000), "more than 128 levels deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := registry.Compile(context.Background(), []byte(tc.doc))
			require.ErrorIs(t, err, registry.ErrInvalidOpenAPI)
			require.ErrorContains(t, err, tc.msg)
		})
	}

	spec, err := registry.Compile(context.Background(), nestedDoc(60))
	require.NoError(t, err)
	stored, err := spec.DocumentJSON()
	require.NoError(t, err)
	published, err := registry.Published(stored, "https://p.example/t/deep/api/deep", "https://p.example/t/deep")
	require.NoError(t, err)
	require.Equal(t, 61, strings.Count(string(published), `"type":`), "every level of the schema is published")
}

// TestManageRefusesDeepDescriptions: the registration API refuses a
// description too deep with invalid_request naming the field, and
// registers one 60 levels deep (its publication through the gateway is
// tested in internal/platform).
func TestManageRefusesDeepDescriptions(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	co := mgCreate(t, env, "deep", nil)

	resp := co.api(t, http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": nestedDoc(9000)})
	fields := mgRequireInvalid(t, resp, "openapi")
	require.Contains(t, fields["openapi"], "more than 128 levels deep, under /paths/~1a/get/responses/200/content/application~1json/schema")

	resp = co.api(t, http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": nestedYAML(9000)})
	fields = mgRequireInvalid(t, resp, "openapi")
	require.Contains(t, fields["openapi"], "more than 128 levels deep")

	resp = co.api(t, http.MethodPut, "/apis/deep", map[string]any{"origin": "https://deep.example.com", "openapi": nestedDoc(60)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, 61, strings.Count(string(co.api(t, http.MethodGet, "/apis/deep", nil).Body), `"type":`),
		"every level of the schema is stored")
}
