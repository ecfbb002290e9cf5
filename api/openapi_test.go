package api

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadDocument loads and validates openapi.yaml.
func loadDocument(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context,
		openapi3.EnableMultiError(),
		openapi3.EnableSchemaFormatValidation(),
		openapi3.EnableSchemaPatternValidation(),
		openapi3.EnableSchemaDefaultsValidation(),
		openapi3.EnableExamplesValidation(),
	))
	return doc
}

// documentedOperations lists the document's operations as "METHOD /path".
func documentedOperations(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

func TestDocument(t *testing.T) {
	doc := loadDocument(t)
	assert.True(t, doc.IsOpenAPI31OrLater())

	want := slices.Clone(operations)
	sort.Strings(want)
	assert.Equal(t, want, documentedOperations(doc),
		"openapi.yaml and the list of served routes in this test differ")

	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		onCompanyDomain := slices.Contains(companyDomainPaths, path)
		switch {
		case onCompanyDomain:
			require.Len(t, item.Servers, 1, "%s is served on Company domains", path)
			assert.Equal(t, "https://{domain}", item.Servers[0].URL)
		case slices.Contains(opsPaths, path):
			// Health, readiness and metrics are on the private operations
			// listener, never on a public host.
			require.Len(t, item.Servers, 1, "%s is served on the operations listener", path)
			assert.Equal(t, "http://{ops_addr}", item.Servers[0].URL)
		default:
			assert.Empty(t, item.Servers, "%s is served on the platform host", path)
		}
		for method, op := range item.Operations() {
			name := method + " " + path
			require.NotEmpty(t, op.OperationID, name)
			if prev, dup := ids[op.OperationID]; dup {
				t.Errorf("operationId %s is used by %s and %s", op.OperationID, prev, name)
			}
			ids[op.OperationID] = name
			switch {
			case strings.HasPrefix(path, "/admin/v1/"):
				assert.Equal(t, openapi3.SecurityRequirements{{"operatorToken": {}}}, *op.Security, name)
			case strings.HasPrefix(path, "/company/v1/"), path == "/t/{slug}/oauth/introspect":
				assert.Equal(t, openapi3.SecurityRequirements{{"companyAPIKey": {}}}, *op.Security, name)
			case strings.HasPrefix(path, "/t/{slug}/poppy/conversations"), strings.HasPrefix(path, "/t/{slug}/api/"),
				path == "/poppy/browser-session/authorize", path == "/t/{slug}/poppy/operations":
				// Signed out or signed in (spec 8.2, 6 step 2); at the
				// gateway the API's own description decides which (spec 7).
				assert.Equal(t, openapi3.SecurityRequirements{{}, {"agentAccessToken": {}}}, *op.Security, name)
			case path == "/t/{slug}/mcp":
				// Signed out where mcp.signed_out allows it, else a token
				// issued for the server (spec 7).
				assert.Equal(t, openapi3.SecurityRequirements{{}, {"mcpAccessToken": {}}}, *op.Security, name)
			default:
				assert.Nil(t, op.Security, name)
			}
			if op.RequestBody != nil && strings.HasPrefix(path, "/admin/v1/") {
				for ct, mt := range op.RequestBody.Value.Content {
					s := mt.Schema.Value
					require.NotNil(t, s.AdditionalProperties.Has, "%s %s: admin bodies reject unknown members", name, ct)
					assert.False(t, *s.AdditionalProperties.Has, "%s %s: admin bodies reject unknown members", name, ct)
				}
			}
		}
	}
	assert.Len(t, doc.Servers, 1)
}
