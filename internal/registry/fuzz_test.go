package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The fuzz targets of what a Company registers: OpenAPI descriptions,
// compiled directly and sent through PUT /apis/{name}, and MCP tools with
// their JSON Schemas, sent through PUT /tools/{name}. testdata/fuzz holds
// more seeds and every finding.

// openAPISeeds are descriptions from the tests, in JSON and YAML, and
// broken ones.
var openAPISeeds = []string{
	registry.OrdersYAML,
	`{"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {"/a/{id}": {"get": {"responses": {"200": {"description": "ok"}}}}}}`,
	`{"openapi": "3.0.3", "info": {"title": "T", "version": "1"}, "paths": {"/a": {"get": {"security": [{"nope": []}], "responses": {"200": {"description": "ok"}}}}}}`,
	`{"openapi": "3.0.3", "info": {"title": "T", "version": "1"}, "paths": {"/a": {"$ref": "#/paths/~1a"}}}`,
	`{"openapi": "3.0.3", "info": {"title": "T", "version": "1"}, "paths": {"/a": {"get": {"responses": {"200": {"$ref": "https://elsewhere.example/r.json"}}}}}}`,
	"openapi: 3.0.3\ninfo: {title: \"T\\0\", version: \"1\"}\npaths:\n  /a:\n    get: {responses: {\"200\": {description: ok}}}\n",
	"a: &a [*a]\n",
	"a: &a [1, 2]\nb: [*a, *a, *a]\n",
	"openapi: 2.0\n",
	"{openapi: 3.0.0}",
	`[]`,
	``,
}

// FuzzCompile feeds OpenAPI descriptions to Compile: a refusal is
// ErrInvalidOpenAPI; a description it compiles is stored as JSON that
// PostgreSQL's jsonb can hold, compiles again from that JSON to the same
// operations, and can be published.
func FuzzCompile(f *testing.F) {
	for _, seed := range openAPISeeds {
		f.Add([]byte(seed))
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw []byte) {
		spec, err := registry.Compile(ctx, raw)
		if err != nil {
			if spec != nil || !errors.Is(err, registry.ErrInvalidOpenAPI) {
				t.Fatalf("spec with error %v", err)
			}
			return
		}
		stored, _ := spec.DocumentJSON()
		if !utf8.Valid(stored) || bytes.Contains(stored, []byte(`\u0000`)) {
			t.Fatalf("stored description %q cannot go into jsonb", stored)
		}
		again, err := registry.Compile(ctx, stored)
		if err != nil {
			t.Fatalf("stored description %s does not compile again: %v", stored, err)
		}
		var ops, opsAgain []string
		spec.EachOperation(func(method, template string, acc *registry.Access) { ops = append(ops, method+" "+template) })
		again.EachOperation(func(method, template string, acc *registry.Access) { opsAgain = append(opsAgain, method+" "+template) })
		if !slices.Equal(ops, opsAgain) {
			t.Fatalf("operations %v compile again as %v", ops, opsAgain)
		}
		if _, err := registry.Published(stored, "https://gateway.example/apis/a", "https://issuer.example", nil); err != nil {
			t.Fatalf("stored description does not publish: %v", err)
		}
	})
}

// registration is a Company with an API key on an env, for the handler
// targets.
type registration struct {
	env *env
	key string
}

func newRegistration(f *testing.F) *registration {
	e := newEnv(f)
	e.CreateCompany(f, map[string]any{"slug": "fuzz", "organization": map[string]any{"name": "Fuzz", "domain": "fuzz.example"},
		"auth": map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}}})
	resp := e.Admin(f, http.MethodPost, "/admin/v1/companies/fuzz/api-keys", map[string]any{"name": "fuzz"})
	if resp.Status != http.StatusCreated {
		f.Fatalf("API key: %d %s", resp.Status, resp.Body)
	}
	key, _ := resp.JSON(f)["key"].(string)
	return &registration{env: e, key: key}
}

// put sends body to PUT /company/v1/{kind}/{name} and checks the answer
// is never a 5xx, and that a refusal leaves the registrations as they
// were.
func (r *registration) put(t *testing.T, kind, name string, body []byte) *peers.Response {
	t.Helper()
	state := func() string {
		var s string
		err := r.env.Pool.QueryRow(context.Background(), `SELECT
			coalesce((SELECT string_agg(name || updated_at::text, ',') FROM gateway_apis), '') || ';' ||
			coalesce((SELECT string_agg(name || updated_at::text, ',') FROM gateway_tools), '')`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()
	resp := r.env.Do(t, http.MethodPut, r.env.PublicURL("/company/v1/"+kind+"/"+name), body, "Authorization", "Bearer "+r.key)
	if resp.Refused(t) {
		if after := state(); after != before {
			t.Fatalf("a refused PUT changed the registrations from %q to %q", before, after)
		}
	}
	return resp
}

// FuzzPutAPI feeds registration bodies, with the description inline as
// an object or a string, to PUT /apis/{name}.
func FuzzPutAPI(f *testing.F) {
	for _, seed := range openAPISeeds {
		str, _ := json.Marshal(seed)
		f.Add([]byte(`{"origin": "https://api.fuzz.example/v1", "openapi": ` + string(str) + `}`))
		if len(seed) > 0 && seed[0] == '{' {
			f.Add([]byte(`{"origin": "https://api.fuzz.example/v1", "timeout_seconds": 5, "openapi": ` + seed + `}`))
		}
	}
	f.Add([]byte(`{"origin": "https://127.0.0.1/v1", "openapi_url": "https://fuzz.example/o.json", "openapi": {}}`))
	r := newRegistration(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r.put(t, "apis", "orders", body)
	})
}

// FuzzPutTool feeds tool registrations, with their input and output
// schemas and annotations, to PUT /tools/{name}.
func FuzzPutTool(f *testing.F) {
	for _, seed := range []string{
		`{"description": "Finds an order.", "url": "https://tools.fuzz.example/lookup", "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}}`,
		`{"title": "Lookup", "description": "Finds.", "url": "https://tools.fuzz.example/l?x=1", "scopes": ["orders:read"], "timeout_seconds": 30,
			"annotations": {"readOnlyHint": true, "x": 1}, "input_schema": {"type": "object", "$defs": {"a": {"type": "string"}}, "properties": {"id": {"$ref": "#/$defs/a"}}},
			"output_schema": {"type": "object"}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object", "properties": {"id": {"$ref": "https://elsewhere.example/s.json"}}}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object", "properties": {"h": {"type": "object", "x-mcp-header": "H"}}}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object", "pattern": "(?<=a)"}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object", "properties": {"a": {"$ref": "#"}}}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object", "\u0000": 1}}`,
		`{"description": "D", "url": "https://tools.fuzz.example/l", "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": "yes"}}`,
		`{"description": "D", "url": "http://tools.fuzz.example/l", "input_schema": "object", "scopes": ["nope"], "timeout_seconds": 0}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	r := newRegistration(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r.put(t, "tools", "lookup", body)
	})
}
