package discovery_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/discovery"
)

// The Operations extension (extension 2): a Company with the operations
// setting on lists exactly "operations": {"version": "3"} in poppy.json's
// extensions, next to the extensions it lists itself, with no endpoint
// unless operations.web is on: then the entry lists {issuer}/poppy/operations,
// where Personal Agents get and approve the website's operations; a
// Company with it off lists no operations.

// operationsEntry is poppy.json's operations member as JSON. Spec 3.3:
// "Each entry has a version, the extension's major version. [...] Each
// extension defines its other fields", and its example is one object
// per extension name: "example.com/gift-wrap": {"version": "1",
// "endpoint": ...}. The extension's excerpt shows an array (spec 1.0's
// form), which a 0.3 agent decoding entries as objects cannot read.
const operationsEntry = `{"version": "3"}`

func extensionsOf(t *testing.T, c companyCase) (json.RawMessage, bool) {
	t.Helper()
	raw, err := json.Marshal(discovery.BuildPoppyJSON(c.company(t), "ops.example", goldenURLs))
	require.NoError(t, err)
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &doc))
	ext, ok := doc["extensions"]
	return ext, ok
}

func TestPoppyJSONListsOperations(t *testing.T) {
	t.Parallel()
	const own = `"extensions": {
		"mediated-sign-in": {"version": "1"},
		"ops.example/gift-wrap": {"version": "2", "endpoint": "https://api.ops.example/poppy/gift-wrap"}
	}`
	const ownJSON = `"mediated-sign-in": {"version": "1"},
		"ops.example/gift-wrap": {"version": "2", "endpoint": "https://api.ops.example/poppy/gift-wrap"}`
	body := func(settings string) companyCase {
		return companyCase{name: "operations", body: `{"slug": "ops", "organization": {"name": "Ops Shop",
			"domain": "ops.example"}` + settings + `}`}
	}

	t.Run("on, with the Company's own extensions", func(t *testing.T) {
		ext, ok := extensionsOf(t, body(`, "operations": {"enabled": true}, `+own))
		require.True(t, ok)
		require.JSONEq(t, `{`+ownJSON+`, "operations": `+operationsEntry+`}`, string(ext))
	})
	t.Run("on, alone", func(t *testing.T) {
		ext, ok := extensionsOf(t, body(`, "operations": {"enabled": true}`))
		require.True(t, ok)
		require.JSONEq(t, `{"operations": `+operationsEntry+`}`, string(ext))
	})
	t.Run("a 0.3 agent decoding every entry as an object reads the document", func(t *testing.T) {
		raw, err := json.Marshal(discovery.BuildPoppyJSON(body(`, "operations": {"enabled": true, "web": true},
			"web": {"origin": "https://www.ops.example", "browser_join": true}, `+own).company(t), "ops.example", goldenURLs))
		require.NoError(t, err)
		var doc struct {
			Extensions map[string]struct {
				Version string `json:"version"`
			} `json:"extensions"`
		}
		require.NoError(t, json.Unmarshal(raw, &doc))
		require.Equal(t, "3", doc.Extensions["operations"].Version)
		require.Equal(t, "2", doc.Extensions["ops.example/gift-wrap"].Version)
	})
	t.Run("on for the website: the endpoint is listed", func(t *testing.T) {
		ext, ok := extensionsOf(t, body(`, "operations": {"enabled": true, "web": true},
			"web": {"origin": "https://www.ops.example", "browser_join": true}`))
		require.True(t, ok)
		require.JSONEq(t, `{"operations": {"version": "3",
			"endpoint": "https://poppyhost.example/t/ops/poppy/operations"}}`, string(ext))
	})
	t.Run("off, with the Company's own extensions", func(t *testing.T) {
		ext, ok := extensionsOf(t, body(`, "operations": {"enabled": false}, `+own))
		require.True(t, ok)
		require.JSONEq(t, `{`+ownJSON+`}`, string(ext))
	})
	t.Run("off by default, no extensions at all", func(t *testing.T) {
		_, ok := extensionsOf(t, body(``))
		require.False(t, ok, "no extensions: the member is left out")
	})
	t.Run("the Company's settings are not changed", func(t *testing.T) {
		c := body(`, "operations": {"enabled": true}, ` + own).company(t)
		before, err := json.Marshal(c.Settings)
		require.NoError(t, err)
		discovery.BuildPoppyJSON(c, "ops.example", goldenURLs)
		after, err := json.Marshal(c.Settings)
		require.NoError(t, err)
		require.Equal(t, string(before), string(after))
		require.NotContains(t, c.Settings.Extensions, "operations")
	})
}

// TestPatchOperationsShowsAtOnce: turning the setting on and off through
// the admin API changes the served poppy.json at once, and the Company's
// own extensions stay as they are.
func TestPatchOperationsShowsAtOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.CreateCompany(t, map[string]any{"slug": "opsserved",
		"organization": map[string]any{"name": "Ops Served", "domain": "opsserved.example"},
		"extensions":   map[string]any{"opsserved.example/gift-wrap": map[string]any{"version": "1"}}})
	patch := func(body string) {
		t.Helper()
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/opsserved", json.RawMessage(body))
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	extensions := func() map[string]any {
		t.Helper()
		return obj(requireDocument(t, get(t, env, env.URL("opsserved.example", poppyPath)), "poppy.json")["extensions"])
	}
	own := map[string]any{"version": "1"}

	require.Equal(t, map[string]any{"opsserved.example/gift-wrap": own}, extensions())
	patch(`{"operations": {"enabled": true}}`)
	require.Equal(t, map[string]any{"opsserved.example/gift-wrap": own,
		"operations": map[string]any{"version": "3"}}, extensions())
	patch(`{"operations": {"enabled": false}}`)
	require.Equal(t, map[string]any{"opsserved.example/gift-wrap": own}, extensions())
}
