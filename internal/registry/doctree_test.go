package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// countValues counts the values of a decoded JSON document: objects,
// arrays and scalars, not keys.
func countValues(v any) int {
	n := 1
	switch v := v.(type) {
	case map[string]any:
		for _, c := range v {
			n += countValues(c)
		}
	case []any:
		for _, c := range v {
			n += countValues(c)
		}
	}
	return n
}

// TestDescriptionsAreReadInLinearTime: a large description at the depth
// limit (400 paths, each with a schema nested to near MaxOpenAPIDepth) is
// read visiting each value exactly once, and is compiled, stored and
// published; the gateway's own rewriting works on plain values, whose
// encoding is linear, not on kin-openapi's types, whose encoding re-reads
// each nested schema once per enclosing one.
func TestDescriptionsAreReadInLinearTime(t *testing.T) {
	var paths []string
	const depth = MaxOpenAPIDepth - 10
	schema := strings.Repeat(`{"type":"array","items":`, depth) + `{"type":"string"}` + strings.Repeat(`}`, depth)
	for i := range 400 {
		paths = append(paths, fmt.Sprintf(`"/p%d":{"get":{"responses":{"200":{"description":"ok","content":{"application/json":{"schema":%s}}}}}}`, i, schema))
	}
	raw := []byte(`{"openapi":"3.0.3","info":{"title":"Big","version":"1"},"servers":[{"url":"https://origin.example"}],"paths":{` +
		strings.Join(paths, ",") + `}}`)
	require.Less(t, len(raw), MaxOpenAPIBytes)

	var plain any
	require.NoError(t, json.Unmarshal(raw, &plain))
	values := countValues(plain)
	require.Greater(t, values, 90_000)

	var tree docTree
	_, err := tree.parse(raw)
	require.NoError(t, err)
	require.Equal(t, values, tree.visits, "each value is visited once")

	s, err := Compile(context.Background(), raw)
	require.NoError(t, err)
	stored, err := s.DocumentJSON()
	require.NoError(t, err)
	pub, err := Published(stored, "https://p.example/t/shop/api/big", "https://p.example/t/shop", nil)
	require.NoError(t, err)
	var published any
	require.NoError(t, json.Unmarshal(pub, &published))
	require.Equal(t, values, countValues(published), "published whole, its servers replaced")
}

// TestDescriptionLimits: too deep, too many values (a YAML alias bomb
// among them) and not an object are refused before kin-openapi reads the
// document.
func TestDescriptionLimits(t *testing.T) {
	deep := `{"openapi":"3.0.3","x":` + strings.Repeat(`[`, MaxOpenAPIDepth) + strings.Repeat(`]`, MaxOpenAPIDepth) + `}`
	_, err := Compile(context.Background(), []byte(deep))
	require.ErrorContains(t, err, "more than 128 levels deep, under /x/0/0/0/0/0/0/0/…")
	fits := `{"openapi":"3.0.3","x":` + strings.Repeat(`[`, MaxOpenAPIDepth-1) + strings.Repeat(`]`, MaxOpenAPIDepth-1) + `}`
	var tree docTree
	_, err = tree.parse([]byte(fits))
	require.NoError(t, err)

	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, prev := 0, "a"; i < 8; i++ {
		name := fmt.Sprintf("b%d", i)
		bomb += fmt.Sprintf("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	tree = docTree{}
	_, err = tree.parse([]byte(bomb))
	require.ErrorContains(t, err, "more than 250000 values")
	require.Equal(t, MaxOpenAPINodes+1, tree.visits, "reading stops at the limit")

	_, err = Compile(context.Background(), []byte(`[1, 2]`))
	require.ErrorContains(t, err, "not an object")
}
