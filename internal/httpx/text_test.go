package httpx

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidText(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{"": true, "héllo": true, "a\x00b": false, "\xff": false, "\xc3": false, "\\u0000": true} {
		require.Equal(t, want, ValidText(s), "%q", s)
	}
}

// TestCheckText: every string a JSON body can carry into a struct is
// checked, named by its JSON path.
func TestCheckText(t *testing.T) {
	t.Parallel()
	type Inner struct {
		Name string `json:"name"`
	}
	type Embedded struct {
		Flat string `json:"flat"`
	}
	type body struct {
		Embedded
		ID     string            `json:"id"`
		Ptr    *string           `json:"ptr"`
		Inner  Inner             `json:"inner"`
		List   []Inner           `json:"list"`
		Map    map[string]string `json:"map"`
		Any    any               `json:"any"`
		Raw    json.RawMessage   `json:"raw"`
		Bytes  []byte            `json:"bytes"`
		Untagd string
		Skip   string `json:"-"`
	}
	for _, tc := range []struct{ json, field string }{
		{`{"id":"ok","ptr":"ok","inner":{"name":"ok"},"list":[{"name":"ok"}],"map":{"k":"v"},"any":{"a":["b"]},"raw":{"a":"\\u0000"},"bytes":"AAA="}`, ""},
		{`{"id":"a\u0000"}`, "id"},
		{`{"ptr":"\u0000"}`, "ptr"},
		{`{"flat":"\u0000"}`, "flat"},
		{`{"inner":{"name":"\u0000"}}`, "inner.name"},
		{`{"list":[{"name":"ok"},{"name":"\u0000"}]}`, "list[1].name"},
		{`{"map":{"k":"\u0000"}}`, "map.k"},
		{`{"map":{"\u0000":"v"}}`, "map"},
		{`{"any":{"a":["b","\u0000"]}}`, "any.a[1]"},
		{`{"any":{"\u0000":1}}`, "any"},
		{`{"raw":{"a":["\u0000"]}}`, "raw.a[0]"},
		{`{"raw":{"\u0000":1}}`, "raw"},
		{"{\"raw\":\"\xff\"}", "raw"},
		{`{"Untagd":"\u0000"}`, "Untagd"},
		{`{"Skip":"\u0000"}`, ""},
	} {
		var b body
		require.NoError(t, json.Unmarshal([]byte(tc.json), &b), tc.json)
		err := CheckText(&b)
		if tc.field == "" {
			require.NoError(t, err, tc.json)
			continue
		}
		var e *Error
		require.True(t, errors.As(err, &e), "%s: %v", tc.json, err)
		require.Equal(t, CodeInvalidRequest, e.Code)
		require.Equal(t, []FieldError{{Field: tc.field, Message: textMessage}}, e.Fields, tc.json)
	}
	var top string
	require.NoError(t, json.Unmarshal([]byte(`"\u0000"`), &top))
	require.Equal(t, []FieldError{{Field: "(body)", Message: textMessage}}, CheckText(&top).(*Error).Fields)
}

func TestRequireText(t *testing.T) {
	t.Parallel()
	h := RequireText(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for target, want := range map[string]int{
		"/a/b?c=d&e=%C3%A9": http.StatusNoContent,
		"/a%2Fb?c=%5Cu0000": http.StatusNoContent,
		"/a%00b":            http.StatusBadRequest,
		"/a%ffb":            http.StatusBadRequest,
		"/a?c=%00":          http.StatusBadRequest,
		"/a?c=x&c=%c3":      http.StatusBadRequest,
		"/a?%00=1":          http.StatusBadRequest,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		require.Equal(t, want, rec.Code, target)
		if want == http.StatusBadRequest {
			require.Equal(t, CodeInvalidRequest, decodeBody(t, rec)["error"], target)
		}
	}
}
